"""ManagedLog: one topic partition's log - a list of ledgers in etcd (asyncio shell).

Owns: the topic's ledger list (``log_list.LedgerList``: CAS writes, the owner's
epoch), its one open ledger writer, the entry cache of recent entries and the
readers of older ledgers. Rules (docs/architecture.md §4, §6;
docs/compatibility.md §5.3, BookKeeper's "ledgers to log" recipe):
- ``open`` recovers (fences and closes) every ledger in the list that is not
  closed, drops empty ones, creates a new ledger (its id above every id in the
  list: ids come from per-gateway blocks, positions order by ledger id) and
  appends it to the list by compare-and-swap; it serves no write before that
  CAS succeeds. A failed CAS means another gateway took the topic: ``LogFenced``.
- appends complete in order; an add that comes back fenced makes the whole log
  fenced at once (``on_fenced``): the owner must drop the topic.
- rollover (the decisions are pure, in ``log_policy``): after each confirmed
  add, roll once the open ledger is full or old (``should_roll``); ``roll()``
  rolls now (tests, admin). One roll at a time, under the list lock: close the
  open ledger at its last confirmed entry, create the next (id above it), CAS
  the list (an empty old ledger is dropped from it and deleted); the appends
  made meanwhile wait and then go in order to the new writer;
- a writer that lost its write quorum (``writer_lost_quorum``) is closed and
  the log rolls at once; a roll that closed the old ledger but could not
  create the next leaves the log unwritable: appends go where
  ``log_policy.route_append`` says - the next one retries, at most every
  ``ROLL_RETRY_MS``, and appends in between fail retriably;
- when an add fails (not fenced), the appends waiting for a roll fail with it:
  they were made after it, and stored in the next ledger they would come
  before the producer's resend of the failed one; a fenced step (an add, the
  close, the list CAS) fences the whole log;
- trim deletes whole closed ledgers that every durable cursor passed and that
  retention no longer keeps (log_policy.ledgers_to_trim), list first, data after.
- reads never go past the last confirmed entry; recent entries come from the
  cache (bounded in bytes), older ones from the storage nodes;
- each entry's message count is recorded (``MessageCounts``) and each closed
  ledger's total is kept in the list, so stats and admin count messages; a
  ledger closed by recovery is recounted from its entries (``log_takeover``);
- a terminated log (``terminate``, recorded in the list) takes no more appends;
- every ledger it creates (at open, at rollover) gets the quorums ``quorums``
  gives at that moment (the namespace's persistence policy), else the config's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable

from coordination.clock import Clock
from coordination.errors import CoordinationError
from coordination.store import MetadataStore
from gateway.broker.log_layout import LedgerLayout
from gateway.broker.log_list import LedgerList
from gateway.broker.log_policy import (
    AppendRoute,
    Retention,
    ledgers_to_trim,
    route_append,
    should_roll,
    writer_lost_quorum,
)
from gateway.broker.log_reads import LedgerReaders, read_cached, read_entries
from gateway.broker.log_state import (
    EntryCache,
    LogClosed,
    LogConfig,
    LogError,
    LogFenced,
    QuorumSource,
)
from gateway.broker.log_takeover import Recount, delete_dropped, recover_ledgers
from gateway.broker.message_counts import MessageCounts
from gateway.errors import GatewayError
from storage.client.api import LedgerClient
from storage.client.writer import LedgerWriter
from storage.errors import Fenced, StorageError
from storage.formats.log_record import LedgerInfo
from storage.formats.positions import Position
from storage.types import LedgerMetadata

log = logging.getLogger(__name__)

READ_ENTRIES_MAX = 1000  # entries returned by one read call

AppendCallback = Callable[["asyncio.Future[Position]"], None]
Waiting = tuple[bytes, int, "asyncio.Future[Position]"]  # an append waiting for a roll: payload, messages


class ManagedLog:
    def __init__(
        self, topic_path: str, store: MetadataStore, client: LedgerClient, clock: Clock, config: LogConfig
    ) -> None:
        self.topic_path = topic_path
        self._client = client
        self._clock = clock
        self._config = config
        self._quorums: QuorumSource | None = None  # set by open
        self._list = LedgerList(store, topic_path, [], 0, {}, 0)  # read by open
        self._writer: LedgerWriter | None = None
        self._writer_opened_ms = 0
        self._current_entries = 0  # confirmed in the open ledger
        self._current_bytes = 0
        self._layout: LedgerLayout | None = None
        self._cache = EntryCache(config.cache_bytes_max, config.cache_budget)
        self._readers = LedgerReaders(client, clock, config.cache_budget)
        self._roll_task: asyncio.Task[None] | None = None
        self._unwritable = False  # the writer lost its quorum, or a roll closed it: roll when due
        self._roll_failed_ms: int | None = None  # when the last attempt to open a new ledger failed
        self._waiting: list[Waiting] = []  # appends waiting for the roll, in order
        self._recount = Recount()  # ledgers closed by recovery are counted again (log_takeover)
        self._new_entries = asyncio.Event()
        self.fenced = False
        self.closed = False
        self.on_fenced: Callable[[], None] | None = None
        self.entries_added = 0
        self.bytes_added = 0
        self.counts = MessageCounts()
        self.created_ledger_ms = 0
        self.terminated = False

    # ------------------------------------------------------------ opening

    @classmethod
    async def open(
        cls,
        topic_path: str,
        store: MetadataStore,
        client: LedgerClient,
        clock: Clock,
        config: LogConfig | None = None,
        quorums: QuorumSource | None = None,
        epoch: int = 0,
    ) -> ManagedLog:
        self = cls(topic_path, store, client, clock, config or LogConfig())
        self._quorums = quorums
        self._list = await LedgerList.load(store, topic_path, epoch)
        ledgers = self._list.ledgers
        self.terminated = self._list.terminated
        recovered = await recover_ledgers(client, clock, ledgers)
        writer = await self._create_ledger(max((info.ledger_id for info in ledgers), default=-1))
        try:
            await self._list.replace([*recovered, LedgerInfo(writer.ledger_id)])
        except LogFenced:
            await writer.abandon()
            with contextlib.suppress(StorageError):
                await client.delete(writer.ledger_id)
            raise LogFenced(
                f"topic {topic_path}: ledger list changed while opening (another owner)"
            ) from None
        self._writer = writer
        self._writer_opened_ms = self.created_ledger_ms = clock.now_ms()
        for info in recovered:
            self.counts.set_total(info.ledger_id, info.messages)
        self._recount.start(self, [info.ledger_id for info in recovered if info.messages == 0])
        await delete_dropped(client, ledgers, recovered)
        return self

    # ------------------------------------------------------------ queries

    @property
    def ledgers(self) -> list[LedgerInfo]:
        return list(self._list.ledgers)

    @property
    def ledger_count(self) -> int:
        """``len(ledgers)`` without the copy (the upkeep asks every topic each second)."""
        return len(self._list.ledgers)

    @property
    def current_ledger_id(self) -> int:
        return self._list.ledgers[-1].ledger_id

    @property
    def current_ledger_entries(self) -> int:
        return self._current_entries

    @property
    def current_ledger_bytes(self) -> int:
        return self._current_bytes

    @property
    def writer(self) -> LedgerWriter | None:
        return self._writer

    @property
    def layout(self) -> LedgerLayout:
        if self._layout is None:
            pairs = [(info.ledger_id, info.entries) for info in self._list.ledgers[:-1]]
            pairs.append((self._list.ledgers[-1].ledger_id, self._current_entries))
            self._layout = LedgerLayout(pairs)
        return self._layout

    @property
    def last_confirmed(self) -> Position:
        return self.layout.last_position()

    @property
    def total_entries(self) -> int:
        return self.layout.total_entries

    @property
    def total_bytes(self) -> int:
        return sum(info.size for info in self._list.ledgers[:-1]) + self._current_bytes

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        """A ledger's metadata (the open ledger's as its writer knows it)."""
        writer = self._writer
        if writer is not None and writer.ledger_id == ledger_id:
            return writer.metadata
        return await self._client.metadata.read(ledger_id)

    @property
    def writer_opened_ms(self) -> int:
        return self._writer_opened_ms

    @property
    def cache(self) -> EntryCache:
        return self._cache

    @property
    def created_ms(self) -> int:
        return self._list.created_ms

    @property
    def pending_appends(self) -> int:
        writer = self._writer
        return len(self._waiting) + (writer.outstanding if writer else 0)

    async def wait_for_entries(self, after: Position, timeout_s: float | None = None) -> bool:
        """Wait until an entry after ``after`` is confirmed (True) or the timeout."""
        while self.last_confirmed <= after and not self.closed and not self.fenced:
            self._new_entries.clear()
            try:
                await asyncio.wait_for(self._new_entries.wait(), timeout_s)
            except TimeoutError:
                return False
        return self.last_confirmed > after

    # ------------------------------------------------------------ appending

    def append(
        self, payload: bytes, messages: int = 1, on_done: AppendCallback | None = None
    ) -> asyncio.Future[Position]:
        """Append one entry holding ``messages`` messages; the future gives its
        position once confirmed (in order). ``on_done(future)``, if given, is called
        once it is settled: synchronously when the writer completes the add (no loop
        round), as a done-callback when the append fails before reaching the writer."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Position] = loop.create_future()
        if self.fenced:
            future.set_exception(LogFenced(f"topic {self.topic_path} is fenced"))
        elif self.closed or self.terminated:
            future.set_exception(LogClosed(f"topic {self.topic_path} is closed or terminated"))
        else:
            writer = self._writer
            route = route_append(
                self._roll_task is not None,
                writer is not None,
                self._unwritable,
                writer.error if writer is not None else None,
                self._roll_failed_ms,
                self._clock.now_ms(),
            )
            if route is AppendRoute.WRITE and self._writer is not None:
                self.write_to(self._writer, payload, messages, future, on_done)
                return future
            if route is AppendRoute.REFUSE:
                future.set_exception(LogError(f"topic {self.topic_path}: too few writable storage nodes"))
            else:
                self._waiting.append((payload, messages, future))
                if route is AppendRoute.ROLL:
                    self._start_roll()
        if on_done is not None:
            future.add_done_callback(on_done)
        return future

    def write_to(
        self,
        writer: LedgerWriter,
        payload: bytes,
        messages: int,
        future: asyncio.Future[Position],
        on_done: AppendCallback | None = None,
    ) -> None:
        ledger_id = writer.ledger_id
        size = len(payload)

        def done(entry_future: asyncio.Future[int]) -> None:
            if entry_future.cancelled():
                if not future.done():
                    future.cancel()
                    if on_done is not None:
                        on_done(future)
                return
            exc = entry_future.exception()
            if exc is not None:
                if isinstance(exc, Fenced):
                    self.fence(exc)
                    exc = LogFenced(str(exc))
                else:
                    if writer_lost_quorum(writer.error) and not self._unwritable:
                        self._unwritable = True  # closed at its LAC, and the log rolls, at once
                        self._start_roll()
                    # appends waiting for a roll came after this one: none may be stored before it
                    self._fail_waiting(LogError(f"topic {self.topic_path}: an earlier append failed: {exc}"))
                if not future.done():
                    future.set_exception(exc)
                    if on_done is not None:
                        on_done(future)
                return
            entry_id = entry_future.result()
            position = Position(ledger_id, entry_id)
            if ledger_id == self._list.ledgers[-1].ledger_id:
                self._current_entries = entry_id + 1
                self._current_bytes += size
                self._layout = None
            self.entries_added += 1
            self.bytes_added += size
            self.counts.on_entry(ledger_id, entry_id, messages)
            self._cache.put(position, payload)
            self._new_entries.set()
            if not future.done():
                future.set_result(position)
                if on_done is not None:
                    on_done(future)
            self._roll_if_due()

        try:
            writer.append_nowait(payload, done)
        except Fenced as exc:
            self.fence(exc)
            future.set_exception(LogFenced(str(exc)))
        except StorageError as exc:
            future.set_exception(LogError(f"append failed: {exc}"))
        else:
            return
        if on_done is not None:
            future.add_done_callback(on_done)

    def fence(self, exc: Exception) -> None:
        """Another gateway owns the topic now: fail everything waiting, tell the owner."""
        if self.fenced:
            return
        self.fenced = True
        log.warning("topic %s: writes fenced (%s); another gateway owns it now", self.topic_path, exc)
        self._new_entries.set()
        self._fail_waiting(LogFenced(str(exc)))
        if self.on_fenced is not None:
            self.on_fenced()

    # ------------------------------------------------------------ rollover

    def _roll_if_due(self) -> None:
        """An add was confirmed: roll if the open ledger is full or old."""
        if self._roll_task is not None or self.closed or self.fenced:
            return
        policy, now_ms = self._config.rollover, self._clock.now_ms()
        if should_roll(policy, self._current_entries, self._current_bytes, self._writer_opened_ms, now_ms):
            self._start_roll()

    def _start_roll(self) -> None:
        if self._roll_task is None and not self.closed and not self.fenced:
            name = f"roll-{self.topic_path}"
            self._roll_task = asyncio.get_running_loop().create_task(self._roll(), name=name)

    async def roll(self) -> None:
        """Roll now (tests, admin); waits for it."""
        self._start_roll()
        if self._roll_task is not None:
            await asyncio.shield(self._roll_task)

    def _fail_waiting(self, exc: Exception) -> None:
        for _, _, future in self._waiting:
            if not future.done():
                future.set_exception(exc)
        self._waiting.clear()

    async def _roll(self) -> None:
        old = self._writer
        assert old is not None
        try:
            async with self._list.lock:
                metadata = await old.close()  # at its LAC, also after it lost its quorum
                self._unwritable = True
                await self._switch_ledger(old, metadata)
                self._unwritable = False
                self._roll_failed_ms = None
        except Fenced as exc:
            self.fence(exc)
        except (StorageError, GatewayError, CoordinationError) as exc:
            log.warning("topic %s: rollover failed: %s", self.topic_path, exc)
            if isinstance(exc, LogFenced):
                self.fence(exc)
            elif self._unwritable:
                self._roll_failed_ms = self._clock.now_ms()
        finally:
            self._roll_task = None
        waiting, self._waiting = self._waiting, []
        for payload, messages, future in waiting:
            if future.done():
                continue
            writer = self._writer
            if self.fenced or writer is None:
                future.set_exception(LogFenced(f"topic {self.topic_path} is fenced"))
            elif self._unwritable:
                future.set_exception(LogError(f"topic {self.topic_path}: too few writable storage nodes"))
            else:
                self.write_to(writer, payload, messages, future)

    async def _switch_ledger(self, old: LedgerWriter, metadata: LedgerMetadata) -> None:
        """Put the next ledger after ``old`` (closed, ``metadata``) into the list and
        write to it (the list lock held): ``old`` stays in the list unless empty."""
        closed_info = self._closed_info(old.ledger_id, metadata.last_entry_id + 1, metadata.length)
        writer = await self._create_ledger(old.ledger_id)
        new_list = [*self._list.ledgers[:-1]]
        if closed_info.entries > 0:
            new_list.append(closed_info)
        new_list.append(LedgerInfo(writer.ledger_id))
        await self._list.replace(new_list)
        if closed_info.entries == 0:
            with contextlib.suppress(StorageError):
                await self._client.delete(old.ledger_id)
        self._writer = writer
        self._writer_opened_ms = self.created_ledger_ms = self._clock.now_ms()
        self._current_entries = 0
        self._current_bytes = 0
        self._layout = None

    async def _create_ledger(self, id_above: int) -> LedgerWriter:
        """A new ledger whose id is above ``id_above`` (the log's ids increase, wherever
        each ledger was created: positions order by ledger id)."""
        q = self._config.quorums(self._quorums)
        return await self._client.create(q.ensemble_size, q.write_quorum, q.ack_quorum, id_above=id_above)

    async def record_total(self, ledger_id: int) -> None:
        """Record a closed ledger's message total (as counted) in the ledger list."""
        total = self.counts.ledger_total(ledger_id)
        async with self._list.lock:
            if total <= 0 or self.closed or self.fenced:
                return
            new_list = [
                dataclasses.replace(info, messages=total) if info.ledger_id == ledger_id else info
                for info in self._list.ledgers
            ]
            if new_list != self._list.ledgers:
                await self._list.replace(new_list)

    def _closed_info(self, ledger_id: int, entries: int, size: int) -> LedgerInfo:
        messages = self.counts.ledger_total(ledger_id) if entries else 0
        return LedgerInfo(ledger_id, entries, size, self._clock.now_ms(), messages)

    async def terminate(self) -> Position:
        """Seal the log: no more appends, ever (recorded in the ledger list). Waits
        for the appends already made; returns the last entry."""
        if self.fenced:
            raise LogFenced(f"topic {self.topic_path} is fenced")
        if not self.terminated:
            async with self._list.lock:
                self._list.extra = {**self._list.extra, "terminated": True}
                try:
                    await self._list.replace(list(self._list.ledgers))
                except LogFenced as exc:
                    self.fence(exc)
                    raise
                self.terminated = True
        writer = self._writer
        while writer is not None and writer.outstanding and not self.fenced:
            await asyncio.sleep(0.005)
        return self.last_confirmed

    # ------------------------------------------------------------ trimming

    async def trim(self, consumed_upto: Position | None, retention: Retention) -> list[int]:
        """Delete ledgers no cursor needs and retention does not keep; returns their ids."""
        if self.closed or self.fenced:
            return []
        async with self._list.lock:
            doomed = ledgers_to_trim(self._list.ledgers, consumed_upto, retention, self._clock.now_ms())
            if not doomed:
                return []
            gone = set(doomed)
            await self._list.replace([info for info in self._list.ledgers if info.ledger_id not in gone])
            self._layout = None
        for ledger_id in doomed:
            self.counts.forget(ledger_id)
            await self._readers.drop(ledger_id)
            with contextlib.suppress(StorageError):
                await self._client.delete(ledger_id)
        return doomed

    # ------------------------------------------------------------ reading

    async def read(
        self, start: Position, max_entries: int = READ_ENTRIES_MAX
    ) -> list[tuple[Position, bytes]]:
        """Confirmed entries from ``start`` (inclusive) on, at most ``max_entries``,
        never crossing into the next ledger in one call."""
        return await read_entries(self.layout, self._cache, self._readers, self._writer, start, max_entries)

    def read_cached(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
        """Like ``read`` but only from the cache, without waiting (``log_reads.read_cached``)."""
        return read_cached(self.last_confirmed, self._cache, start, max_entries)

    async def read_entry(self, position: Position) -> bytes | None:
        got = await self.read(position, 1)
        return got[0][1] if got and got[0][0] == position else None

    # ------------------------------------------------------------ closing

    @property
    def recounting(self) -> bool:
        """A recount of inherited ledgers is running or waiting for a slot (log_takeover)."""
        return self._recount.running

    async def close(self) -> None:
        """Close the open ledger (graceful unload); the next owner recovers nothing."""
        if self.closed:
            return
        self.closed = True
        self._new_entries.set()
        self._recount.stop()
        if self._roll_task is not None:  # wait for the roll under way
            with contextlib.suppress(Exception):
                await self._roll_task
        self._fail_waiting(LogError(f"topic {self.topic_path} is closing"))
        writer = self._writer
        if writer is not None and not self.fenced:
            try:
                metadata = await writer.close()
            except StorageError as exc:
                log.info("topic %s: closing ledger %d: %s", self.topic_path, writer.ledger_id, exc)
            else:  # record the closed ledger (and its message count) for the next owner
                info = self._closed_info(writer.ledger_id, metadata.last_entry_id + 1, metadata.length)
                with contextlib.suppress(GatewayError, StorageError):
                    async with self._list.lock:
                        await self._list.replace([*self._list.ledgers[:-1], info])
        elif writer is not None:
            await writer.abandon()
        await self._readers.close()
        self._cache.clear()  # its entries leave the gateway's cache budget

    async def abandon(self) -> None:
        """Stop without closing the ledger (fenced, or shutting down hard)."""
        self.closed = True
        self._new_entries.set()
        self._recount.stop()
        if self._writer is not None:
            await self._writer.abandon()
        await self._readers.close()
        self._cache.clear()
