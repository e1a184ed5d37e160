"""Publish path decisions: adaptive entry batching and deduplication (pure).

Owns: ``PublishBatcher`` (which published messages go into the next ledger
entry, and when that entry is cut) and ``Dedup`` (per-producer sequence ids).
Rules:
- batching (docs/architecture.md §4): an entry is cut when no add is in flight (the
  previous one completed); while the adds in flight are all light (at most
  ``light_messages`` messages each: the topic is lightly loaded) and fewer than
  ``light_inflight``, also at once; otherwise - with adds in flight - once the
  waiting messages make a worthwhile entry (``pipeline_messages`` messages or
  ``pipeline_bytes`` bytes, at most a full one); at most ``inflight_max``
  entries are in flight. So latency stays one add at low rates (a lone message
  is not held back behind another small add, and the nodes see few entries),
  while under load - entries grow heavy - several well-filled adds are
  pipelined instead of many small ones.
  The queue of waiting messages is bounded in messages and bytes; ``offer``
  refuses beyond it (backpressure, HTTP 429).
- dedup (docs/compatibility.md §4.9, fix of pulsar #5218): per producer name the highest
  sequence id *persisted* and *pushed*. A message at or below persisted is a
  duplicate (not stored, answered as such); one at or below pushed but above
  persisted is still in flight: the answer is a retriable error, never a silent
  drop. A failed add lowers pushed back to persisted and opens a gap at the
  lowest sequence id that failed: later ids of that producer are refused
  (retriable) until it is sent again, so nothing the producer pipelined behind a
  failure is stored ahead of its resend - which dedup would otherwise answer as
  a duplicate of ids persisted after it, acknowledging a message never stored.
  A new id refused before it is queued (queue full, backlog quota, topic
  closing) opens the same gap: a later, smaller message of that producer that
  still fits must not be stored ahead of it either.
  A gap the producer does not fill within ``gap_refusals_max`` refusals is given
  up: later ids go on. Ids a producer's persisted sequence skipped over are
  remembered as *holes* (the last ``HOLES_MAX`` ranges per producer, also in
  the snapshot and rebuilt by the replay after a move): a resend of an id in a
  hole was never stored, so it is refused (``ABANDONED``), never answered as a
  duplicate - this also covers a message that failed on the previous owner
  while a later one of the same producer reached the new owner first.
  At most ``producers_max`` producers are tracked; the least recently used goes
  first.
"""

from __future__ import annotations

import enum
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from storage.formats.entry_format import ENTRY_BYTES_MAX, ENTRY_HEADER_BYTES, MESSAGES_PER_ENTRY_MAX

T = TypeVar("T")

QUEUE_MESSAGES_MAX = 50_000  # waiting to be cut into entries, per topic
QUEUE_BYTES_MAX = 64 * 1024 * 1024
INFLIGHT_MAX = 8  # entries appended but not confirmed, per topic
EAGER_INFLIGHT = 1  # cut without waiting while fewer adds than this are in flight
LIGHT_INFLIGHT = 2  # ... or fewer than this, all of them light
LIGHT_MESSAGES = 4  # an entry of at most this many messages is light
PIPELINE_MESSAGES = 100  # ... and with more in flight, once this many messages wait
PIPELINE_BYTES = 64 * 1024  # ... or this many bytes
DEDUP_PRODUCERS_MAX = 10_000  # brokerDeduplicationMaxNumberOfProducers
GAP_REFUSALS_MAX = 1_000  # refusals behind an unfilled gap before it is given up
HOLES_MAX = 16  # ranges of skipped sequence ids remembered per producer (32 bytes each)


@dataclass(frozen=True, slots=True)
class BatcherConfig:
    entry_messages_max: int = MESSAGES_PER_ENTRY_MAX
    entry_bytes_max: int = ENTRY_BYTES_MAX
    inflight_max: int = INFLIGHT_MAX
    eager_inflight: int = EAGER_INFLIGHT  # below this many adds in flight, cut at once
    light_inflight: int = LIGHT_INFLIGHT  # ... below this many, all light, also at once
    light_messages: int = LIGHT_MESSAGES  # an entry of at most this many messages is light
    pipeline_messages: int = PIPELINE_MESSAGES  # beyond it, once this many messages wait
    pipeline_bytes: int = PIPELINE_BYTES  # ... or this many bytes
    queue_messages_max: int = QUEUE_MESSAGES_MAX
    queue_bytes_max: int = QUEUE_BYTES_MAX


