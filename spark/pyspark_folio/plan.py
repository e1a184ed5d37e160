"""Planning a read: which entries of which ledgers each Spark task reads (pure).

Owns: ``LedgerSpan`` (one ledger as planning sees it: the last entry a reader
may read - the closed ledger's last entry, or the open ledger's LAC at planning
time - its bytes and close time), ``LogSnapshot`` (a partition's ledgers),
``RowFilter`` (what a task keeps of the messages it decodes), ``ReadRange``
(one Spark input partition) and ``plan_ranges``.
Rules:
- a read covers the messages from ``start`` (inclusive) to ``end`` (exclusive),
  both ``Pos``; nothing past a ledger's ``last_entry`` is ever planned, so a read
  racing live publishing returns exactly the messages up to LAC at planning time;
- one range per ledger, split into ranges of at most ``entries_per_range``
  entries and (for closed ledgers, whose size is known) about
  ``bytes_per_range`` bytes: a task's work is bounded, not a whole ledger;
- a closed ledger closed before the lowest publish time wanted holds nothing
  wanted (a message is stamped before its entry is added, before the close).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql.datasource import InputPartition

from pyspark_folio.names import TopicPartition
from pyspark_folio.positions import EARLIEST, Pos

ENTRIES_PER_RANGE = 20_000
BYTES_PER_RANGE = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class LedgerSpan:
    ledger_id: int
    last_entry: int  # the last readable entry (-1: none)
    size_bytes: int = 0  # 0: unknown (the open ledger)
    closed_ms: int = 0  # when it closed (0: open or unknown)


@dataclass(frozen=True, slots=True)
class LogSnapshot:
    log: TopicPartition
    ledgers: tuple[LedgerSpan, ...]

    @property
    def end(self) -> Pos:
        """The position after the last readable message."""
        for span in reversed(self.ledgers):
            if span.last_entry >= 0:
                return Pos(span.ledger_id, span.last_entry + 1, 0)
        return Pos(self.ledgers[-1].ledger_id, 0, 0) if self.ledgers else Pos(-1, -1, 0)

    @property
    def first(self) -> Pos:
        """The position of the first message still in the log."""
        for span in self.ledgers:
            if span.last_entry >= 0:
                return Pos(span.ledger_id, 0, 0)
        return self.end


@dataclass(frozen=True, slots=True)
class RowFilter:
    """Messages a task keeps: publish time in [min, max] (ms, inclusive; None:
    unbounded) and, if ``keys`` is set, a key in it."""

    publish_min_ms: int | None = None
    publish_max_ms: int | None = None
    keys: frozenset[str] | None = None

    def prunes_ledger(self, span: LedgerSpan) -> bool:
        return self.publish_min_ms is not None and 0 < span.closed_ms < self.publish_min_ms

    @property
    def empty(self) -> bool:
        return (
            self.publish_min_ms is not None
            and self.publish_max_ms is not None
            and self.publish_min_ms > self.publish_max_ms
        ) or (self.keys is not None and not self.keys)


@dataclass(frozen=True)
class ReadRange(InputPartition):
    """Entries ``first_entry..last_entry`` of one ledger; in ``first_entry`` the
    messages from ``first_batch``, in ``last_entry`` those before ``stop_batch``
    (None: all)."""

    log: TopicPartition
    ledger_id: int
    first_entry: int
    last_entry: int
    first_batch: int = 0
    stop_batch: int | None = None
    rows: RowFilter = field(default_factory=RowFilter)

    @property
    def entries(self) -> int:
        return self.last_entry - self.first_entry + 1


def plan_ranges(
    snapshots: Iterable[tuple[LogSnapshot, Pos, Pos]],
    rows: RowFilter | None = None,
    entries_per_range: int = ENTRIES_PER_RANGE,
    bytes_per_range: int = BYTES_PER_RANGE,
) -> list[ReadRange]:
    """The ranges that read each log from its start to its end position."""
    rows = rows or RowFilter()
    if rows.empty:
        return []
    planned: list[ReadRange] = []
    for snapshot, start, end in snapshots:
        for span in snapshot.ledgers:
            if span.ledger_id < start.ledger_id or span.ledger_id > end.ledger_id or span.last_entry < 0:
                continue
            if rows.prunes_ledger(span):
                continue
            first, first_batch = 0, 0
            if span.ledger_id == start.ledger_id:
                first, first_batch = max(start.entry_id, 0), start.batch_index if start.entry_id >= 0 else 0
            last, stop_batch = span.last_entry, None
            if span.ledger_id == end.ledger_id:
                if end.batch_index > 0 and end.entry_id <= span.last_entry:
                    last, stop_batch = end.entry_id, end.batch_index
                else:
                    last = min(last, end.entry_id - 1)
            if last < first or (last == first and stop_batch is not None and stop_batch <= first_batch):
                continue
            planned.extend(
                _split(
                    snapshot.log,
                    span,
                    first,
                    last,
                    first_batch,
                    stop_batch,
                    rows,
                    entries_per_range,
                    bytes_per_range,
                )
            )
    return planned


def _split(
    log: TopicPartition,
    span: LedgerSpan,
    first: int,
    last: int,
    first_batch: int,
    stop_batch: int | None,
    rows: RowFilter,
    entries_per_range: int,
    bytes_per_range: int,
) -> list[ReadRange]:
    count = last - first + 1
    pieces = math.ceil(count / entries_per_range)
    if span.size_bytes > 0 and span.last_entry >= 0:
        estimated = span.size_bytes * count / (span.last_entry + 1)
        pieces = max(pieces, math.ceil(estimated / bytes_per_range))
    step = math.ceil(count / pieces)
    ranges = []
    for low in range(first, last + 1, step):
        high = min(last, low + step - 1)
        ranges.append(
            ReadRange(
                log,
                span.ledger_id,
                low,
                high,
                first_batch if low == first else 0,
                stop_batch if high == last else None,
                rows,
            )
        )
    return ranges


class DataLoss(Exception):
    """Messages asked for are gone (retention removed their ledgers)."""


def resolve_start(snapshot: LogSnapshot, spec: Pos | str, fail_on_data_loss: bool) -> Pos:
    """Where reading ``snapshot`` starts for an offsets spec (``earliest``,
    ``latest`` or a position); a position before the first message still kept
    is data loss (raised, or skipped to the first kept one)."""
    if spec == "earliest":
        return EARLIEST
    if spec == "latest":
        return snapshot.end
    assert isinstance(spec, Pos)
    first = snapshot.first
    kept = {span.ledger_id for span in snapshot.ledgers}
    if spec < first or (spec.ledger_id not in kept and spec < snapshot.end):
        if fail_on_data_loss and spec > EARLIEST and spec != first:
            raise DataLoss(f"{snapshot.log.name}: position {spec} is no longer in the log (first {first})")
        return max(spec, first) if spec.ledger_id in kept else first
    return spec


def resolve_end(snapshot: LogSnapshot, spec: Pos | str) -> Pos:
    if spec == "latest":
        return snapshot.end
    if spec == "earliest":
        return EARLIEST
    assert isinstance(spec, Pos)
    return min(spec, snapshot.end)


def durable_prefix(
    lac: int,
    segment_first: int,
    write_set: Callable[[int], Sequence[str]],
    ack_quorum: int,
    last_by_node: Mapping[str, int],
) -> int:
    """The highest entry of an open ledger such that it and every entry before it
    is stored on an ack quorum of its write set (so acknowledged to the writer or
    about to be, and kept by any recovery). Nodes learn the LAC only from the next
    add, so on a quiet topic the last acknowledged entries lie just past the LAC
    the nodes report; each node's ``last`` (highest entry it made durable, in
    the current segment) shows them. Never below ``lac``, nor below the entry before
    the current segment: a writer starts a new segment at its LAC + 1, so every
    entry before it was confirmed (even if no node has heard that LAC yet)."""
    bound = max(lac, segment_first - 1)
    top = max(last_by_node.values(), default=-1)
    while bound < top:
        entry = bound + 1
        holders = sum(1 for node in write_set(entry) if last_by_node.get(node, -1) >= entry)
        if holders < ack_quorum:
            break
        bound = entry
    return bound
