"""Filter pushdown: which of Spark's filters the connector applies itself (pure).

Owns: ``Pushed`` (what was accepted: topic and partition sets, the row filter)
and ``push_filters``. Rules: accepted are ``=``, ``IN`` and ranges on
``publish_time`` (they prune ledgers closed before the lower bound and drop
messages outside), ``=`` / ``IN`` on ``topic`` and ``partition`` (they prune
whole partitions) and on ``key`` (they drop messages while decoding); Spark does
not apply an accepted filter again, so each is applied exactly. Anything else
(``OR``, ``NOT``, other columns) is handed back for Spark to apply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TypeVar

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from pyspark_folio.plan import RowFilter

T = TypeVar("T")


@dataclass(frozen=True)
class Pushed:
    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    rows: RowFilter = field(default_factory=RowFilter)

    def selects(self, topic: str, partition: int) -> bool:
        return (self.topics is None or topic in self.topics) and (
            self.partitions is None or partition in self.partitions
        )


def _us(value: datetime) -> float:
    return value.timestamp() * 1_000_000


def _intersect(current: frozenset[T] | None, values: frozenset[T]) -> frozenset[T]:
    return values if current is None else current & values


def _values(f: Filter) -> list[object] | None:
    if isinstance(f, EqualTo):
        return [f.value]
    if isinstance(f, In):
        return list(f.value)
    return None


def _time_bounds(f: Filter) -> tuple[int | None, int | None] | None:
    """(min ms, max ms) inclusive that ``f`` on publish_time allows."""
    value = getattr(f, "value", None)
    if not isinstance(value, datetime):
        return None
    us = _us(value)
    if isinstance(f, GreaterThan):
        return math.floor(us / 1000) + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return math.ceil(us / 1000), None
    if isinstance(f, LessThan):
        return None, math.ceil(us / 1000) - 1
    if isinstance(f, LessThanOrEqual):
        return None, math.floor(us / 1000)
    if isinstance(f, EqualTo):
        if us % 1000:
            return 1, 0  # no millisecond equals it
        return int(us // 1000), int(us // 1000)
    return None


def push_filters(filters: list[Filter], base: Pushed | None = None) -> tuple[Pushed, list[Filter]]:
    pushed = base or Pushed()
    rejected: list[Filter] = []
    for f in filters:
        attribute: tuple[str, ...] = getattr(f, "attribute", ())
        column = attribute[0] if len(attribute) == 1 else None
        values = _values(f)
        if column == "topic" and values is not None and all(isinstance(v, str) for v in values):
            pushed = replace(pushed, topics=_intersect(pushed.topics, frozenset(map(str, values))))
        elif column == "partition" and values is not None and all(type(v) is int for v in values):
            pushed = replace(
                pushed, partitions=_intersect(pushed.partitions, frozenset(int(str(v)) for v in values))
            )
        elif column == "key" and values is not None and all(isinstance(v, str) for v in values):
            rows = pushed.rows
            pushed = replace(
                pushed, rows=replace(rows, keys=_intersect(rows.keys, frozenset(map(str, values))))
            )
        elif column == "publish_time" and (bounds := _time_bounds(f)) is not None:
            low, high = bounds
            rows = pushed.rows
            if low is not None:
                rows = replace(rows, publish_min_ms=max(low, rows.publish_min_ms or low))
            if high is not None:
                rows = replace(
                    rows,
                    publish_max_ms=min(
                        high, rows.publish_max_ms if rows.publish_max_ms is not None else high
                    ),
                )
            pushed = replace(pushed, rows=rows)
        else:
            rejected.append(f)
    return pushed, rejected
