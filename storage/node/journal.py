"""The journal shell: drives ``JournalCore`` with the clock, the journal files and a sync thread.

Owns: the journal's in-memory records (bytes waiting for their group) and the
execution of the core's effects. Runs entirely on the event-loop thread (one
owner, no locks); the only other thread is the sync thread, which fdatasyncs
the fds of the one ``SyncJob`` it was handed (through the loop's executor, so
the simulation decides when it returns). A small group (at most
``inline_sync_records``, by default ``INLINE_SYNC_RECORDS``, records and
``INLINE_SYNC_BYTES`` bytes: light load) is
synced on the loop thread instead, and its records are acked right after (no
loop round in between): that blocks the loop for one short fdatasync (~0.2 ms
here) but saves the thread hand-off (~45 us of CPU and as much latency per
sync, measured); larger groups keep the thread, so the sync overlaps reading
the next group (syncing 128 KiB entries inline cost W1 1 KiB ~15 %, measured).
Rule (docs/architecture.md §3 durability contract): a record's ``on_durable`` callback runs
only after an fdatasync covering it returned; an fdatasync failure is fatal.
``on_durable`` also gets each record's location in the journal (``file id << 32 |
offset of the record``): the index points there, the entry is not copied elsewhere.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
from collections.abc import Callable
from typing import Any

from coordination.clock import Clock
from storage.node.journal_core import Ack, Effect, JournalCore, Reject, Sync, Write
from storage.node.journal_io import Buffer, JournalWriter, SyncJob, fatal

log = logging.getLogger("folio.storage.journal")

INLINE_SYNC_RECORDS = 4  # groups up to this size are synced on the loop thread ...
INLINE_SYNC_BYTES = 64 * 1024  # ... if they hold at most this many journal bytes

DurableCallback = Callable[[list[Any], list[int]], None]  # (cookies, record locations)
SyncObserver = Callable[[float, int], None]  # (seconds, records in the batch)


class Journal:
    def __init__(
        self,
        core: JournalCore,
        writer: JournalWriter,
        clock: Clock,
        on_durable: DurableCallback,
        on_sync: SyncObserver | None = None,
        inline_sync_records: int = INLINE_SYNC_RECORDS,
    ) -> None:
        self._core = core
        self._inline_sync_records = inline_sync_records
        self._writer = writer
        self._clock = clock
        self._on_durable = on_durable
        self._on_sync = on_sync
        self._loop = asyncio.get_running_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="journal-sync")
        # record id -> [parts, size (until written, then its location), cookie]
        self._records: dict[int, list[Any]] = {}
        self._next_id = 1
        self._idle_scheduled = False
        self._round_ms = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._sync_position: tuple[int, int] = writer.position
        self._sync_count = 0
        self.durable_position: tuple[int, int] = writer.position
        self._drained: list[asyncio.Future[None]] = []
        self._closed = False

    # ------------------------------------------------------------ API

    def submit(self, parts: tuple[Buffer, ...], size: int, cookie: Any) -> bool:
        """Queue one record (``parts`` concatenated). False = queue full, nothing queued."""
        if self._closed:
            return False
        record_id = self._next_id
        self._next_id = record_id + 1
        self._records[record_id] = [parts, size, cookie]
        # one clock read per loop round: later adds of the round reuse it (an
        # enqueue time at most one round early only closes a group sooner)
        if self._idle_scheduled:
            now_ms = self._round_ms
        else:
            now_ms = self._round_ms = self._clock.now_ms()
        effects = self._core.on_add(record_id, size, now_ms)
        if effects:
            if isinstance(effects[0], Reject):
                del self._records[record_id]
                return False
            self._execute(effects)
            self._arm_timer()
        if not self._idle_scheduled:
            # the deadline is (re)armed there too: at most one loop round later
            self._idle_scheduled = True
            self._loop.call_soon(self._queue_empty)
        return True

    @property
    def queued_bytes(self) -> int:
        return self._core.queued_bytes

    @property
    def sync_count(self) -> int:
        return self._sync_count

    async def drain(self) -> None:
        """Flush and wait until every queued record is durable (shutdown)."""
        while not self._core.idle:
            self._execute(self._core.on_flush(self._clock.now_ms()))
            if self._core.idle:  # a small group is synced (and acked) inline
                return
            fut: asyncio.Future[None] = self._loop.create_future()
            self._drained.append(fut)
            await fut

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        self._executor.shutdown(wait=True)
        self._writer.close()

    # ------------------------------------------------------------ effects

    def _execute(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Write):
                self._write(effect.record_ids)
            elif isinstance(effect, Sync):
                self._start_sync(effect)
            elif isinstance(effect, Ack):
                self._ack(effect.record_ids)
            else:  # a Reject only ever answers on_add
                raise AssertionError(f"unexpected effect {effect!r}")

    def _write(self, record_ids: tuple[int, ...]) -> None:
        """Append one group; note where each record landed (a group never spans files)."""
        records = self._records
        writer = self._writer
        base = writer.file_id << 32
        offset = writer.offset
        buffers: list[Buffer] = []
        for record_id in record_ids:
            record = records[record_id]
            buffers.extend(record[0])
            size = record[1]
            record[1] = base | offset
            offset += size
        end = writer.write(buffers)
        if end != (base >> 32, offset):  # a record's size did not match its bytes
            fatal(f"journal bookkeeping error: group ends at {end}, expected {(base >> 32, offset)}")

    def _start_sync(self, sync: Sync) -> None:
        job: SyncJob = self._writer.take_sync_job()
        before, self._sync_position = self._sync_position, self._writer.position
        count = len(sync.record_ids)
        file_id, offset = self._sync_position
        small = before[0] == file_id and offset - before[1] <= INLINE_SYNC_BYTES
        if count <= self._inline_sync_records and small and not self._writer.failpoints.fsync_delay_ms:
            try:
                seconds = self._writer.run_sync(job)
            except OSError as exc:  # anything else is a bug: it propagates, nothing is acked
                fatal(f"journal fdatasync failed (on the loop thread): {exc!r}")
            # completed here, not one loop round later: a Sync is always the last effect
            # of its list, so nothing of the caller's list is left to run after this
            self._synced(seconds, count)
            return
        future = self._loop.run_in_executor(self._executor, self._writer.run_sync, job)
        future.add_done_callback(functools.partial(self._sync_done, count=count))

    def _sync_done(self, future: asyncio.Future[float], count: int) -> None:
        exc = future.exception()
        if exc is not None:
            fatal(f"journal fdatasync failed (on the sync thread): {exc!r}")
        self._synced(future.result(), count)

    def _synced(self, seconds: float, count: int) -> None:
        self._sync_count += 1
        if self._on_sync is not None:
            self._on_sync(seconds, count)
        self.durable_position = self._sync_position
        self._execute(self._core.on_sync_done(self._clock.now_ms()))
        self._arm_timer()
        if self._drained and self._core.idle:
            waiters, self._drained = self._drained, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        elif self._drained:
            self._execute(self._core.on_flush(self._clock.now_ms()))

    def _ack(self, record_ids: tuple[int, ...]) -> None:
        records = self._records
        cookies: list[Any] = []
        locations: list[int] = []
        for record_id in record_ids:
            _, location, cookie = records.pop(record_id)
            cookies.append(cookie)
            locations.append(location)
        self._on_durable(cookies, locations)

    # ------------------------------------------------------------ triggers

    def _queue_empty(self) -> None:
        self._idle_scheduled = False
        self._execute(self._core.on_queue_empty(self._clock.now_ms()))
        self._arm_timer()

    def _arm_timer(self) -> None:
        deadline = self._core.next_deadline_ms()
        if deadline == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = deadline
        if deadline is not None:
            # a little late rather than early: the clock has millisecond resolution
            delay = max(0, deadline - self._clock.now_ms()) / 1000 + 0.0002
            self._timer = self._loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self._execute(self._core.on_timer(self._clock.now_ms()))
        self._arm_timer()
