"""The ledger writer's state machine: pending adds, in-order completion, LAC,
ensemble change and fencing (pure).

Owns: everything one open ledger's writer decides. Rules (docs/compatibility.md
§6.2-6.4, BookKeeper ``LedgerHandle`` / ``PendingAddOp``):
- entry ids are 0,1,2,... in append order; entry e goes to its write set (Qw
  members of the last segment's ensemble starting at e mod E) and needs Qa
  distinct acks;
- adds complete strictly in entry order; LAC is the highest id with every id
  <= it confirmed; each add carries the LAC current when it was encoded;
- a failed member of the ensemble (error, lost connection, read-only, or no
  ack within ``add_timeout_ms``) is replaced: the core asks for the live nodes
  (``FindNodes``), picks replacements via ``placement`` and proposes a new
  segment starting at LAC+1 (``WriteSegment``). Completions pause until the
  metadata CAS lands; then acks from replaced members for unconfirmed entries
  are discarded and those entries are resent to the replacements;
- a node that failed is not chosen again (as a replacement, or back into its
  own slot) for a back-off after each failure (``node_retry_ms``, doubling per
  failure up to ``node_retry_max_ms``); after it, a node is eligible again once
  it is registered, writable and has answered a probe (``FindNodes.probe``,
  at each replacement search): nodes that heal come back, a flapping one is
  tried ever less often, a paused one never while it does not answer;
- a failed member is replaced by a node outside the ensemble when there is one;
  else, once it is eligible again, it takes its own slot back (a new segment
  from LAC+1 with the same node: it gets every entry from there on);
- no replacement available: keep writing to the surviving members while every
  write set can still reach Qa, retry later; otherwise fail with QuorumLost
  (retriable: the owner closes the ledger at its LAC and rolls to a new one);
- a member that failed while a segment was written may lack entries of it: the
  segment records it as ``missing`` when the next segment starts (or when the
  ledger is closed), so the auditor copies them back (audit_core);
- FENCED from any node (or the ledger leaving OPEN) fails every pending add
  with ``Fenced``; the writer is then done.
No asyncio, no sockets, no clock: callers pass ``now_ms`` and carry out the
returned effects in order.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from storage.client import placement
from storage.client.schedule import write_set_indexes
from storage.client.write_effects import (
    NO_EFFECTS_LIST,
    CompleteAdds,
    Effect,
    FailAll,
    FindNodes,
    SendAdd,
    WriterConfig,
    WriteSegment,
)
from storage.errors import Fenced, QuorumLost, Status, StorageError
from storage.types import LedgerMetadata, LedgerState, NodeId, NodeInfo
from storage.wire import encode_add_body


class AckSet:
    """Acks for one entry, by ensemble index (a bit mask; one per pending add).

    ``add`` returns True when this ack completes the quorum. ``remove`` drops
    an index (its node was replaced by an ensemble change before the entry was
    confirmed: that ack no longer counts).
    """

    __slots__ = ("_count", "_mask", "ack_quorum")

    def __init__(self, ack_quorum: int) -> None:
        self.ack_quorum = ack_quorum
        self._mask = 0
        self._count = 0

    def add(self, index: int) -> bool:
        bit = 1 << index
        if self._mask & bit:
            return False
        self._mask |= bit
        self._count += 1
        return self._count == self.ack_quorum

    def remove(self, index: int) -> None:
        bit = 1 << index
        if self._mask & bit:
            self._mask &= ~bit
            self._count -= 1

    def has(self, index: int) -> bool:
        return bool(self._mask & (1 << index))

    @property
    def count(self) -> int:
        return self._count

    @property
    def complete(self) -> bool:
        return self._count >= self.ack_quorum


class _Pending(AckSet):
    """One unconfirmed add: its ack set plus what a resend needs (one object per add)."""

    __slots__ = ("body", "entry_id", "indexes", "sent_ms", "size")

    def __init__(
        self, entry_id: int, body: bytes, size: int, indexes: tuple[int, ...], ack_quorum: int
    ) -> None:
        AckSet.__init__(self, ack_quorum)
        self.entry_id = entry_id
        self.body = body
        self.size = size
        self.indexes = indexes
        self.sent_ms = 0


_IDLE, _FINDING, _WRITING, _RETRY = "idle", "finding", "writing", "retry"


class WriteCore:
    def __init__(
        self, metadata: LedgerMetadata, config: WriterConfig | None = None, rng: random.Random | None = None
    ) -> None:
        assert metadata.state is LedgerState.OPEN
        self.config = config or WriterConfig()
        self._adds_max = self.config.outstanding_adds_max
        self._bytes_max = self.config.outstanding_bytes_max
        self._rng = rng or random.Random(0)
        self.metadata = metadata
        self.lac = metadata.segments[-1].first_entry_id - 1
        self.next_entry_id = self.lac + 1
        self.confirmed_bytes = 0
        self.outstanding_bytes = 0
        self.error: StorageError | None = None
        self.ensemble_changes = 0
        self._pending: dict[int, _Pending] = {}
        self._progress_check_ms = 0
        self._sent: list[int] = []
        self._acked: list[int] = []
        self._acked_seen: list[int] = []
        self._since_ms: list[int] = []
        self._failed: set[NodeId] = set()  # members of the current ensemble not written to
        self._failures: dict[NodeId, int] = {}  # node -> failures seen by this writer
        self._retry_at: dict[NodeId, int] = {}  # node -> not chosen again before this time
        self._readmitting: frozenset[NodeId] = frozenset()  # taking their own slot back
        self._change = _IDLE
        self._change_at_ms = 0
        self._timeout_check_ms = 0
        self._set_ensemble(metadata.last_ensemble)

    # ------------------------------------------------------------ queries

    @property
    def outstanding(self) -> int:
        return self.next_entry_id - 1 - self.lac

    def can_accept(self, size: int) -> bool:
        outstanding = self.next_entry_id - 1 - self.lac
        if outstanding >= self._adds_max:
            return False
        return outstanding == 0 or self.outstanding_bytes + size <= self._bytes_max

    @property
    def changing_ensemble(self) -> bool:
        return self._change in (_FINDING, _WRITING)

    @property
    def failed_nodes(self) -> frozenset[NodeId]:
        return frozenset(self._failed)

    def next_deadline_ms(self) -> int | None:
        if self.error is not None:
            return None  # a failed writer has nothing left to time
        deadlines = []
        if self._pending:
            deadlines.append(self._timeout_check_ms)
        if any(sent > acked for sent, acked in zip(self._sent, self._acked, strict=True)):
            deadlines.append(self._progress_check_ms)
        if self._change == _RETRY:
            deadlines.append(self._change_at_ms)
        return min(deadlines) if deadlines else None

    # ------------------------------------------------------------ inputs

    def on_append(self, payload: bytes, now_ms: int) -> tuple[int, list[Effect]]:
        """Assign the next entry id; the caller checked ``can_accept``."""
        assert self.error is None, "append on a failed writer"
        entry_id = self.next_entry_id
        self.next_entry_id = entry_id + 1
        body = encode_add_body(self.metadata.ledger_id, entry_id, self.lac, payload)
        indexes = self._write_sets[entry_id % self._ensemble_size]
        pending = _Pending(entry_id, body, len(payload), indexes, self._ack_quorum)
        pending.sent_ms = now_ms
        if not self._pending:
            self._timeout_check_ms = now_ms + self.config.add_timeout_ms
        self._pending[entry_id] = pending
        self.outstanding_bytes += len(payload)
        sent = self._sent
        if self._failed:
            ensemble = self._ensemble
            nodes = tuple(ensemble[i] for i in indexes if ensemble[i] not in self._failed)
            for i in indexes:
                if ensemble[i] not in self._failed:
                    if sent[i] == self._acked[i]:
                        self._since_ms[i] = now_ms
                    sent[i] += 1
        else:
            nodes = self._write_set_nodes[entry_id % self._ensemble_size]
            acked = self._acked
            for i in indexes:
                if sent[i] == acked[i]:
                    self._since_ms[i] = now_ms  # the member was idle: its ack clock starts now
                sent[i] += 1
        return entry_id, [SendAdd(entry_id, nodes, body)]

    def on_add_ack(self, node: NodeId, entry_id: int) -> list[Effect]:
        """``node`` made ``entry_id`` durable (the hot path: no clock needed)."""
        index = self._index.get(node)
        if index is None:
            return NO_EFFECTS_LIST  # a replaced member: its ack no longer counts
        self._acked[index] += 1  # progress of this member, even for entries already confirmed
        pending = self._pending.get(entry_id)
        if pending is None or self.error is not None or index not in pending.indexes:
            return NO_EFFECTS_LIST
        if pending.add(index) and entry_id == self.lac + 1:
            return self._advance()
        return NO_EFFECTS_LIST

    def on_add_response(self, node: NodeId, entry_id: int, status: Status, now_ms: int) -> list[Effect]:
        if status is Status.OK:
            return self.on_add_ack(node, entry_id)
        if self.error is not None:
            return []
        if status is Status.FENCED:
            return self._fail(Fenced(f"ledger {self.metadata.ledger_id} was fenced (by {node})"))
        return self.on_node_failure(node, now_ms)

    def on_node_failure(self, node: NodeId, now_ms: int) -> list[Effect]:
        if self.error is not None or node not in self._index or node in self._failed:
            return []
        self._failed.add(node)
        self._note_failure(node, now_ms)
        if self._change in (_FINDING, _WRITING):
            return []  # handled once the change in flight lands
        return self._start_change(now_ms)

    def on_timer(self, now_ms: int) -> list[Effect]:
        if self.error is not None:
            return []
        effects: list[Effect] = []
        if self._change == _RETRY and now_ms >= self._change_at_ms:
            effects.extend(self._start_change(now_ms))
        if self._pending and now_ms >= self._timeout_check_ms:
            timeout = self.config.add_timeout_ms
            next_check = now_ms + timeout
            slow: set[NodeId] = set()
            for pending in self._pending.values():
                if pending.complete:
                    continue
                if now_ms - pending.sent_ms >= timeout:
                    for index in pending.indexes:
                        if not pending.has(index):
                            slow.add(self._ensemble[index])
                else:
                    next_check = min(next_check, pending.sent_ms + timeout)
            self._timeout_check_ms = next_check
        else:
            slow = set()
        if now_ms >= self._progress_check_ms:
            slow |= self._stalled_members(now_ms)
        if slow:
            fresh = {n for n in slow if n in self._index and n not in self._failed}
            if fresh:
                self._failed |= fresh
                for node in fresh:
                    self._note_failure(node, now_ms)
                if self._change not in (_FINDING, _WRITING):
                    effects.extend(self._start_change(now_ms))
        return effects

    def _stalled_members(self, now_ms: int) -> set[NodeId]:
        """Members with adds outstanding that acked nothing for ``add_timeout_ms``
        (an add that reached its quorum without them still counts: BookKeeper
        times out every request to a bookie, not only unconfirmed entries)."""
        timeout = self.config.add_timeout_ms
        self._progress_check_ms = now_ms + max(1, timeout // 4)
        stalled: set[NodeId] = set()
        for index, node in enumerate(self._ensemble):
            acked = self._acked[index]
            if self._sent[index] <= acked or acked != self._acked_seen[index] or self._since_ms[index] < 0:
                self._acked_seen[index] = acked
                self._since_ms[index] = now_ms
            elif now_ms - self._since_ms[index] >= timeout and node not in self._failed:
                stalled.add(node)
        return stalled

    def on_live_nodes(
        self, nodes: Iterable[NodeInfo], now_ms: int, answered: Iterable[NodeId] = ()
    ) -> list[Effect]:
        """Answer to ``FindNodes``: propose a segment or degrade/fail. ``answered``:
        the probed nodes that answered."""
        if self.error is not None or self._change != _FINDING:
            return []
        failed = self._failed & set(self._ensemble)
        if not failed:
            self._change = _IDLE
            return self._advance()
        nodes = list(nodes)
        waiting = self.backing_off(now_ms)
        writable = {n.node_id for n in nodes if not n.read_only and not n.draining}
        eligible = {n for n in answered if n in writable and n not in waiting}
        suspect = {n for n in self._failures if n not in eligible}  # failed before, not answered since
        ensemble, readmitted = placement.heal_members(
            nodes, self._ensemble, failed, self._rng, exclude=suspect, readmit=eligible & failed
        )
        if ensemble == self._ensemble and not readmitted:
            if not self._quorum_possible():
                ledger_id = self.metadata.ledger_id
                why = f"no writable node can replace {sorted(failed)}"
                return self._fail(QuorumLost(f"ledger {ledger_id}: {why}"))
            self._change = _RETRY  # carry on degraded, look again later
            self._change_at_ms = now_ms + self.config.ensemble_retry_ms
            return self._advance()
        self._change = _WRITING
        self._readmitting = readmitted
        return [WriteSegment(self.lac + 1, self._ensemble, ensemble, frozenset(failed))]

    def backing_off(self, now_ms: int) -> frozenset[NodeId]:
        """Nodes that failed too recently to be chosen again."""
        return frozenset(node for node, at in self._retry_at.items() if at > now_ms)

    def on_segment_written(self, metadata: LedgerMetadata, now_ms: int) -> list[Effect]:
        """The CAS of a ``WriteSegment`` landed; ``metadata`` is what is stored."""
        if self.error is not None:
            return []
        assert self._change == _WRITING
        old = self._ensemble
        self.metadata = metadata
        self._set_ensemble(metadata.last_ensemble)
        self.ensemble_changes += 1
        readmitted, self._readmitting = self._readmitting, frozenset()
        replaced = {
            i for i, (a, b) in enumerate(zip(old, self._ensemble, strict=True)) if a != b or b in readmitted
        }
        self._failed &= set(self._ensemble)
        self._failed -= readmitted
        effects: list[Effect] = []
        ensemble = self._ensemble
        for entry_id in range(self.lac + 1, self.next_entry_id):
            pending = self._pending[entry_id]
            moved = [i for i in pending.indexes if i in replaced]
            if not moved:
                continue
            for index in moved:
                pending.remove(index)
            pending.sent_ms = now_ms
            nodes = tuple(ensemble[i] for i in moved if ensemble[i] not in self._failed)
            for index in moved:
                if ensemble[index] not in self._failed:
                    self._sent[index] += 1
            if nodes:
                effects.append(SendAdd(entry_id, nodes, pending.body))
        self._timeout_check_ms = min(self._timeout_check_ms, now_ms + self.config.add_timeout_ms)
        self._change = _IDLE
        if self._failed:
            effects.extend(self._start_change(now_ms))
        else:
            effects.extend(self._advance())
        return effects

    def on_segment_failed(self, error: StorageError, now_ms: int) -> list[Effect]:
        """The CAS could not be done (ledger fenced/closed, or conflict)."""
        if self.error is not None:
            return []
        return self._fail(error)

    # ------------------------------------------------------------ internals

    def _set_ensemble(self, ensemble: tuple[NodeId, ...]) -> None:
        self._ensemble = ensemble
        self._index = {node: i for i, node in enumerate(ensemble)}
        self._ensemble_size = self.metadata.ensemble_size
        self._write_quorum = self.metadata.write_quorum
        self._ack_quorum = self.metadata.ack_quorum
        self._write_sets = [
            write_set_indexes(start, self._ensemble_size, self._write_quorum)
            for start in range(self._ensemble_size)
        ]
        self._write_set_nodes = [tuple(ensemble[i] for i in indexes) for indexes in self._write_sets]
        old = getattr(self, "_members", ())
        keep = [i < len(old) and old[i] == node for i, node in enumerate(ensemble)]
        self._members = ensemble
        # per member: adds sent, acks seen, ack count at the last check and since when it is unchanged
        self._sent = [self._sent[i] if keep[i] else 0 for i in range(len(ensemble))]
        self._acked = [self._acked[i] if keep[i] else 0 for i in range(len(ensemble))]
        self._acked_seen = [self._acked_seen[i] if keep[i] else 0 for i in range(len(ensemble))]
        self._since_ms = [self._since_ms[i] if keep[i] else -1 for i in range(len(ensemble))]

    def _start_change(self, now_ms: int) -> list[Effect]:
        self._change = _FINDING
        waiting = self.backing_off(now_ms)
        probe = frozenset(node for node in self._failures if node not in waiting)
        return [FindNodes(frozenset(self._failed), probe)]

    def _note_failure(self, node: NodeId, now_ms: int) -> None:
        count = self._failures.get(node, 0) + 1
        self._failures[node] = count
        config = self.config
        delay = min(config.node_retry_max_ms, config.node_retry_ms << min(count - 1, 20))
        self._retry_at[node] = now_ms + delay

    def _quorum_possible(self) -> bool:
        alive = [node not in self._failed for node in self._ensemble]
        for start in range(self._ensemble_size):
            indexes = write_set_indexes(start, self._ensemble_size, self._write_quorum)
            if sum(1 for i in indexes if alive[i]) < self._ack_quorum:
                return False
        return True

    def _advance(self) -> list[Effect]:
        if self._change is not _IDLE and self._change is not _RETRY:
            return NO_EFFECTS_LIST  # completions wait for the new segment
        lac = self.lac
        pending_map = self._pending
        pending = pending_map.get(lac + 1)
        if pending is None or not pending.complete:
            return NO_EFFECTS_LIST
        while pending is not None and pending.complete:
            del pending_map[lac + 1]
            lac += 1
            self.outstanding_bytes -= pending.size
            self.confirmed_bytes += pending.size
            pending = pending_map.get(lac + 1)
        self.lac = lac
        return [CompleteAdds(lac)]

    def _fail(self, error: StorageError) -> list[Effect]:
        self.error = error
        self._pending.clear()
        self.outstanding_bytes = 0
        return [FailAll(error)]
