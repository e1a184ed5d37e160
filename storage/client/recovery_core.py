"""Open-with-recovery: fence, find the end, write the tail back, close (pure).

Owns: the decisions of one recovery of one ledger, after the caller has CAS-set
it IN_RECOVERY. Rules (docs/compatibility.md §6.4, BookKeeper ``LedgerRecoveryOp``):
1. fence the ledger on every node of the **last** segment; fencing counts as
   done once every write set has ``Qw - Qa + 1`` definite answers (OK or "no
   such ledger"); if that can no longer happen, recovery fails (retriable);
2. start after the highest LAC any node reported (entries before the last
   segment's first entry were confirmed before it was created);
3. read forward entry by entry (a window in flight that starts at
   ``READ_WINDOW_START`` entries and doubles with every entry found, up to
   ``read_window``: a dead writer usually left nothing or a few entries past the
   LAC, and a gateway taking over from it recovers one ledger per topic at
   once): an entry is found
   if any replica returns it with a valid checksum and the right ids; it is
   missing only when ``Qw - Qa + 1`` members of its write set said "no such
   entry" (it can never have been acked); otherwise it is retried, up to
   ``read_attempts_max`` rounds, then recovery fails;
4. every found entry is written back (recovery-add, verbatim) to its full write
   set and needs Qa acks;
5. when the first missing entry is known and every write-back is acked, close
   the ledger with ``last_entry_id`` = the entry before it (``CloseLedger``).
No I/O: inputs are node answers, outputs are effects.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage import wire
from storage.client import schedule
from storage.errors import (
    ChecksumMismatch,
    NodeUnavailable,
    ProtocolViolation,
    QuorumLost,
    Status,
    StorageError,
)
from storage.types import LedgerMetadata, LedgerState, NodeId

READ_WINDOW = 64  # entries read ahead during recovery, at most
READ_WINDOW_START = 2  # ... at first: the window doubles with every entry found
READ_ATTEMPTS_MAX = 5  # rounds over a write set before recovery gives up on an entry


@dataclass(frozen=True, slots=True)
class SendFence:
    node: NodeId


@dataclass(frozen=True, slots=True)
class SendRead:
    node: NodeId
    entry_id: int


@dataclass(frozen=True, slots=True)
class SendRecoveryAdd:
    node: NodeId
    entry_id: int
    body: bytes  # wire add body with the recovery flag


@dataclass(frozen=True, slots=True)
class CloseLedger:
    last_entry_id: int
    length: int  # payload bytes of the entries recovery read (earlier ones are not known)


@dataclass(frozen=True, slots=True)
class RecoveryFailed:
    error: StorageError


RecoveryEffect = SendFence | SendRead | SendRecoveryAdd | CloseLedger | RecoveryFailed

_NEGATIVE = (Status.NO_SUCH_ENTRY, Status.NO_SUCH_LEDGER)


class _EntryRead:
    __slots__ = ("attempts", "data", "failed", "negatives", "write_set")

    def __init__(self, write_set: tuple[NodeId, ...]) -> None:
        self.write_set = write_set
        self.negatives: set[NodeId] = set()
        self.failed: set[NodeId] = set()
        self.data: bytes | None = None
        self.attempts = 1


class RecoveryCore:
    def __init__(
        self, metadata: LedgerMetadata, read_window: int = READ_WINDOW, attempts_max: int = READ_ATTEMPTS_MAX
    ) -> None:
        assert metadata.state is LedgerState.IN_RECOVERY
        self.metadata = metadata
        self._window_max = read_window
        self._window = min(READ_WINDOW_START, read_window)
        self._attempts_max = attempts_max
        self._ensemble = metadata.last_ensemble
        self._answered: set[NodeId] = set()
        self._unreachable: set[NodeId] = set()
        self._max_lac = metadata.segments[-1].first_entry_id - 1
        self.fenced = False
        self.done = False
        self.start_entry_id = -1  # first entry read forward (max LAC + 1)
        self._reads: dict[int, _EntryRead] = {}
        self._next_read = 0
        self._found_until = -1  # every entry up to here was found (in order)
        self._end: int | None = None  # first missing entry
        self._writebacks: dict[int, tuple[set[NodeId], set[NodeId]]] = {}  # entry -> (acked, failed)
        self.recovered_bytes = 0
        self.recovered_entries = 0

    # ------------------------------------------------------------ fence

    def start(self) -> list[RecoveryEffect]:
        return [SendFence(node) for node in self._ensemble]

    def on_fence_response(self, node: NodeId, status: Status, lac: int) -> list[RecoveryEffect]:
        if self.done or self.fenced:
            return []
        if status is Status.OK or status is Status.NO_SUCH_LEDGER:
            self._answered.add(node)
            if status is Status.OK:
                self._max_lac = max(self._max_lac, lac)
        else:
            self._unreachable.add(node)
        q_w, q_a = self.metadata.write_quorum, self.metadata.ack_quorum
        if schedule.is_covered(self._ensemble, q_w, q_a, self._answered):
            self.fenced = True
            self.start_entry_id = self._max_lac + 1
            self._found_until = self._max_lac
            self._next_read = self.start_entry_id
            return self._fill_window()
        if not schedule.can_still_cover(self._ensemble, q_w, q_a, self._answered, self._unreachable):
            return self._finish_failed(
                QuorumLost(f"ledger {self.metadata.ledger_id}: too few nodes answered the fence")
            )
        return []

    # ------------------------------------------------------------ read forward

    def on_read_response(
        self, node: NodeId, entry_id: int, status: Status, data: bytes
    ) -> list[RecoveryEffect]:
        read = self._reads.get(entry_id)
        if self.done or read is None or read.data is not None or node not in read.write_set:
            return []
        if status is Status.OK and self._valid(entry_id, data):
            read.data = data
            return self._progress()
        if status in _NEGATIVE and node in self._answered:
            # final only from a node whose fence reply we counted: it answered
            # after everything queued before the fence was durable (an add still
            # waiting for its fsync elsewhere would otherwise look absent)
            read.negatives.add(node)
            read.failed.discard(node)
        else:
            read.failed.add(node)  # error, bad checksum, wrong entry: not an answer
        q_w, q_a = self.metadata.write_quorum, self.metadata.ack_quorum
        if schedule.entry_absent(read.write_set, q_w, q_a, read.negatives):
            if self._end is None or entry_id < self._end:
                self._end = entry_id
            return self._progress()
        if len(read.negatives) + len(read.failed) < len(read.write_set):
            return []  # others still to answer
        if read.attempts >= self._attempts_max:
            return self._finish_failed(
                NodeUnavailable(
                    f"ledger {self.metadata.ledger_id}: entry {entry_id} neither readable nor provably absent"
                )
            )
        read.attempts += 1
        retry = [n for n in read.write_set if n in read.failed]
        read.failed.clear()
        return [SendRead(n, entry_id) for n in retry]

    def _valid(self, entry_id: int, data: bytes) -> bool:
        try:
            entry = wire.decode_entry(data)
        except (ChecksumMismatch, ProtocolViolation):
            return False
        return entry.ledger_id == self.metadata.ledger_id and entry.entry_id == entry_id

    def _fill_window(self) -> list[RecoveryEffect]:
        effects: list[RecoveryEffect] = []
        while (self._end is None or self._next_read < self._end) and len(self._reads) < self._window:
            entry_id = self._next_read
            self._next_read += 1
            read = _EntryRead(self.metadata.write_set(entry_id))
            self._reads[entry_id] = read
            effects.extend(SendRead(node, entry_id) for node in read.write_set)
        return effects

    def _progress(self) -> list[RecoveryEffect]:
        effects: list[RecoveryEffect] = []
        while True:
            read = self._reads.get(self._found_until + 1)
            if read is None or read.data is None:
                break
            entry_id = self._found_until + 1
            del self._reads[entry_id]
            self._found_until = entry_id
            self._window = min(self._window_max, self._window * 2)
            self.recovered_bytes += wire.payload_size(read.data)
            self.recovered_entries += 1
            self._writebacks[entry_id] = (set(), set())
            add = wire.add_body(read.data, recovery=True)
            effects.extend(SendRecoveryAdd(node, entry_id, add) for node in read.write_set)
        if self._end is not None:
            for entry_id in [e for e in self._reads if e >= self._end]:
                del self._reads[entry_id]  # at or past the end: cannot have been confirmed
        effects.extend(self._fill_window())
        effects.extend(self._maybe_close())
        return effects

    # ------------------------------------------------------------ write back

    def on_recovery_add_response(self, node: NodeId, entry_id: int, status: Status) -> list[RecoveryEffect]:
        state = self._writebacks.get(entry_id)
        if self.done or state is None:
            return []
        acked, failed = state
        if status is Status.OK:
            acked.add(node)
        else:
            failed.add(node)
        write_set = self.metadata.write_set(entry_id)
        if len(acked) >= self.metadata.ack_quorum:
            del self._writebacks[entry_id]
            return self._maybe_close()
        if len(write_set) - len(failed) < self.metadata.ack_quorum:
            return self._finish_failed(
                QuorumLost(f"ledger {self.metadata.ledger_id}: could not write back entry {entry_id}")
            )
        return []

    def _maybe_close(self) -> list[RecoveryEffect]:
        if self._end is None or self._found_until != self._end - 1 or self._writebacks:
            return []
        self.done = True
        return [CloseLedger(self._end - 1, self.recovered_bytes)]

    def _finish_failed(self, error: StorageError) -> list[RecoveryEffect]:
        self.done = True
        return [RecoveryFailed(error)]


def close_recovered(current: LedgerMetadata, last_entry_id: int, length: int) -> LedgerMetadata | None:
    """The modify step of the closing CAS: IN_RECOVERY -> CLOSED; None when it
    is already CLOSED (the closed value is final: recoverers converge on it)."""
    if current.state is LedgerState.CLOSED:
        return None
    return current.with_changes(state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)
