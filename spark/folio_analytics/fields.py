"""Per-field profile of a JSON or AVRO topic's payloads as a mergeable fold (pure).

Owns: ``FieldSpec`` (one leaf of the topic's record, a dotted path for nested
records, its kind and its place in the schema), ``FieldStats`` (null count, a
HyperLogLog of distinct values, min and max) and ``FieldProfile`` (the stats
of at most ``FIELDS_MAX`` leaves, plus how many payloads were seen and how many
did not decode), with ``merge``, JSON and ``fold_records``, the plain-Python
fold of decoded records that the Arrow fold (``arrow_fields``) must equal.
Rules: null counts, min and max merge exactly and the HyperLogLog merges by
register maximum, so folding a run's new messages into the stored profile
equals folding all of them at once; strings are kept to their first
``STRING_CHARS`` characters (truncation keeps their order, so min and max of
cut strings are the cut min and max); NaN and infinities take no part in min
and max; the leaves kept are the first ``FIELDS_MAX`` in schema order.
"""

from __future__ import annotations

import enum
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from folio_analytics.sketches import Hll

FIELDS_MAX = 32  # leaves profiled per topic (the first in schema order)
FIELD_HLL_P = 10  # 1024 registers: about 3.3 % standard error, 1.4 KB of JSON per field
STRING_CHARS = 64  # min and max of a string field keep this many characters


class FieldKind(enum.Enum):
    NUMBER = "number"  # int, long, float, double, decimal: min, max, distinct
    STRING = "string"  # string, enum, uuid: min, max (cut), distinct
    BOOLEAN = "boolean"  # min, max, distinct
    OTHER = "other"  # bytes, arrays, maps, times: nulls only


@dataclass(frozen=True, slots=True)
class FieldSpec:
    path: str  # "address.city"
    kind: FieldKind
    pos: int  # depth-first place of the leaf in the record definition


def value_bytes(kind: FieldKind, value: Any) -> bytes:
    """What the distinct-count sketch hashes for a non-null value."""
    if kind is FieldKind.NUMBER:
        return struct.pack("<d", float(value))
    if kind is FieldKind.BOOLEAN:
        return b"\x01" if value else b"\x00"
    return str(value).encode("utf-8", "surrogatepass")


def ordered(kind: FieldKind, value: Any) -> Any | None:
    """The value as min/max keep it (None: it takes no part)."""
    if kind is FieldKind.NUMBER:
        if isinstance(value, Decimal):
            value = float(value)
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return value
    if kind is FieldKind.STRING:
        return str(value)[:STRING_CHARS]
    if kind is FieldKind.BOOLEAN:
        return bool(value)
    return None


@dataclass(slots=True)
class FieldStats:
    kind: FieldKind
    pos: int
    nulls: int = 0
    distinct: Hll = field(default_factory=lambda: Hll.of_precision(FIELD_HLL_P))
    low: Any = None
    high: Any = None

    def add_range(self, low: Any, high: Any) -> None:
        if low is not None and (self.low is None or low < self.low):
            self.low = low
        if high is not None and (self.high is None or high > self.high):
            self.high = high

    def merge(self, other: FieldStats) -> None:
        self.pos = min(self.pos, other.pos)
        self.nulls += other.nulls
        self.distinct.merge(other.distinct)
        self.add_range(other.low, other.high)

    def to_json(self, path: str) -> dict[str, Any]:
        return {
            "path": path,
            "kind": self.kind.value,
            "pos": self.pos,
            "nulls": self.nulls,
            "distinct": self.distinct.to_json() if self.kind is not FieldKind.OTHER else None,
            "min": self.low,
            "max": self.high,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> FieldStats:
        kind = FieldKind(raw["kind"])
        stats = cls(kind, int(raw["pos"]), int(raw["nulls"]), low=raw["min"], high=raw["max"])
        if raw["distinct"] is not None:
            stats.distinct = Hll.from_json(raw["distinct"], 1 << FIELD_HLL_P)
        return stats


@dataclass(slots=True)
class FieldProfile:
    rows: int = 0  # payloads folded (each counts for every field: a missing field is null)
    undecoded: int = 0  # payloads without a schema version or that did not decode
    fields: dict[str, FieldStats] = field(default_factory=dict)

    def stats_for(self, spec: FieldSpec) -> FieldStats:
        have = self.fields.get(spec.path)
        if have is None:
            have = self.fields[spec.path] = FieldStats(spec.kind, spec.pos)
        return have

    def merge(self, other: FieldProfile) -> None:
        """A field one side lacks (its schema had none) was null in every row of that side."""
        for path, stats in self.fields.items():
            if path not in other.fields:
                stats.nulls += other.rows
        for path, stats in other.fields.items():
            mine = self.fields.get(path)
            if mine is None:
                mine = self.fields[path] = FieldStats.from_json(stats.to_json(path))
                mine.nulls += self.rows
            elif mine.kind is stats.kind:
                mine.merge(stats)
            else:  # the field changed kind between schema versions: the newer rows' kind stays
                self.fields[path] = FieldStats.from_json(stats.to_json(path))
                self.fields[path].nulls += self.rows
        self.rows += other.rows
        self.undecoded += other.undecoded
        self.bound()

    def bound(self) -> None:
        if len(self.fields) > FIELDS_MAX:
            keep = sorted(self.fields, key=lambda p: (self.fields[p].pos, p))[:FIELDS_MAX]
            self.fields = {p: self.fields[p] for p in keep}

    def _ordered(self) -> list[tuple[str, FieldStats]]:
        return sorted(self.fields.items(), key=lambda kv: (kv[1].pos, kv[0]))

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "undecoded": self.undecoded,
            "fields": [s.to_json(p) for p, s in self._ordered()],
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> FieldProfile:
        return cls(
            int(raw["rows"]),
            int(raw["undecoded"]),
            {str(f["path"]): FieldStats.from_json(f) for f in raw["fields"]},
        )

    def view(self) -> dict[str, Any]:
        """What the admin API shows: per field its null fraction, distinct estimate, min, max."""
        rows = self.rows or 1
        return {
            "messages": self.rows,
            "undecoded": self.undecoded,
            "fields": [
                {
                    "path": path,
                    "kind": s.kind.value,
                    "nulls": s.nulls,
                    "nullFraction": s.nulls / rows,
                    "distinct": None if s.kind is FieldKind.OTHER else s.distinct.estimate(),
                    "min": s.low,
                    "max": s.high,
                }
                for path, s in self._ordered()
            ],
        }


def _at(record: Mapping[str, Any] | None, path: str) -> Any:
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def fold_records(records: Iterable[Mapping[str, Any] | None], specs: Sequence[FieldSpec]) -> FieldProfile:
    """The reference fold: a field profile of decoded records (None: did not decode)."""
    profile = FieldProfile()
    kept = sorted(specs, key=lambda s: (s.pos, s.path))[:FIELDS_MAX]
    for spec in kept:
        profile.stats_for(spec)
    for record in records:
        profile.rows += 1
        if record is None:
            profile.undecoded += 1
        for spec in kept:
            stats = profile.fields[spec.path]
            value = _at(record, spec.path)
            if value is None:
                stats.nulls += 1
                continue
            if spec.kind is FieldKind.OTHER:
                continue
            stats.distinct.add(value_bytes(spec.kind, value))
            key = ordered(spec.kind, value)
            stats.add_range(key, key)
    return profile
