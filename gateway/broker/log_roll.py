"""Rolling a managed log onto its next ledger, and healing one left without a writable ledger (asyncio shell).

Owns: ``Roller``, one per ``ManagedLog``: its one roll task at a time, the
appends that wait for it, and the state of a log without a writable ledger
(``unwritable``, when the last attempt failed). The decisions are pure, in
``log_policy``; the ledger list and the writer belong to the log. Rules
(docs/architecture.md §4; docs/compatibility.md §5.3):
- after each confirmed add, roll once the open ledger is full or old
  (``should_roll``); ``roll()`` rolls now (tests, admin);
- a roll, under the log's list lock: close the open ledger at its last
  confirmed entry, create the next (id above it), CAS the list (an empty old
  ledger is dropped from it and deleted); the appends made meanwhile wait
  and then go in order to the new writer;
- a writer that lost its write quorum (``writer_lost_quorum``) is closed and
  the log rolls at once; a roll that closed the old ledger but could not create
  the next leaves the log unwritable: the next append retries, at most every
  ``ROLL_RETRY_MS`` (``route_append``), and appends in between fail retriably;
- when an add fails (not fenced), the appends waiting for a roll fail with it:
  they were made after it, and stored in the next ledger they would come before
  the producer's resend of the failed one;
- a fenced step (an add, the close, the list CAS) fences the whole log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from coordination.clock import Clock
from coordination.errors import CoordinationError
from gateway.broker.log_policy import (
    AppendRoute,
    RolloverPolicy,
    route_append,
    should_roll,
    writer_lost_quorum,
)
from gateway.broker.log_state import LogError, LogFenced
from gateway.errors import GatewayError
from storage.client.writer import LedgerWriter
from storage.errors import Fenced, StorageError
from storage.formats.positions import Position

if TYPE_CHECKING:
    from gateway.broker.managed_log import ManagedLog

log = logging.getLogger(__name__)

Waiting = tuple[bytes, int, "asyncio.Future[Position]"]  # payload, messages, its future


class Roller:
    def __init__(self, managed: ManagedLog, policy: RolloverPolicy, clock: Clock) -> None:
        self._log = managed
        self._policy = policy
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._unwritable = False  # the writer lost its quorum, or a roll closed it: roll when due
        self._failed_ms: int | None = None  # when the last attempt to open a new ledger failed
        self.waiting: list[Waiting] = []

    def route(self, writer: LedgerWriter | None, now_ms: int) -> AppendRoute:
        return route_append(
            self._task is not None,
            writer is not None,
            self._unwritable,
            writer.error if writer is not None else None,
            self._failed_ms,
            now_ms,
        )

    def on_added(self) -> None:
        """An add was confirmed: roll if the open ledger is full or old."""
        managed = self._log
        if self._task is not None or managed.closed or managed.fenced:
            return
        entries, size = managed.current_ledger_entries, managed.current_ledger_bytes
        if should_roll(self._policy, entries, size, managed.writer_opened_ms, self._clock.now_ms()):
            self.start()

    def on_add_failed(self, writer: LedgerWriter) -> None:
        """An add failed (not fenced): a writer that lost its quorum is closed at
        its LAC and the log rolls, at once."""
        if writer_lost_quorum(writer.error) and not self._unwritable:
            self._unwritable = True
            self.start()

    def start(self) -> None:
        managed = self._log
        if self._task is None and not managed.closed and not managed.fenced:
            name = f"roll-{managed.topic_path}"
            self._task = asyncio.get_running_loop().create_task(self._roll(), name=name)

    async def roll(self) -> None:
        """Roll now; waits for it."""
        managed = self._log
        if self._task is None and not managed.closed and not managed.fenced:
            self._task = asyncio.get_running_loop().create_task(self._roll())
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        """Wait for the roll under way, if any (the log is closing)."""
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task

    def fail_waiting(self, exc: Exception) -> None:
        for _, _, future in self.waiting:
            if not future.done():
                future.set_exception(exc)
        self.waiting.clear()

    async def _roll(self) -> None:
        managed = self._log
        old = managed.writer
        assert old is not None
        try:
            async with managed.list_lock:
                metadata = await old.close()  # at its LAC, also after it lost its quorum
                self._unwritable = True
                await managed.switch_ledger(old, metadata)
                self._unwritable = False
                self._failed_ms = None
        except Fenced as exc:
            managed.fence(exc)
        except (StorageError, GatewayError, CoordinationError) as exc:
            log.warning("topic %s: rollover failed: %s", managed.topic_path, exc)
            if isinstance(exc, LogFenced):
                managed.fence(exc)
            elif self._unwritable:
                self._failed_ms = self._clock.now_ms()
        finally:
            self._task = None
        waiting, self.waiting = self.waiting, []
        for payload, messages, future in waiting:
            if future.done():
                continue
            writer = managed.writer
            if managed.fenced or writer is None:
                future.set_exception(LogFenced(f"topic {managed.topic_path} is fenced"))
            elif self._unwritable:
                future.set_exception(LogError(f"topic {managed.topic_path}: too few writable storage nodes"))
            else:
                managed.write_to(writer, payload, messages, future)
