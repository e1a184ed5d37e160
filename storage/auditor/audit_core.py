"""What is under-replicated and what to do about it (pure).

Owns: the auditor's decisions — which nodes count as *gone* (missing from
membership longer than ``grace_ms``), which fragments of which ledgers had a
replica on them, which entries of a fragment must be copied, and how the
ledger's ensemble is rewritten once they are. Rules (BookKeeper auto-recovery):
- a fragment is the entry range of one ensemble segment; an entry is on node N
  of that segment iff N is in the entry's write set;
- segments of CLOSED ledgers, and every segment but the last of an OPEN one,
  have fixed ranges and are copied as they are;
- the last segment of a ledger that is still OPEN / IN_RECOVERY is copied only
  after the ledger is fenced and closed (its writer is idle or dead — a live
  writer would have changed its ensemble itself on the first failed add);
- the ensemble change is a CAS that replaces the gone node in that one segment,
  and is skipped if someone already did it;
- a **read-only** node (disk nearly full) is replaced like a gone one, with no
  grace: its fragments are copied to a writable node and the ensembles
  rewritten, and its ledgers count as under-replicated until then - it takes
  no writes, so a ledger it is a member of cannot get back to Qw copies on it.
  Only an open tail on it is not fenced: its writer, refused by the node,
  moves off it by itself (write_core); the ledger stays reported meanwhile;
- a **draining** node (being decommissioned, storage/drain.py) is replaced like a
  read-only one; a ledger still open on it is fenced too, but only once its drain
  is ``fence``-due (an active writer has moved off by itself before that);
- a member a segment records as ``missing`` (its writer went on without it)
  may lack entries of that fixed segment: they are copied to it again (or to a
  replacement when it is gone or read-only), then the mark is cleared.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from storage.types import LedgerMetadata, LedgerState, NodeId, Segment

DEFAULT_GRACE_MS = 30_000


@dataclass(frozen=True, slots=True)
class Fragment:
    ledger_id: int
    segment_index: int
    first_entry_id: int
    last_entry_id: int  # inclusive
    lost_node: NodeId


@dataclass(frozen=True, slots=True)
class LedgerPlan:
    ledger_id: int
    lost_nodes: tuple[NodeId, ...]
    needs_fence: bool  # OPEN/IN_RECOVERY with a gone node in its last segment: recover (close) first
    fragments: tuple[Fragment, ...]  # copyable now (fixed ranges)


class Membership:
    """Tracks since when each known node has been missing (pure)."""

    def __init__(self, grace_ms: int = DEFAULT_GRACE_MS) -> None:
        self.grace_ms = grace_ms
        self._missing_since: dict[NodeId, int] = {}
        self._live: frozenset[NodeId] = frozenset()

    def on_members(self, live: Iterable[NodeId], referenced: Iterable[NodeId], now_ms: int) -> None:
        """``live``: registered nodes; ``referenced``: nodes named by any ensemble."""
        self._live = frozenset(live)
        for node in set(referenced) | set(self._missing_since):
            if node in self._live:
                self._missing_since.pop(node, None)
            else:
                self._missing_since.setdefault(node, now_ms)

    def gone(self, now_ms: int) -> frozenset[NodeId]:
        return frozenset(n for n, since in self._missing_since.items() if now_ms - since >= self.grace_ms)

    def missing(self) -> dict[NodeId, int]:
        return dict(self._missing_since)

    def next_deadline_ms(self, now_ms: int) -> int | None:
        pending = [s + self.grace_ms for s in self._missing_since.values() if s + self.grace_ms > now_ms]
        return min(pending) if pending else None


def segment_last_entry(metadata: LedgerMetadata, index: int, lac: int | None = None) -> int:
    """Last entry id of segment ``index``: bounded by the next segment, or by
    the ledger's last entry when CLOSED (or ``lac`` when given for an open one)."""
    if index + 1 < len(metadata.segments):
        return metadata.segments[index + 1].first_entry_id - 1
    if metadata.state is LedgerState.CLOSED:
        return metadata.last_entry_id
    assert lac is not None, "the open segment of an unclosed ledger has no fixed end"
    return lac


