"""Read routing: which replica to ask, when to ask another, what is readable (pure).

Owns: the decisions of reading one entry, one LAC poll, and how a range splits
into requests. Rules (docs/compatibility.md §6.2, §6.5, docs/architecture.md §3):
- ask the members of the entry's write set in write-set order; if the current
  one has not answered after ``speculative_ms`` also ask the next (speculative
  read); on an error, a bad checksum or "no such entry" go to the next at once;
- an entry is returned only after its crc32c and its ledger/entry ids check out;
- readers never go past LAC on an OPEN ledger, nor past ``last_entry_id`` on a
  CLOSED one (``read_bound``);
- a range read (READ_RANGE) is only sent to a node that holds every entry of
  the range: within one segment and only when Qw == E (no striping); other
  ranges are read entry by entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage import wire
from storage.errors import (
    ChecksumMismatch,
    LedgerClosed,
    NodeUnavailable,
    NoSuchEntry,
    ProtocolViolation,
    Status,
    StorageError,
)
from storage.types import LedgerMetadata, LedgerState, NodeId

SPECULATIVE_READ_MS = 50


@dataclass(frozen=True, slots=True)
class ReadFrom:
    node: NodeId


@dataclass(frozen=True, slots=True)
class EntryFound:
    entry: wire.Entry


@dataclass(frozen=True, slots=True)
class ReadFailed:
    error: StorageError


ReadEffect = ReadFrom | EntryFound | ReadFailed


def read_bound(metadata: LedgerMetadata, lac: int) -> int:
    """Highest entry id a reader may return."""
    if metadata.state is LedgerState.CLOSED:
        return metadata.last_entry_id
    return lac


def check_readable(metadata: LedgerMetadata, lac: int, first: int, last: int) -> None:
    bound = read_bound(metadata, lac)
    if first < 0 or last < first:
        raise ValueError(f"bad range {first}..{last}")
    if last > bound:
        if metadata.state is LedgerState.CLOSED:
            raise LedgerClosed(f"ledger {metadata.ledger_id} ends at {bound}; asked for {last}")
        raise NoSuchEntry(f"ledger {metadata.ledger_id}: entry {last} is past LAC {bound}")


def verify(ledger_id: int, entry_id: int, data: bytes) -> wire.Entry | None:
    """The decoded entry if it is intact and is the one asked for."""
    try:
        entry = wire.decode_entry(data)
    except (ChecksumMismatch, ProtocolViolation):
        return None
    if entry.ledger_id != ledger_id or entry.entry_id != entry_id:
        return None
    return entry


class EntryReadCore:
    """One read of one entry over its write set."""

    def __init__(
        self,
        ledger_id: int,
        entry_id: int,
        write_set: tuple[NodeId, ...],
        speculative_ms: int = SPECULATIVE_READ_MS,
    ) -> None:
        assert write_set
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.write_set = write_set
        self.speculative_ms = speculative_ms
        self._next = 0
        self._waiting: set[NodeId] = set()
        self._negative: set[NodeId] = set()
        self._errors: set[NodeId] = set()
        self._deadline: int | None = None
        self.done = False

    def start(self, now_ms: int) -> list[ReadEffect]:
        return self._ask_next(now_ms)

    def next_deadline_ms(self) -> int | None:
        return None if self.done else self._deadline

    def on_timer(self, now_ms: int) -> list[ReadEffect]:
        if self.done or self._deadline is None or now_ms < self._deadline:
            return []
        return self._ask_next(now_ms)

    def on_response(self, node: NodeId, status: Status, data: bytes, now_ms: int) -> list[ReadEffect]:
        if self.done or node not in self._waiting:
            return []
        self._waiting.discard(node)
        if status is Status.OK:
            entry = verify(self.ledger_id, self.entry_id, data)
            if entry is not None:
                self.done = True
                return [EntryFound(entry)]
            self._errors.add(node)
        elif status in (Status.NO_SUCH_ENTRY, Status.NO_SUCH_LEDGER):
            self._negative.add(node)
        else:
            self._errors.add(node)
        if self._next < len(self.write_set):
            return self._ask_next(now_ms)
        if self._waiting:
            return []
        self.done = True
        where = f"ledger {self.ledger_id} entry {self.entry_id}"
        if len(self._negative) == len(self.write_set):
            return [ReadFailed(NoSuchEntry(f"{where}: no replica has it"))]
        return [ReadFailed(NodeUnavailable(f"{where}: no replica returned it intact"))]

    def _ask_next(self, now_ms: int) -> list[ReadEffect]:
        if self._next >= len(self.write_set):
            self._deadline = None
            return []
        node = self.write_set[self._next]
        self._next += 1
        self._waiting.add(node)
        more = self._next < len(self.write_set)
        self._deadline = now_ms + self.speculative_ms if more else None
        return [ReadFrom(node)]


class LacPoll:
    """Ask every node of the last ensemble for its LAC; done at the first
    answer above ``previous`` or when all answered (then the maximum)."""

    def __init__(self, nodes: tuple[NodeId, ...], previous: int) -> None:
        self.nodes = nodes
        self.previous = previous
        self.best = previous
        self._left = set(nodes)
        self.done = False

    def on_response(self, node: NodeId, status: Status, lac: int) -> int | None:
        """The LAC to report, once decided."""
        if self.done or node not in self._left:
            return None
        self._left.discard(node)
        if status is Status.OK or status is Status.TIMEOUT:  # a timed-out poll still carries the LAC
            self.best = max(self.best, lac)
        if self.best > self.previous or not self._left:
            self.done = True
            return self.best
        return None


@dataclass(frozen=True, slots=True)
class RangePart:
    first: int
    last: int
    range_nodes: tuple[NodeId, ...]  # nodes each holding all of first..last; () = read entry by entry


def plan_range(metadata: LedgerMetadata, first: int, last: int) -> list[RangePart]:
    """Split ``first..last`` at segment boundaries; mark parts a single node can serve."""
    parts: list[RangePart] = []
    segments = metadata.segments
    entry = first
    while entry <= last:
        segment = metadata.segment_for(entry)
        position = segments.index(segment)
        segment_end = segments[position + 1].first_entry_id - 1 if position + 1 < len(segments) else last
        part_last = min(last, segment_end)
        striped = metadata.write_quorum < metadata.ensemble_size
        parts.append(RangePart(entry, part_last, () if striped else segment.ensemble))
        entry = part_last + 1
    return parts