class PublishBatcher(Generic[T]):
    """Messages (already encoded) waiting for an entry, and entries in flight."""

    def __init__(self, config: BatcherConfig | None = None) -> None:
        self.config = config or BatcherConfig()
        self._queue: deque[tuple[bytes, T]] = deque()
        self._queued_bytes = 0
        self.inflight = 0
        self._heavy_inflight = 0  # adds in flight of more than light_messages messages

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def has_room(self, count: int, size: int) -> bool:
        cfg = self.config
        return (
            len(self._queue) + count <= cfg.queue_messages_max
            and self._queued_bytes + size <= cfg.queue_bytes_max
        )

    def offer(self, encoded: bytes, token: T) -> bool:
        """Queue one encoded message; False when the queue is full."""
        if not self.has_room(1, len(encoded)):
            return False
        self._queue.append((encoded, token))
        self._queued_bytes += len(encoded)
        return True

    def offer_all(self, encoded: list[bytes], tokens: list[T], size: int) -> bool:
        """Queue all of ``encoded`` (``size`` bytes in all) in order, or none of them
        (False: they do not all fit)."""
        if not self.has_room(len(encoded), size):
            return False
        self._queue.extend(zip(encoded, tokens, strict=True))
        self._queued_bytes += size
        return True

    def _worth_pipelining(self) -> bool:
        """Enough waits to be worth an entry while adds are in flight."""
        cfg = self.config
        if len(self._queue) >= min(cfg.pipeline_messages, cfg.entry_messages_max):
            return True
        return ENTRY_HEADER_BYTES + self._queued_bytes >= min(cfg.pipeline_bytes, cfg.entry_bytes_max)

    def cut(self) -> tuple[list[bytes], list[T]] | None:
        """The next entry's messages if one should be appended now, else None.
        Call repeatedly until None; call ``on_entry_done`` when its add ends."""
        if not self._queue or self.inflight >= self.config.inflight_max:
            return None
        cfg = self.config
        inflight = self.inflight
        if (
            inflight >= cfg.eager_inflight
            and (inflight >= cfg.light_inflight or self._heavy_inflight)
            and not self._worth_pipelining()
        ):
            return None
        queue = self._queue
        everything = ENTRY_HEADER_BYTES + self._queued_bytes
        if len(queue) <= cfg.entry_messages_max and everything <= cfg.entry_bytes_max:
            parts = [encoded for encoded, _ in queue]  # all of it fits one entry: taken at once
            tokens = [token for _, token in queue]
            queue.clear()
            self._queued_bytes = 0
            return self._cut_done(parts, tokens)
        parts, tokens = [], []
        size = ENTRY_HEADER_BYTES
        while queue and len(parts) < cfg.entry_messages_max:
            encoded = queue[0][0]
            if parts and size + len(encoded) > cfg.entry_bytes_max:
                break
            encoded, token = queue.popleft()
            parts.append(encoded)
            tokens.append(token)
            size += len(encoded)
        self._queued_bytes -= size - ENTRY_HEADER_BYTES
        return self._cut_done(parts, tokens)

    def _cut_done(self, parts: list[bytes], tokens: list[T]) -> tuple[list[bytes], list[T]]:
        self.inflight += 1
        if len(parts) > self.config.light_messages:
            self._heavy_inflight += 1
        return parts, tokens

    def on_entry_done(self, messages: int) -> None:
        """The add of an entry of ``messages`` messages (as cut) ended."""
        assert self.inflight > 0
        self.inflight -= 1
        if messages > self.config.light_messages:
            assert self._heavy_inflight > 0
            self._heavy_inflight -= 1

    def drain(self) -> list[T]:
        """Forget every waiting message (topic closing); returns their tokens."""
        tokens = [token for _, token in self._queue]
        self._queue.clear()
        self._queued_bytes = 0
        return tokens


class DedupVerdict(enum.Enum):
    NEW = "new"
    DUPLICATE = "duplicate"  # already persisted: answer with the duplicate id, store nothing
    IN_FLIGHT = "in_flight"  # an add with this sequence id has not completed: retry later
    GAP = "gap"  # an earlier id of this producer failed and was not sent again: retry later
    ABANDONED = "abandoned"  # below persisted but in a hole: never stored, later ids were


