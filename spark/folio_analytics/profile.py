"""One topic partition's statistics as a mergeable fold (pure).

Owns: ``Profile`` - messages, bytes, payload sizes, keys (distinct, heavy
hitters, messages per Key_Shared slot bucket), producers, event-time lag, the
publish-time series, per ledger an index of messages by entry id (what a
subscription's backlog is measured on) and, for a JSON or AVRO topic, the
per-field profile of its payloads (``fields``) - with ``merge``, JSON and
``fold_messages``, the plain-Python fold of ``Message`` rows that defines what
every faster path (the Arrow fold the Spark job runs) must produce.
Rule: ``merge`` is associative and commutative and every part is bounded
(``Bounds``), so folding a run's new messages into the stored profile equals
folding all messages at once (see ``sketches``), whatever the split.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from folio_analytics.fields import FieldProfile
from folio_analytics.grid import GridSeries
from folio_analytics.sketches import HeavyHitters, Hll, LogHistogram
from storage.formats.key_hash import HASH_RANGE_SIZE, NONE_KEY, key_slot

MINUTE_MS = 60_000
SLOT_BUCKETS = 256  # buckets of HASH_RANGE_SIZE // SLOT_BUCKETS slots
SLOTS_PER_BUCKET = HASH_RANGE_SIZE // SLOT_BUCKETS
OTHER_PRODUCERS = "(other producers)"


@dataclass(frozen=True, slots=True)
class Bounds:
    series_cells: int = 720  # the rate-over-history chart: at most this many points
    index_cells: int = 32  # per ledger, cells of the entry index
    heavy_keys: int = 256  # keys tracked for the top list (Misra-Gries capacity)
    producers: int = 100  # producers listed by name; the rest are summed
    ledgers: int = 64  # ledgers indexed (the newest); older ones stay in the totals only
    key_chars: int = 128  # a longer key is tracked by its first key_chars characters


@dataclass(frozen=True, slots=True)
class Message:
    """One message as the statistics see it (a row of the connector's schema)."""

    ledger_id: int
    entry_id: int
    size: int
    publish_ms: int
    key: str | None = None
    producer: str = ""
    event_ms: int | None = None


def key_bytes(key: str | None) -> bytes:
    """The sticky key a Key_Shared subscription routes by (no key: ``NONE_KEY``)."""
    return NONE_KEY if key is None else key.encode()


@dataclass(slots=True)
class Profile:
    bounds: Bounds = field(default_factory=Bounds)
    messages: int = 0
    bytes: int = 0
    first_ms: int | None = None
    last_ms: int | None = None
    sizes: LogHistogram = field(default_factory=LogHistogram)
    lags: LogHistogram = field(default_factory=LogHistogram)  # publish - event time, ms, when >= 0
    negative_lags: int = 0  # event time after publish time (clock skew)
    keyless: int = 0
    distinct: Hll = field(default_factory=Hll)
    heavy: HeavyHitters = field(init=False)
    slot_buckets: list[int] = field(default_factory=lambda: [0] * SLOT_BUCKETS)
    producers: dict[str, list[int]] = field(default_factory=dict)  # name -> [messages, bytes]
    series: GridSeries = field(init=False)
    index: dict[int, GridSeries] = field(default_factory=dict)  # ledger id -> entry-id series
    first: tuple[int, int] | None = None  # the lowest (ledger, entry) folded
    last: tuple[int, int] | None = None  # the highest (ledger, entry) folded
    fields: FieldProfile | None = None  # payload fields, when read with the topic's JSON/AVRO schema

    def __post_init__(self) -> None:
        self.heavy = HeavyHitters(self.bounds.heavy_keys)
        self.series = GridSeries(MINUTE_MS, self.bounds.series_cells)

    # ------------------------------------------------------------ folds of pre-aggregated data

    def add_totals(self, messages: int, size: int, first_ms: int, last_ms: int) -> None:
        self.messages += messages
        self.bytes += size
        self.first_ms = first_ms if self.first_ms is None else min(self.first_ms, first_ms)
        self.last_ms = last_ms if self.last_ms is None else max(self.last_ms, last_ms)

    def add_keys(self, counts: dict[str | None, int]) -> None:
        named: dict[str, int] = {}
        for key, n in counts.items():
            raw = key_bytes(key)
            self.slot_buckets[key_slot(raw) // SLOTS_PER_BUCKET] += n
            if key is None:
                self.keyless += n
                continue
            self.distinct.add(raw)
            short = key[: self.bounds.key_chars]
            named[short] = named.get(short, 0) + n
        self.heavy.add_counts(named)

    def add_producers(self, rows: Iterable[tuple[str, int, int]]) -> None:
        for name, messages, size in rows:
            have = self.producers.setdefault(name, [0, 0])
            have[0] += messages
            have[1] += size
        self._bound_producers()

    def add_entries(self, ledger_id: int, rows: Iterable[tuple[int, int, int, int]]) -> None:
        """``(entry_id, messages, bytes, oldest publish ms)`` of one ledger's entries."""
        rows = list(rows)
        series = self.index.get(ledger_id)
        if series is None:
            series = self.index[ledger_id] = GridSeries(1, self.bounds.index_cells)
        series.add_many(rows)
        low, top = min(e for e, *_ in rows), max(e for e, *_ in rows)
        if self.last is None or (ledger_id, top) > self.last:
            self.last = (ledger_id, top)
        if self.first is None or (ledger_id, low) < self.first:
            self.first = (ledger_id, low)
        self._bound_ledgers()

    def add_lag(self, lag_ms: int, count: int = 1) -> None:
        if lag_ms < 0:
            self.negative_lags += count
        else:
            self.lags.add(lag_ms, count)

    # ------------------------------------------------------------ merge and bounds

    def merge(self, other: Profile) -> None:
        if other.messages:
            assert other.first_ms is not None and other.last_ms is not None
            self.add_totals(other.messages, other.bytes, other.first_ms, other.last_ms)
        self.sizes.merge(other.sizes)
        self.lags.merge(other.lags)
        self.negative_lags += other.negative_lags
        self.keyless += other.keyless
        self.distinct.merge(other.distinct)
        self.heavy.merge(other.heavy)
        self.slot_buckets = [a + b for a, b in zip(self.slot_buckets, other.slot_buckets, strict=True)]
        self.add_producers((name, m, b) for name, (m, b) in other.producers.items())
        self.series.merge(other.series)
        for ledger_id, series in other.index.items():
            mine = self.index.get(ledger_id)
            if mine is None:
                self.index[ledger_id] = GridSeries.from_json(series.to_json(), self.bounds.index_cells)
            else:
                mine.merge(series)
        if other.last is not None and (self.last is None or other.last > self.last):
            self.last = other.last
        if other.first is not None and (self.first is None or other.first < self.first):
            self.first = other.first
        if other.fields is not None:
            if self.fields is None:
                self.fields = FieldProfile()
            self.fields.merge(other.fields)
        self._bound_ledgers()

    def _bound_producers(self) -> None:
        named = [p for p in self.producers if p != OTHER_PRODUCERS]
        if len(named) <= self.bounds.producers:
            return
        keep = set(sorted(named, key=lambda p: (-self.producers[p][0], p))[: self.bounds.producers])
        other = self.producers.pop(OTHER_PRODUCERS, [0, 0])
        for name in named:
            if name not in keep:
                m, b = self.producers.pop(name)
                other[0] += m
                other[1] += b
        self.producers[OTHER_PRODUCERS] = other

    def _bound_ledgers(self) -> None:
        while len(self.index) > self.bounds.ledgers:
            oldest = min(self.index)
            del self.index[oldest]  # its messages stay in the totals; backlog there is no longer indexed

    # ------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "bytes": self.bytes,
            "firstMs": self.first_ms,
            "lastMs": self.last_ms,
            "sizes": self.sizes.to_json(),
            "lags": self.lags.to_json(),
            "negativeLags": self.negative_lags,
            "keyless": self.keyless,
            "distinct": self.distinct.to_json(),
            "heavy": self.heavy.to_json(),
            "slotBuckets": self.slot_buckets,
            "producers": sorted([n, m, b] for n, (m, b) in self.producers.items()),
            "series": self.series.to_json(),
            "index": {str(lid): s.to_json() for lid, s in sorted(self.index.items())},
            "first": list(self.first) if self.first else None,
            "last": list(self.last) if self.last else None,
            "fields": None if self.fields is None else self.fields.to_json(),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any], bounds: Bounds | None = None) -> Profile:
        p = cls(bounds or Bounds())
        p.messages, p.bytes = int(raw["messages"]), int(raw["bytes"])
        p.first_ms, p.last_ms = raw["firstMs"], raw["lastMs"]
        p.sizes = LogHistogram.from_json(raw["sizes"])
        p.lags = LogHistogram.from_json(raw["lags"])
        p.negative_lags, p.keyless = int(raw["negativeLags"]), int(raw["keyless"])
        p.distinct = Hll.from_json(raw["distinct"])
        p.heavy = HeavyHitters.from_json(raw["heavy"])
        p.slot_buckets = [int(n) for n in raw["slotBuckets"]]
        p.producers = {str(n): [int(m), int(b)] for n, m, b in raw["producers"]}
        p.series = GridSeries.from_json(raw["series"], p.bounds.series_cells)
        p.index = {int(lid): GridSeries.from_json(s, p.bounds.index_cells) for lid, s in raw["index"].items()}
        p.first = (int(raw["first"][0]), int(raw["first"][1])) if raw["first"] else None
        p.last = (int(raw["last"][0]), int(raw["last"][1])) if raw["last"] else None
        p.fields = FieldProfile.from_json(raw["fields"]) if raw.get("fields") else None
        return p


