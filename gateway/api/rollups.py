"""The dashboard's list views: rows per tenant, namespace, topic and subscription (pure).

Owns: turning topic summaries (``gateway.api.topic_summary``, gathered from every
gateway) and subscription stats into the rows the dashboard lists - rates,
backlog, size and subscription counts - and their sorting and paging
(``RowQuery``). Rules: a name the metadata knows but no gateway has loaded is a
row of its stored figures (``gateway.api.stored_figures``) marked ``loaded:
false``, ``figures: "stored"`` and ``asOfMs`` (zeros, ``figures: null``, when
nothing is stored either); a
subscription's lag is its backlog in messages and, when its oldest unacknowledged
message was read, ``lagMs`` = now - that message's publish time; the dashboard's
own readers (names starting ``DASHBOARD_READER_PREFIX``) are never rows; a view sorts
by the closed set of its enum (``TopicSort``, ``GroupSort``, ``SubscriptionSort``; the
routes declare it, and ``RowQuery.apply`` answers another field 400); ``take_within`` keeps a list of rows
within a byte budget. Nothing here does I/O; ``now_ms`` is passed in.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.meta.errors import InvalidArgument

FIGURES_LIVE = "live"  # a row's ``figures``: from the gateway that has the topic loaded
FIGURES_STORED = "stored"  # from its etcd records (gateway.api.stored_figures)
DASHBOARD_READER_PREFIX = "folio-dashboard-"  # the live tail's readerName (web_ui/static/js/tail.js)


class TopicSort(enum.StrEnum):
    """The fields a topic row sorts by (``?sort=`` of ``/admin/v2/cluster/topics/…``)."""

    NAME = "name"
    MSG_RATE_IN = "msgRateIn"
    MSG_RATE_OUT = "msgRateOut"
    MSG_THROUGHPUT_IN = "msgThroughputIn"
    MSG_THROUGHPUT_OUT = "msgThroughputOut"
    MSG_BACKLOG = "msgBacklog"
    BACKLOG_SIZE = "backlogSize"
    STORAGE_SIZE = "storageSize"
    SUBSCRIPTION_COUNT = "subscriptionCount"
    PRODUCER_COUNT = "producerCount"
    CONSUMER_COUNT = "consumerCount"


class GroupSort(enum.StrEnum):
    """The fields a tenant or namespace row sorts by: a topic row's and ``topics``."""

    NAME = "name"
    TOPICS = "topics"
    MSG_RATE_IN = "msgRateIn"
    MSG_RATE_OUT = "msgRateOut"
    MSG_THROUGHPUT_IN = "msgThroughputIn"
    MSG_THROUGHPUT_OUT = "msgThroughputOut"
    MSG_BACKLOG = "msgBacklog"
    BACKLOG_SIZE = "backlogSize"
    STORAGE_SIZE = "storageSize"
    SUBSCRIPTION_COUNT = "subscriptionCount"
    PRODUCER_COUNT = "producerCount"
    CONSUMER_COUNT = "consumerCount"


class SubscriptionSort(enum.StrEnum):
    """The fields a subscription row sorts by (``?sort=`` of ``/admin/v2/cluster/subscriptions``)."""

    NAME = "name"
    TOPIC = "topic"
    TYPE = "type"
    MSG_BACKLOG = "msgBacklog"
    LAG_MS = "lagMs"
    UNACKED_MESSAGES = "unackedMessages"
    MSG_RATE_OUT = "msgRateOut"
    CONSUMERS = "consumers"


TOPIC_FIELDS = tuple(f.value for f in TopicSort)
GROUP_FIELDS = tuple(f.value for f in GroupSort)
SUMMED = TOPIC_FIELDS[1:]  # every topic field but the name is a number summed over topics
SUBSCRIPTION_FIELDS = tuple(f.value for f in SubscriptionSort)


def is_dashboard_reader(name: str) -> bool:
    return name.startswith(DASHBOARD_READER_PREFIX)


@dataclass(frozen=True, slots=True)
class RowQuery:
    """``?sort=&order=&search=&offset=&limit=`` of a row view."""

    sort: str = "msgBacklog"
    descending: bool = True
    search: str | None = None
    offset: int = 0
    limit: int | None = None

    def apply(self, rows: list[dict[str, Any]], fields: tuple[str, ...]) -> tuple[list[dict[str, Any]], int]:
        """Rows whose name (or topic) contains ``search`` (case-insensitive), sorted by ``sort``
        (ties and missing values: by name, missing last), then the page; and how many matched."""
        if self.sort not in fields:
            raise InvalidArgument(f"sort must be one of {', '.join(fields)}, got {self.sort!r}")
        if self.offset < 0:
            raise InvalidArgument(f"offset must be >= 0, got {self.offset}")
        needle = (self.search or "").casefold()
        matched = [r for r in rows if needle in f"{r.get('topic', '')} {r.get('name', '')}".casefold()]
        matched.sort(key=lambda r: str(r.get("name", "")))
        present = [r for r in matched if r.get(self.sort) is not None]
        missing = [r for r in matched if r.get(self.sort) is None]
        present.sort(key=lambda r: _key(r[self.sort]), reverse=self.descending)
        ordered = present + missing
        end = None if self.limit is None else self.offset + self.limit
        return ordered[self.offset : end], len(ordered)


def _key(value: Any) -> Any:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else str(value)


def _zeros() -> dict[str, Any]:
    return {field: 0 for field in SUMMED}