class Dedup:
    """Highest sequence ids per producer name, pushed (in flight) and persisted,
    the gap a failed add leaves until the producer fills it, and the holes its
    persisted sequence skipped."""

    def __init__(
        self, producers_max: int = DEDUP_PRODUCERS_MAX, gap_refusals_max: int = GAP_REFUSALS_MAX
    ) -> None:
        self._persisted: OrderedDict[str, int] = OrderedDict()
        self._pushed: dict[str, int] = {}
        self._gap: dict[str, int] = {}  # lowest failed sequence id not sent again
        self._refusals: dict[str, int] = {}  # refused behind the gap so far
        self._holes: dict[str, deque[tuple[int, int]]] = {}  # skipped ranges, inclusive
        self._given_up: dict[str, int] = {}  # a given-up gap: where the next hole starts
        self._producers_max = producers_max
        self._gap_refusals_max = gap_refusals_max

    def last_persisted(self, producer: str) -> int:
        return self._persisted.get(producer, -1)

    def last_pushed(self, producer: str) -> int:
        return max(self._pushed.get(producer, -1), self.last_persisted(producer))

    def gap(self, producer: str) -> int | None:
        return self._gap.get(producer)

    def check(self, producer: str, sequence_id: int) -> DedupVerdict:
        """The verdict on a message about to be queued; a ``GAP`` refusal is counted
        (the gap is given up after ``gap_refusals_max`` of them)."""
        if sequence_id <= self.last_persisted(producer):
            if any(low <= sequence_id <= high for low, high in self._holes.get(producer, ())):
                return DedupVerdict.ABANDONED
            return DedupVerdict.DUPLICATE
        if sequence_id <= self._pushed.get(producer, -1):
            return DedupVerdict.IN_FLIGHT
        gap = self._gap.get(producer)
        if gap is not None and sequence_id > gap:
            refused = self._refusals.get(producer, 0) + 1
            if refused <= self._gap_refusals_max:
                self._refusals[producer] = refused
                return DedupVerdict.GAP
            del self._gap[producer]  # given up: a hole from it once a later id is stored
            self._refusals.pop(producer, None)
            self._given_up[producer] = gap
        return DedupVerdict.NEW

    def on_pushed(self, producer: str, sequence_id: int) -> None:
        if sequence_id > self._pushed.get(producer, -1):
            self._pushed[producer] = sequence_id
        gap = self._gap.get(producer)
        if gap is not None and sequence_id >= gap:
            del self._gap[producer]
            self._refusals.pop(producer, None)

    def on_persisted(self, producer: str, sequence_id: int) -> None:
        last = self._persisted.get(producer)
        if last is None or sequence_id > last:
            given_up = self._given_up.pop(producer, None)
            start = last + 1 if last is not None else given_up  # a first id skips nothing known
            if start is not None and sequence_id > start:
                holes = self._holes.setdefault(producer, deque(maxlen=HOLES_MAX))
                holes.append((start, sequence_id - 1))
            self._persisted[producer] = sequence_id
        self._persisted.move_to_end(producer)
        while len(self._persisted) > self._producers_max:
            old, _ = self._persisted.popitem(last=False)
            for table in (self._pushed, self._gap, self._refusals, self._holes, self._given_up):
                table.pop(old, None)

    def on_failed(self, producer: str, sequence_id: int) -> None:
        """An add failed: sequence ids above persisted may be retried, from the
        lowest that failed on."""
        persisted = self.last_persisted(producer)
        self._pushed[producer] = persisted
        if sequence_id > persisted:
            self._open_gap(producer, sequence_id)

    def on_refused(self, producer: str, sequence_id: int) -> None:
        """A message was refused before it was queued: if it was new, later ids of
        the producer wait for its resend (a gap, as after a failed add)."""
        if sequence_id > self.last_pushed(producer):
            self._open_gap(producer, sequence_id)

    def _open_gap(self, producer: str, sequence_id: int) -> None:
        gap = self._gap.get(producer)
        self._gap[producer] = sequence_id if gap is None else min(gap, sequence_id)

    def snapshot(self) -> dict[str, Any]:
        """The persisted state, JSON-ready: ``{"producers": {name: seq}, "holes":
        {name: [[low, high], ...]}}`` (ADR 0005's dedup key)."""
        holes = {name: [list(hole) for hole in ranges] for name, ranges in self._holes.items() if ranges}
        return {"producers": dict(self._persisted), "holes": holes}

    def restore(self, data: Mapping[str, Any]) -> None:
        """Take a ``snapshot()`` back (one without ``holes`` is taken as having none)."""
        for name, seq in data.get("producers", {}).items():
            self.on_persisted(str(name), int(seq))
        for name, ranges in data.get("holes", {}).items():
            if str(name) in self._persisted:
                holes = self._holes.setdefault(str(name), deque(maxlen=HOLES_MAX))
                holes.extend((int(low), int(high)) for low, high in ranges)
