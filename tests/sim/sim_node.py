"""A simulated storage node built from the real pure cores, on a SimDisk.

Owns: one node's request handling in the simulation: the real ``JournalCore``
(group commit: Write / Sync / Ack effects) and ``LedgerStates`` (fencing, LAC,
add vs recovery-add), a journal of real ``journal_io`` records (u32 length |
u32 crc32c | type | body) in SimDisk files, and an index of durable entries.
Rules (docs/architecture.md §3 durability contract, docs/compatibility.md §6.2/6.4):
- an add is answered only after the Sync covering its journal record completed;
  only then does it become readable and count for the node's LAC;
- a fence sets the in-memory flag at once (later normal adds are refused), is
  journaled, and is answered only once that record is durable;
- after a crash the node restarts by replaying every journal file with the real
  ``journal_io.scan_file`` (stop at the first bad length or crc) and appends to
  a new file, never to an old one;
- the node also registers itself in the metadata store under a lease, as a real
  node does, so a crashed node disappears from placement after the lease TTL.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import partial

from coordination import keys
from coordination.errors import LeaseLost
from coordination.memory_store import MemoryStore
from storage import wire
from storage.errors import BadRequest, Status
from storage.node import journal_io
from storage.node.journal_core import Ack, Effect, JournalConfig, JournalCore, Reject, Sync, Write
from storage.node.ledger_state import LedgerStates
from storage.types import NO_ENTRY, NodeInfo

from .checkers import Checker
from .world import Scheduler, SimDisk, SimNetwork, Timer, run_now

LEASE_TTL_S = 2
LEASE_REFRESH_MS = 500


@dataclass(frozen=True, slots=True)
class Request:
    req_id: int
    op: wire.Op
    ledger_id: int
    entry_id: int = NO_ENTRY
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Reply:
    req_id: int
    status: Status
    data: bytes = b""
    lac: int = NO_ENTRY
    last_entry_id: int = NO_ENTRY


@dataclass(slots=True)
class _Record:
    data: bytes  # the journal record (head + body)
    client: str
    req_id: int
    ledger_id: int
    fence: bool
    entry_id: int = NO_ENTRY
    lac: int = NO_ENTRY
    recovery: bool = False
    entry: bytes = b""


@dataclass(slots=True)
class NodeStats:
    crashes: int = 0
    rejected: int = 0
    fenced_refusals: int = 0
    replayed_records: int = 0
    crash_notes: list[str] = field(default_factory=list)


class SimNode:
    def __init__(
        self,
        name: str,
        sched: Scheduler,
        net: SimNetwork,
        store: MemoryStore,
        checker: Checker,
        journal_config: JournalConfig,
        rng: random.Random,
        fsync_enabled: bool,
        fsync_ms: tuple[int, int] = (1, 3),
        fencing: bool = True,
        fsync_stall: float = 0.0,
    ) -> None:
        self.name = name
        self._sched = sched
        self._net = net
        self._store = store
        self._checker = checker
        self._config = journal_config
        self._rng = rng
        self._fsync_ms = fsync_ms
        self._fsync_stall = fsync_stall  # chance that one fsync stalls for 20-300 ms
        self._fencing = fencing  # False only in a control run: normal adds ignore the fence
        self.disk = SimDisk(rng, fsync_enabled)
        self.stats = NodeStats()
        self.up = False
        self.incarnation = 0
        self._timer = Timer(sched, self._on_timer, checker.fail)
        self._boot()

    # ------------------------------------------------------------ life cycle

    def _boot(self) -> None:
        """Start (or restart): replay the durable journal, open a new journal file."""
        self.up = True
        self.incarnation += 1
        self.states = LedgerStates()
        self.entries: dict[tuple[int, int], bytes] = {}
        for name in self.disk.files:
            for _end, rtype, body in journal_io.scan_file(self.disk.read(name)):
                self.stats.replayed_records += 1
                if rtype == journal_io.TYPE_ADD:
                    entry = bytes(body)
                    ledger_id, entry_id, lac = wire.entry_header(entry)
                    self._store_entry(ledger_id, entry_id, lac, entry)
                elif rtype == journal_io.TYPE_FENCE:
                    (ledger_id,) = journal_io.FENCE_BODY.unpack(body)
                    self.states.fence(ledger_id)
        self._file = f"{self.incarnation:010d}.journal"
        self.disk.create(self._file)
        self.disk.append(self._file, journal_io.MAGIC)
        self.journal = JournalCore(self._config)
        self._records: dict[int, _Record] = {}
        self._next_record = 1
        self._idle_scheduled = False
        self._register()

    def crash(self) -> None:
        assert self.up
        self.up = False
        self._net.node_crashed(self.name, self.incarnation)
        self.incarnation += 1  # in-flight syncs, timers and messages of the old process die
        self._timer.cancel()
        self.stats.crashes += 1
        self.stats.crash_notes.extend(self.disk.crash())
        self._records = {}

    def restart(self) -> None:
        assert not self.up
        self._boot()

    def _register(self) -> None:
        info = NodeInfo(self.name, self.name, "", 100 << 30, 200 << 30, 0.0, False)
        lease = run_now(self._store.grant_lease(LEASE_TTL_S))
        run_now(self._store.put(keys.node(self.name), info.to_json(), lease))
        incarnation = self.incarnation

        def refresh() -> None:
            if not self.up or self.incarnation != incarnation:
                return  # a crashed process stops refreshing: the lease expires
            try:
                run_now(self._store.refresh_lease(lease))
            except LeaseLost:
                self._register()
                return
            self._sched.after(LEASE_REFRESH_MS, refresh)

        self._sched.after(LEASE_REFRESH_MS, refresh)

    # ------------------------------------------------------------ requests

    def receive(self, message: Request, src: str) -> None:
        op = message.op
        if op is wire.Op.ADD:
            self._add(message, src)
        elif op is wire.Op.FENCE:
            self.states.fence(message.ledger_id)  # refuse normal adds from now on
            record = journal_io.fence_record(message.ledger_id)
            self._submit(_Record(record, src, message.req_id, message.ledger_id, fence=True))
        elif op is wire.Op.READ:
            entry = self.entries.get((message.ledger_id, message.entry_id))
            if entry is not None:
                self._reply(src, Reply(message.req_id, Status.OK, entry))
            elif message.ledger_id in self.states:
                self._reply(src, Reply(message.req_id, Status.NO_SUCH_ENTRY))
            else:
                self._reply(src, Reply(message.req_id, Status.NO_SUCH_LEDGER))
        elif op is wire.Op.READ_LAC:
            answer = self.states.lac_reply(message.ledger_id)
            if answer is None:
                self._reply(src, Reply(message.req_id, Status.NO_SUCH_LEDGER))
            else:
                self._reply(src, Reply(message.req_id, Status.OK, lac=answer[0], last_entry_id=answer[1]))
        else:
            self._reply(src, Reply(message.req_id, Status.UNKNOWN_OP))

    def _add(self, message: Request, src: str) -> None:
        try:
            recovery, ledger_id, entry_id, lac, entry = wire.parse_add(message.body)
        except BadRequest:
            self._reply(src, Reply(message.req_id, Status.BAD_REQUEST))
            return
        if (ledger_id in self.states.fenced) != (self.states.check_add(ledger_id, False) is Status.FENCED):
            self._checker.fail(f"{self.name}: LedgerStates.fenced and check_add disagree on {ledger_id}")
        status = self.states.check_add(ledger_id, recovery or not self._fencing)
        if status is not Status.OK:
            self.stats.fenced_refusals += 1
            self._reply(src, Reply(message.req_id, status))
            return
        self._checker.node_accepted_add(self.name, entry_id, recovery)
        data = journal_io.add_record_head(entry) + entry
        self._submit(
            _Record(data, src, message.req_id, ledger_id, False, entry_id, lac, recovery, bytes(entry))
        )

    def _reply(self, client: str, reply: Reply) -> None:
        self._net.send(self.name, client, reply)

    def on_disconnect(self, peer: str, incarnation: int) -> None:
        pass  # clients never crash in this simulation; a node keeps no client state

    # ------------------------------------------------------------ journal

    def _submit(self, record: _Record) -> None:
        record_id = self._next_record
        self._next_record += 1
        self._records[record_id] = record
        effects = self.journal.on_add(record_id, len(record.data), self._sched.clock.now_ms())
        if effects and isinstance(effects[0], Reject):
            del self._records[record_id]
            self.stats.rejected += 1
            self._reply(record.client, Reply(record.req_id, Status.UNAVAILABLE))  # overloaded
            return
        self._execute(effects)
        if not self._idle_scheduled:  # like call_soon: after what already arrived at this instant
            self._idle_scheduled = True
            incarnation = self.incarnation
            self._sched.soon(lambda: self._queue_empty(incarnation))
        self._timer.arm(self.journal.next_deadline_ms())

    def _execute(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Write):
                self.disk.append(self._file, b"".join(self._records[r].data for r in effect.record_ids))
            elif isinstance(effect, Sync):
                upto = self.disk.size(self._file)
                incarnation = self.incarnation
                delay = self._rng.randint(*self._fsync_ms)
                if self._fsync_stall and self._rng.random() < self._fsync_stall:
                    delay += self._rng.randint(20, 300)
                self._sched.after(delay, partial(self._sync_done, incarnation, upto))
            elif isinstance(effect, Ack):
                for record_id in effect.record_ids:
                    self._durable(self._records.pop(record_id))
            else:
                raise AssertionError(f"unexpected journal effect {effect!r}")

    def _sync_done(self, incarnation: int, upto: int) -> None:
        if incarnation != self.incarnation:
            return  # the process crashed while syncing: nothing was acked
        self.disk.sync(self._file, upto)
        self._execute(self.journal.on_sync_done(self._sched.clock.now_ms()))
        self._timer.arm(self.journal.next_deadline_ms())

    def _queue_empty(self, incarnation: int) -> None:
        if incarnation != self.incarnation:
            return
        self._idle_scheduled = False
        self._execute(self.journal.on_queue_empty(self._sched.clock.now_ms()))
        self._timer.arm(self.journal.next_deadline_ms())

    def _on_timer(self) -> None:
        if self.up:
            self._execute(self.journal.on_timer(self._sched.clock.now_ms()))
            self._timer.arm(self.journal.next_deadline_ms())

    def _durable(self, record: _Record) -> None:
        if record.fence:
            lac, last = self.states.lac_reply(record.ledger_id) or (NO_ENTRY, NO_ENTRY)
            self._checker.node_fence_replied(self.name)
            self._reply(record.client, Reply(record.req_id, Status.OK, lac=lac, last_entry_id=last))
            return
        self._store_entry(record.ledger_id, record.entry_id, record.lac, record.entry)
        self._checker.node_acked_add(self.name, record.entry_id, record.recovery)
        self._reply(record.client, Reply(record.req_id, Status.OK))

    def _store_entry(self, ledger_id: int, entry_id: int, lac: int, entry: bytes) -> None:
        self._checker.node_stored(self.name, entry_id, entry)
        self.entries[(ledger_id, entry_id)] = entry
        self.states.on_stored(ledger_id, entry_id, lac)

    # ------------------------------------------------------------ queries

    def lac(self, ledger_id: int) -> int:
        info = self.states.get(ledger_id)
        return info.lac if info is not None else NO_ENTRY
