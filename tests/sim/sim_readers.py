"""Simulated recovering client and readers: the real ``RecoveryCore`` and ``read_core``.

Owns: the shells around the pure recovery and read cores in the simulation.
``RecoveryShell`` does open-with-recovery: CAS the ledger IN_RECOVERY, run one
``RecoveryCore`` (fence -> coverage -> read forward -> write back), CAS it
CLOSED with ``close_recovered``; a failed attempt is retried from fresh
metadata after a back-off, as a real recoverer would. ``ReaderShell`` reads the
ledger entry by entry with ``EntryReadCore`` up to ``read_bound`` (LAC learnt
with ``LacPoll`` while OPEN, ``last_entry_id`` once CLOSED): as a tailing reader
while the writer writes, and as the final read-back after recovery.
Rule: replies of an abandoned attempt or read are ignored; every request has a
time-out (a real connection's), reported to the core as UNAVAILABLE.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from coordination import keys
from coordination.memory_store import MemoryStore
from coordination.store import update_with_retry
from storage import wire
from storage.client import read_core
from storage.client.recovery_core import (
    CloseLedger,
    RecoveryCore,
    RecoveryEffect,
    RecoveryFailed,
    SendFence,
    SendRead,
    SendRecoveryAdd,
    close_recovered,
)
from storage.errors import StorageError
from storage.types import NO_ENTRY, LedgerMetadata, LedgerState

from .checkers import Checker
from .sim_client import SimClient
from .sim_node import Reply
from .world import MetaService, Scheduler, SimNetwork, Timer

REQUEST_TIMEOUT_MS = 300
ATTEMPT_MS_MAX = 5_000  # a recovery attempt still running after this is stuck (a liveness bug)


class RecoveryShell(SimClient):
    def __init__(
        self,
        name: str,
        sched: Scheduler,
        net: SimNetwork,
        meta: MetaService,
        store: MemoryStore,
        ledger_id: int,
        read_window: int,
        attempts_max: int = 200,
        retry_ms: int = 50,
    ) -> None:
        super().__init__(name, sched, net)
        self._meta = meta
        self._store = store
        self._ledger_id = ledger_id
        self._key = keys.ledger(ledger_id)
        self._read_window = read_window
        self.attempts_max = attempts_max
        self._retry_ms = retry_ms
        self.attempt = 0
        self.failures: list[StorageError] = []
        self.closed: LedgerMetadata | None = None
        self.gave_up = False
        self.stuck: str | None = None
        self._core: RecoveryCore | None = None

    @property
    def done(self) -> bool:
        return self.closed is not None or self.gave_up

    def start(self) -> None:
        self._meta.call(self._mark_in_recovery, self._on_marked)

    async def _mark_in_recovery(self) -> LedgerMetadata:
        def modify(old: bytes | None) -> bytes | None:
            assert old is not None
            md = LedgerMetadata.from_json(old)
            if md.state is LedgerState.OPEN:
                return md.with_changes(state=LedgerState.IN_RECOVERY).to_json()
            return None  # already in recovery (an earlier attempt) or closed

        value, _ = await update_with_retry(self._store, self._key, modify)
        assert value is not None
        return LedgerMetadata.from_json(value)

    def _on_marked(self, result: Any) -> None:
        if isinstance(result, Exception):
            raise result
        if result.state is LedgerState.CLOSED:
            self.closed = result
            return
        self.attempt += 1
        self._core = RecoveryCore(result, read_window=self._read_window)
        self.sched.after(ATTEMPT_MS_MAX, partial(self._watchdog, self.attempt))
        self._execute(self.attempt, self._core.start())

    def _watchdog(self, attempt: int) -> None:
        core = self._core
        if attempt == self.attempt and core is not None and not core.done and self.closed is None:
            self.stuck = (
                f"recovery attempt {attempt} made no decision in {ATTEMPT_MS_MAX}ms: {describe(core)}"
            )
            self.gave_up = True
            self._core = None

    def _execute(self, attempt: int, effects: list[RecoveryEffect]) -> None:
        core = self._core
        if attempt != self.attempt or core is None:
            return
        ledger = self._ledger_id
        for effect in effects:
            if isinstance(effect, SendFence):
                on_reply = partial(self._on_fence, attempt, core, effect.node)
                self.request(effect.node, wire.Op.FENCE, ledger, on_reply, timeout_ms=REQUEST_TIMEOUT_MS)
            elif isinstance(effect, SendRead):
                on_reply = partial(self._on_read, attempt, core, effect.node, effect.entry_id)
                self.request(
                    effect.node,
                    wire.Op.READ,
                    ledger,
                    on_reply,
                    effect.entry_id,
                    timeout_ms=REQUEST_TIMEOUT_MS,
                )
            elif isinstance(effect, SendRecoveryAdd):
                on_reply = partial(self._on_write_back, attempt, core, effect.node, effect.entry_id)
                self.request(
                    effect.node,
                    wire.Op.ADD,
                    ledger,
                    on_reply,
                    effect.entry_id,
                    effect.body,
                    timeout_ms=REQUEST_TIMEOUT_MS,
                )
            elif isinstance(effect, CloseLedger):
                self._meta.call(partial(self._close, effect.last_entry_id, effect.length), self._on_closed)
            elif isinstance(effect, RecoveryFailed):
                self.failures.append(effect.error)
                self._core = None
                if self.attempt >= self.attempts_max:
                    self.gave_up = True
                else:
                    self.sched.after(self._retry_ms, self.start)
            else:
                raise AssertionError(f"unexpected recovery effect {effect!r}")

    def _on_fence(self, attempt: int, core: RecoveryCore, node: str, r: Reply) -> None:
        self._execute(attempt, core.on_fence_response(node, r.status, r.lac))

    def _on_read(self, attempt: int, core: RecoveryCore, node: str, entry_id: int, r: Reply) -> None:
        self._execute(attempt, core.on_read_response(node, entry_id, r.status, r.data))

    def _on_write_back(self, attempt: int, core: RecoveryCore, node: str, entry_id: int, r: Reply) -> None:
        self._execute(attempt, core.on_recovery_add_response(node, entry_id, r.status))

    async def _close(self, last_entry_id: int, length: int) -> LedgerMetadata:
        def modify(old: bytes | None) -> bytes | None:
            assert old is not None
            closed = close_recovered(LedgerMetadata.from_json(old), last_entry_id, length)
            return closed.to_json() if closed is not None else None

        value, _ = await update_with_retry(self._store, self._key, modify)
        assert value is not None
        return LedgerMetadata.from_json(value)

    def _on_closed(self, result: Any) -> None:
        if isinstance(result, Exception):
            raise result
        self.closed = result


def describe(core: RecoveryCore) -> str:
    """The recovery core's progress, for a stuck-recovery report (reads its private state)."""
    return (
        f"fenced={core.fenced} start={core.start_entry_id} found_until={core._found_until} "
        f"end={core._end} reads={sorted(core._reads)} write_backs={sorted(core._writebacks)}"
    )