def plan_ledger(
    metadata: LedgerMetadata,
    gone: frozenset[NodeId],
    read_only: frozenset[NodeId] = frozenset(),
    fence: frozenset[NodeId] = frozenset(),
) -> LedgerPlan | None:
    """The work needed to bring ``metadata`` back to Qw copies (and off the nodes in
    ``read_only``), or None. A plan with neither fence nor fragments: under-replicated,
    waiting for its writer. ``fence``: nodes whose open tails are fenced like a gone
    node's (draining past their grace)."""
    fragments: list[Fragment] = []
    lost: set[NodeId] = set()
    needs_fence = False
    last_index = len(metadata.segments) - 1
    for index, segment in enumerate(metadata.segments):
        open_tail = index == last_index and metadata.state is not LedgerState.CLOSED
        lost_here = [
            n
            for n in segment.ensemble
            if n in gone or n in read_only or (n in segment.missing and not open_tail)
        ]
        if not lost_here:
            continue
        if open_tail:
            needs_fence = needs_fence or any(n in gone or n in fence for n in lost_here)
            lost.update(lost_here)
            continue
        last = segment_last_entry(metadata, index)
        if last < segment.first_entry_id:
            continue  # empty segment: holds no entries
        for node in lost_here:
            if entries_on_node(metadata, segment, last, node):
                fragments.append(Fragment(metadata.ledger_id, index, segment.first_entry_id, last, node))
                lost.add(node)
    if not lost:
        return None
    return LedgerPlan(metadata.ledger_id, tuple(sorted(lost)), needs_fence, tuple(fragments))


def entries_on_node(metadata: LedgerMetadata, segment: Segment, last: int, node: NodeId) -> list[int]:
    """Entry ids in ``segment`` (up to ``last``) whose write set includes ``node``."""
    position = segment.ensemble.index(node)
    e, qw = metadata.ensemble_size, metadata.write_quorum
    # entry x is on member p iff (p - x) mod E < Qw
    return [x for x in range(segment.first_entry_id, last + 1) if (position - x) % e < qw]


def replace_in_segment(
    metadata: LedgerMetadata, segment_index: int, lost: NodeId, replacement: NodeId
) -> LedgerMetadata | None:
    """``metadata`` with ``lost`` replaced by ``replacement`` in one segment;
    None if that segment no longer names ``lost`` (already repaired)."""
    if segment_index >= len(metadata.segments):
        return None
    segment = metadata.segments[segment_index]
    if lost not in segment.ensemble or replacement in segment.ensemble:
        return None
    ensemble = tuple(replacement if n == lost else n for n in segment.ensemble)
    segments = list(metadata.segments)
    segments[segment_index] = Segment(segment.first_entry_id, ensemble, segment.missing - {lost})
    return metadata.with_changes(segments=tuple(segments))


def clear_missing(metadata: LedgerMetadata, segment_index: int, node: NodeId) -> LedgerMetadata | None:
    """``metadata`` with ``node``'s missing mark on one segment cleared (its entries
    were copied back to it); None if there is no such mark (already done)."""
    if segment_index >= len(metadata.segments):
        return None
    segment = metadata.segments[segment_index]
    if node not in segment.missing:
        return None
    segments = list(metadata.segments)
    segments[segment_index] = Segment(segment.first_entry_id, segment.ensemble, segment.missing - {node})
    return metadata.with_changes(segments=tuple(segments))


def referenced_nodes(ledgers: Iterable[LedgerMetadata]) -> set[NodeId]:
    nodes: set[NodeId] = set()
    for metadata in ledgers:
        for segment in metadata.segments:
            nodes.update(segment.ensemble)
    return nodes
