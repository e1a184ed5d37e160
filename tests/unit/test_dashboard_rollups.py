"""The dashboard's list rows and throughput history (pure): ``gateway.api.rollups``
and ``gateway.api.throughput``.

Shows: the throughput ring holds at most its byte budget (the oldest sample is
overwritten, ``nbytes`` never grows), refuses a sample older than the newest one and
answers samples since a time; several gateways' samples add up per bucket (a gateway
sampled twice in a bucket counts once, malformed samples are left out, the bucket still
open is left out); rows sort by backlog (largest first) with unknown values last, page
and search, and refuse an unknown sort field (400); topics nobody loaded are rows of
zeros; group rows add up their topics; a subscription's lag is now minus the oldest
unacknowledged message's publish time, 0 without backlog, unknown when not read; the
dashboard's readers are recognised by name; a gateway's rows stop at their byte budget;
the OpenAPI document declares each view's sort fields (an enum) and search bound.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.api import rollups
from gateway.api.paging import SEARCH_MAX
from gateway.api.rollups import RowQuery
from gateway.api.throughput import RECORD, ThroughputRing, merge
from gateway.meta.errors import InvalidArgument

OPENAPI = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"


def test_ring_is_bounded_in_bytes_and_keeps_the_newest() -> None:
    ring = ThroughputRing(max_bytes=RECORD.size * 3 + 5)  # room for 3 samples, not 4
    assert ring.capacity == 3
    size = ring.nbytes
    for i in range(5):
        assert ring.offer(1000 * i, float(i), float(2 * i))
    assert len(ring) == 3
    assert ring.nbytes == size <= RECORD.size * 3 + 5
    assert [s["t"] for s in ring.samples()] == [2000, 3000, 4000]
    assert ring.samples()[-1] == {"t": 4000, "msgRateIn": 4.0, "msgRateOut": 8.0}
    assert [s["t"] for s in ring.samples(since_ms=3000)] == [3000, 4000]
    assert not ring.offer(3500, 1.0, 1.0)  # older than the newest: refused
    assert len(ring) == 3


def test_ring_needs_room_for_one_sample() -> None:
    with pytest.raises(ValueError):
        ThroughputRing(max_bytes=RECORD.size - 1)


def test_merge_adds_gateways_per_bucket() -> None:
    a = [
        {"t": 10_000, "msgRateIn": 1.0, "msgRateOut": 2.0},
        {"t": 12_000, "msgRateIn": 3.0, "msgRateOut": 4.0},
    ]
    b = [
        {"t": 11_000, "msgRateIn": 10.0, "msgRateOut": 0.0},
        {"t": 16_000, "msgRateIn": 5.0, "msgRateOut": 5.0},
    ]
    bad = [{"t": "x"}, {"msgRateIn": 1}]
    late = [{"t": 20_500, "msgRateIn": 9.0, "msgRateOut": 9.0}]  # its bucket has not ended at 24,999
    out = merge({"a": a, "b": b, "c": bad, "d": late}, now_ms=24_999, bucket_ms=5_000)
    assert out == [
        {"t": 10_000, "msgRateIn": 12.0, "msgRateOut": 3.0, "gateways": 2},  # a's two samples averaged
        {"t": 15_000, "msgRateIn": 5.0, "msgRateOut": 5.0, "gateways": 1},
    ]


def test_rows_sort_by_backlog_first_with_unknowns_last_and_page() -> None:
    rows = [
        {"name": "b", "msgBacklog": 5},
        {"name": "a", "msgBacklog": 5},
        {"name": "c", "msgBacklog": 40},
        {"name": "d", "msgBacklog": None},
        {"name": "e", "msgBacklog": 0},
    ]
    page, total = RowQuery().apply(rows, ("name", "msgBacklog"))
    assert [r["name"] for r in page] == ["c", "a", "b", "e", "d"]
    assert total == 5
    page, _ = RowQuery(descending=False).apply(rows, ("name", "msgBacklog"))
    assert [r["name"] for r in page] == ["e", "a", "b", "c", "d"]
    page, total = RowQuery(sort="name", descending=False, offset=1, limit=2).apply(
        rows, ("name", "msgBacklog")
    )
    assert [r["name"] for r in page] == ["b", "c"]
    page, total = RowQuery(search="C").apply(rows, ("name", "msgBacklog"))
    assert ([r["name"] for r in page], total) == (["c"], 1)
    with pytest.raises(InvalidArgument):
        RowQuery(sort="password").apply(rows, ("name", "msgBacklog"))


def test_topic_rows_and_group_rows() -> None:
    summaries = {
        "persistent://t/ns/a": {
            "topic": "persistent://t/ns/a",
            "msgBacklog": 7,
            "msgRateIn": 1.5,
            "storageSize": 100,
        },
        "persistent://t/ns2/b": {"topic": "persistent://t/ns2/b", "msgBacklog": 3, "msgRateIn": 0.25},
    }
    rows = rollups.topic_rows(["persistent://t/ns/a", "persistent://t/ns/idle"], summaries)
    assert rows[0]["name"] == "a" and rows[0]["loaded"] and rows[0]["msgBacklog"] == 7
    assert rows[1] == {
        "name": "idle",
        "topic": "persistent://t/ns/idle",
        "loaded": False,
        "figures": None,  # nothing stored either
        "asOfMs": None,
        "exact": True,
        **rollups._zeros(),
    }
    parts = {
        f"persistent://t/ns/p-partition-{i}": {"msgBacklog": i + 1, "subscriptionCount": 1} for i in range(2)
    }
    rows = rollups.topic_rows([*parts, "persistent://t/ns/a"], parts, ["persistent://t/ns/p"])
    whole = rows[-1]
    assert (whole["name"], whole["partitions"], whole["loaded"]) == ("p", 2, True)
    assert (whole["msgBacklog"], whole["subscriptionCount"]) == (3, 2)  # the sums over its partitions
    groups = rollups.group_rows(["ns", "ns2", "empty"], summaries.values(), lambda t: t.split("/")[3])
    by_name = {g["name"]: g for g in groups}
    assert by_name["ns"]["msgBacklog"] == 7 and by_name["ns"]["topics"] == 1
    assert by_name["ns2"]["msgRateIn"] == 0.25
    assert by_name["empty"]["topics"] == 0 and by_name["empty"]["msgBacklog"] == 0


def test_subscription_lag() -> None:
    stats = {"type": "Failover", "msgBacklog": 4, "consumers": [{}, {}], "activeConsumerName": "c1"}
    row = rollups.subscription_row("persistent://t/ns/a", "s", stats, 1_000, now_ms=61_000)
    assert (row["lagMs"], row["oldestUnackedPublishTime"], row["consumers"]) == (60_000, 1_000, 2)
    assert row["activeConsumerName"] == "c1"
    assert rollups.subscription_row("x", "s", {"msgBacklog": 0}, None, 5)["lagMs"] == 0
    assert rollups.subscription_row("x", "s", {"msgBacklog": 2}, None, 5)["lagMs"] is None


def test_rows_are_kept_within_a_byte_budget() -> None:
    def rows() -> Iterator[dict[str, Any]]:
        for i in range(1000):
            built.append(i)
            yield {"name": f"s{i:03d}", "msgBacklog": i}

    built: list[int] = []
    one = len(orjson.dumps({"name": "s000", "msgBacklog": 100})) + rollups.LAG_RESERVE_BYTES
    kept, truncated = rollups.take_within(rows(), one * 10)
    assert truncated and 8 <= len(kept) <= 10  # short numbers make the first rows a little smaller
    assert len(built) == len(kept) + 1  # nothing built after the first row that did not fit
    assert rollups.take_within(iter(kept), one * 10) == (kept, False)


def test_dashboard_readers_are_known_by_name() -> None:
    assert rollups.is_dashboard_reader("folio-dashboard-tail-0a1b2c3d")
    assert not rollups.is_dashboard_reader("reader-0a1b2c3d")


CLUSTER_VIEWS = {
    "/admin/v2/cluster/tenants": rollups.GroupSort,
    "/admin/v2/cluster/namespaces/{tenant}": rollups.GroupSort,
    "/admin/v2/cluster/topics/{tenant}/{namespace}": rollups.TopicSort,
    "/admin/v2/cluster/subscriptions": rollups.SubscriptionSort,
}


def test_the_openapi_document_declares_each_views_sort_fields_and_search_bound() -> None:
    """What the document allows the route answers (schemathesis sends it): ``sort`` is the
    view's enum - exactly the fields its rows sort by - and ``search`` at most SEARCH_MAX."""
    spec = orjson.loads(OPENAPI.read_bytes())
    for path, sort_enum in CLUSTER_VIEWS.items():
        params = {p["name"]: p["schema"] for p in spec["paths"][path]["get"]["parameters"]}
        ref = params["sort"]["$ref"].rsplit("/", 1)[-1]
        assert spec["components"]["schemas"][ref]["enum"] == [f.value for f in sort_enum], path
        search = [s for s in params["search"]["anyOf"] if s.get("type") == "string"]
        assert search == [{"type": "string", "maxLength": SEARCH_MAX}], path