def _numbers(summary: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in SUMMED:
        value = summary.get(field, 0)
        out[field] = value if isinstance(value, int | float) and not isinstance(value, bool) else 0
    return out


def _total(values: Iterable[Any]) -> Any:
    total = sum(values)
    return round(total, 3) if isinstance(total, float) else total


def topic_rows(
    names: Iterable[str], summaries: Mapping[str, Mapping[str, Any]], partitioned: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """One row per topic of ``names`` (full names, partitions included), with its
    summary's figures if some gateway has it loaded; and one per partitioned topic
    of ``partitioned``, the sums over its partitions among ``names`` (``partitions``:
    how many)."""
    rows = []
    for name in names:
        summary = summaries.get(name)
        local = name.rsplit("/", 1)[-1]
        numbers = _numbers(summary) if summary is not None else _zeros()
        rows.append({"name": local, "topic": name, **_freshness(summary), **numbers})
    for base in partitioned:
        parts = [r for r in rows if r["topic"].startswith(f"{base}-partition-") and "partitions" not in r]
        sums = {field: _total(p[field] for p in parts) for field in SUMMED}
        local = base.rsplit("/", 1)[-1]
        kinds = {p["figures"] for p in parts}
        times = [p["asOfMs"] for p in parts if p["asOfMs"] is not None]
        kind = FIGURES_STORED if FIGURES_STORED in kinds else (kinds.pop() if len(kinds) == 1 else None)
        fresh = {
            "loaded": any(p["loaded"] for p in parts),
            "figures": kind,
            "asOfMs": min(times) if times else None,  # the oldest part's
            "exact": all(p["exact"] for p in parts),
        }
        rows.append({"name": local, "topic": base, **fresh, "partitions": len(parts), **sums})
    return rows


def _freshness(summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """Whether a topic is loaded, where its figures come from (``live``, ``stored``, or
    None: nothing is stored either), as of when, and whether they are exact."""
    if summary is None:
        return {"loaded": False, "figures": None, "asOfMs": None, "exact": True}
    return {
        "loaded": bool(summary.get("loaded", True)),
        "figures": summary.get("figures", FIGURES_LIVE),
        "asOfMs": summary.get("asOfMs"),
        "exact": bool(summary.get("exact", True)),
    }


def group_rows(
    groups: Iterable[str],
    summaries: Iterable[Mapping[str, Any]],
    group_of: Callable[[str], str | None],
) -> list[dict[str, Any]]:
    """One row per group (a tenant or namespace): the sums of its topics' figures
    (live or stored) and ``topics``, how many topics have figures."""
    rows = {group: {"name": group, "topics": 0, **_zeros()} for group in groups}
    for summary in summaries:
        group = group_of(str(summary.get("topic", "")))
        row = rows.get(group) if group is not None else None
        if row is None:
            continue
        row["topics"] += 1
        for field, value in _numbers(summary).items():
            row[field] = round(row[field] + value, 3) if isinstance(value, float) else row[field] + value
    return list(rows.values())


LAG_RESERVE_BYTES = 40  # what with_lag may add to a row's JSON (two integers instead of nulls)


def take_within(rows: Iterable[dict[str, Any]], max_bytes: int) -> tuple[list[dict[str, Any]], bool]:
    """The first ``rows`` whose JSON (each plus ``LAG_RESERVE_BYTES``) fits in
    ``max_bytes``; and whether some were left out. Rows after the first that does
    not fit are never built (``rows`` may be a generator)."""
    kept: list[dict[str, Any]] = []
    used = 0
    for row in rows:
        size = len(orjson.dumps(row)) + LAG_RESERVE_BYTES
        if used + size > max_bytes:
            return kept, True
        used += size
        kept.append(row)
    return kept, False


def subscription_row(
    topic: str, name: str, stats: Mapping[str, Any], oldest_publish_ms: int | None, now_ms: int
) -> dict[str, Any]:
    """A subscription of ``topic`` as the cross-topic view lists it. ``oldest_publish_ms``:
    publish time of the first message after its mark-delete position (None: no backlog,
    or not read)."""
    consumers = stats.get("consumers") or []
    row = {
        "name": name,
        "topic": topic,
        "type": stats.get("type"),
        "durable": bool(stats.get("isDurable", True)),
        "msgBacklog": int(stats.get("msgBacklog", 0) or 0),
        "backlogSize": int(stats.get("backlogSize", 0) or 0),
        "unackedMessages": int(stats.get("unackedMessages", 0) or 0),
        "msgRateOut": float(stats.get("msgRateOut", 0.0) or 0.0),
        "consumers": len(consumers),
        "activeConsumerName": stats.get("activeConsumerName"),
    }
    return with_lag(row, oldest_publish_ms, now_ms)


def with_lag(row: dict[str, Any], oldest_publish_ms: int | None, now_ms: int) -> dict[str, Any]:
    """``row`` with its time lag: ``lagMs`` = now - ``oldest_publish_ms`` (0 without a
    backlog, None when the oldest unacknowledged message was not read)."""
    backlog = row["msgBacklog"]
    lag = None if oldest_publish_ms is None or backlog == 0 else max(0, now_ms - oldest_publish_ms)
    return {
        **row,
        "oldestUnackedPublishTime": oldest_publish_ms if lag is not None else None,
        "lagMs": 0 if backlog == 0 else lag,
    }