class ReaderShell(SimClient):
    """Reads entries 0,1,2,... in order, never past ``read_core.read_bound``."""

    FAILURES_MAX = 20  # consecutive failed reads of one entry before the final read-back gives up

    def __init__(
        self,
        name: str,
        sched: Scheduler,
        net: SimNetwork,
        meta: MetaService,
        store: MemoryStore,
        checker: Checker,
        ledger_id: int,
        poll_ms: int,
        stop_when_closed: bool = True,
    ) -> None:
        super().__init__(name, sched, net)
        self._meta = meta
        self._store = store
        self._checker = checker
        self._ledger_id = ledger_id
        self._key = keys.ledger(ledger_id)
        self._poll_ms = poll_ms
        self._stop_when_closed = stop_when_closed
        self.read: dict[int, bytes] = {}
        self.next_entry = 0
        self.lac = NO_ENTRY
        self.done = False
        self.stopped = False
        self.complete = False
        self._failures = 0
        self._md: LedgerMetadata | None = None
        self._bound = NO_ENTRY
        self._entry: read_core.EntryReadCore | None = None
        self._timer = Timer(sched, self._on_timer, checker.fail)

    def start(self) -> None:
        self._poll()

    def stop(self) -> None:
        self.stopped = True

    def _poll(self) -> None:
        if not self.done and not self.stopped:
            self._meta.call(lambda: self._store.get(self._key), self._on_metadata)

    def _again(self) -> None:
        self.sched.after(self._poll_ms, self._poll)

    def _on_metadata(self, result: Any) -> None:
        if isinstance(result, Exception):
            raise result
        md = LedgerMetadata.from_json(result.value)
        self._md = md
        if md.state is LedgerState.CLOSED:
            self._read_upto(read_core.read_bound(md, self.lac))
            return
        poll = read_core.LacPoll(md.last_ensemble, self.lac)
        for node in md.last_ensemble:
            self.request(
                node,
                wire.Op.READ_LAC,
                self._ledger_id,
                partial(self._on_lac, poll, node),
                timeout_ms=REQUEST_TIMEOUT_MS,
            )

    def _on_lac(self, poll: read_core.LacPoll, node: str, reply: Reply) -> None:
        lac = poll.on_response(node, reply.status, reply.lac)
        if lac is not None:
            self.lac = max(self.lac, lac)
            assert self._md is not None
            self._read_upto(read_core.read_bound(self._md, self.lac))

    def _read_upto(self, bound: int) -> None:
        md = self._md
        assert md is not None
        if self.stopped:
            return
        if self.next_entry > bound:
            if md.state is LedgerState.CLOSED and self._stop_when_closed:
                self.done = True
                self.complete = True
            else:
                self._again()
            return
        read_core.check_readable(md, self.lac, self.next_entry, self.next_entry)
        entry_id = self.next_entry
        core = read_core.EntryReadCore(self._ledger_id, entry_id, md.write_set(entry_id))
        self._entry = core
        self._bound = bound
        self._on_read_effects(core, core.start(self.now))

    def _on_read_effects(self, core: read_core.EntryReadCore, effects: list[read_core.ReadEffect]) -> None:
        if core is not self._entry:
            return
        for effect in effects:
            if isinstance(effect, read_core.ReadFrom):
                on_reply = partial(self._on_read_reply, core, effect.node)
                self.request(
                    effect.node,
                    wire.Op.READ,
                    self._ledger_id,
                    on_reply,
                    core.entry_id,
                    timeout_ms=REQUEST_TIMEOUT_MS,
                )
            elif isinstance(effect, read_core.EntryFound):
                e = effect.entry
                data = wire.encode_entry(e.ledger_id, e.entry_id, e.lac, e.payload)
                assert self._md is not None
                closed = self._md.state is LedgerState.CLOSED
                self._checker.reader_returned(self.name, e.entry_id, data, closed)
                self.read[e.entry_id] = data
                self.next_entry = e.entry_id + 1
                self._failures = 0
                self._entry = None
                self._read_upto(self._bound)
                return
            elif isinstance(effect, read_core.ReadFailed):
                self._entry = None
                self._failures += 1
                if self._failures >= self.FAILURES_MAX and self._stop_when_closed:
                    self.done = True  # incomplete: the checker reports what is missing
                else:
                    self._again()
                return
        self._timer.arm(core.next_deadline_ms())

    def _on_read_reply(self, core: read_core.EntryReadCore, node: str, reply: Reply) -> None:
        self._on_read_effects(core, core.on_response(node, reply.status, reply.data, self.now))

    def _on_timer(self) -> None:
        core = self._entry
        if core is not None:
            self._on_read_effects(core, core.on_timer(self.now))