def fold_messages(messages: Iterable[Message], bounds: Bounds | None = None) -> Profile:
    """The reference fold: a profile of ``messages``, one at a time in plain Python."""
    profile = Profile(bounds or Bounds())
    keys: dict[str | None, int] = {}
    producers: dict[str, list[int]] = {}
    entries: dict[int, dict[int, list[int]]] = {}
    series: list[tuple[int, int, int, int]] = []
    for m in messages:
        profile.add_totals(1, m.size, m.publish_ms, m.publish_ms)
        profile.sizes.add(m.size)
        keys[m.key] = keys.get(m.key, 0) + 1
        have = producers.setdefault(m.producer, [0, 0])
        have[0] += 1
        have[1] += m.size
        entry = entries.setdefault(m.ledger_id, {}).setdefault(m.entry_id, [0, 0, m.publish_ms])
        entry[0] += 1
        entry[1] += m.size
        entry[2] = min(entry[2], m.publish_ms)
        series.append((m.publish_ms, 1, m.size, m.publish_ms))
        if m.event_ms is not None:
            profile.add_lag(m.publish_ms - m.event_ms)
    profile.add_keys(keys)
    profile.add_producers((n, c, b) for n, (c, b) in producers.items())
    profile.series.add_many(series)
    for ledger_id, rows in entries.items():
        profile.add_entries(ledger_id, ((e, c, b, o) for e, (c, b, o) in rows.items()))
    return profile
