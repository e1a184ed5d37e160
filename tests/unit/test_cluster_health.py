"""The pure rules of the admin cluster views (gateway/api/cluster_health.py)."""

from __future__ import annotations

import pytest

from gateway.api.cluster_health import (
    CRITICAL,
    GONE,
    READ_ONLY,
    WARNING,
    WRITABLE,
    BacklogHistory,
    GatewaySightings,
    NodeView,
    Problem,
    TopicFact,
    build_problems,
    sort_problems,
    storage_nodes,
)
from storage.types import NodeInfo

pytestmark = pytest.mark.unit


def info(node_id: str, *, read_only: bool = False, ledgers: int = 2) -> NodeInfo:
    return NodeInfo(node_id, node_id, f"m-{node_id}", 100, 1000, 1.5, read_only, ledgers)


def node(node_id: str, state: str, ledgers: int = 0) -> NodeView:
    return NodeView(node_id, node_id, "", state, 10, 100, ledgers, 0.0)


def problems(**overrides: object) -> list[Problem]:
    facts: dict[str, object] = {
        "nodes": [node("a", WRITABLE), node("b", WRITABLE), node("c", WRITABLE)],
        "write_quorum": 3,
        "under_replicated": {},
        "missing_gateways": [],
        "unreachable_gateways": {},
        "topics": [],
        "growing": [],
    }
    facts.update(overrides)
    return build_problems(**facts)  # type: ignore[arg-type]


# ---------------------------------------------------------------- storage node states


def test_live_nodes_are_writable_or_read_only_and_known_ones_without_registration_are_gone() -> None:
    views = storage_nodes(
        [info("n1"), info("n2", read_only=True)],
        known={"n1": {}, "n2": {}, "n3": {"address": "n3", "metricsAddress": "m3"}},
        referenced={"n1": 4, "n4": 7},
    )
    by_id = {v.node_id: v for v in views}
    assert [v.node_id for v in views] == ["n1", "n2", "n3", "n4"]
    assert (by_id["n1"].state, by_id["n1"].ledger_count, by_id["n1"].free_bytes) == (WRITABLE, 2, 100)
    assert by_id["n2"].state == READ_ONLY
    assert (by_id["n3"].state, by_id["n3"].metrics_address, by_id["n3"].ledger_count) == (GONE, "m3", 0)
    # only named by ensembles (it registered before known-node records existed): gone, with its ledger count
    assert (by_id["n4"].state, by_id["n4"].ledger_count, by_id["n4"].free_bytes) == (GONE, 7, 0)
    assert by_id["n4"].to_json()["state"] == "gone"


def test_a_healthy_cluster_has_no_problems() -> None:
    assert problems() == []


# ---------------------------------------------------------------- problems and their order


def test_gone_node_is_critical_and_heads_the_list() -> None:
    got = problems(
        nodes=[node("a", WRITABLE), node("b", READ_ONLY), node("c", GONE, ledgers=5), node("d", WRITABLE)],
        write_quorum=2,
        missing_gateways=["gw2"],
    )
    assert [(p.severity, p.kind, p.target) for p in got] == [
        (CRITICAL, "storage-node-gone", "c"),
        (WARNING, "storage-node-read-only", "b"),
        (WARNING, "gateway-missing", "gw2"),
    ]
    assert "5 ledgers still name it" in got[0].message


def test_fewer_writable_nodes_than_the_write_quorum_is_critical() -> None:
    got = problems(nodes=[node("a", WRITABLE), node("b", WRITABLE), node("c", READ_ONLY)])
    assert [(p.severity, p.kind) for p in got] == [
        (CRITICAL, "not-enough-writable-nodes"),
        (WARNING, "storage-node-read-only"),
    ]
    assert "2 writable" in got[0].message and "write quorum 3" in got[0].message
    # CONTROL: with Qw = 2 the same nodes suffice
    assert [p.kind for p in problems(nodes=[node("a", WRITABLE), node("b", WRITABLE)], write_quorum=2)] == []


def test_under_replicated_ledgers_are_grouped_per_missing_node() -> None:
    got = problems(under_replicated={1: ["x"], 2: ["x", "y"], 3: ["y"], 4: []})
    by_target = {p.target: p for p in got if p.kind == "under-replicated-ledgers"}
    assert set(by_target) == {"x", "y", "?"}
    assert by_target["x"].message.startswith("2 ledgers") and by_target["y"].message.startswith("2 ledgers")
    assert all(p.severity == WARNING for p in got)


def test_every_kind_in_order_critical_first() -> None:
    got = problems(
        nodes=[node("a", GONE), node("b", READ_ONLY)],
        under_replicated={9: ["a"]},
        missing_gateways=["gw-old"],
        unreachable_gateways={"gw-slow": "ReadTimeout"},
        topics=[TopicFact("t-quota", 10, True), TopicFact("t-grow", 50, False), TopicFact("t-ok", 0, False)],
        growing=["t-grow"],
        etcd_healthy=False,
    )
    assert [p.kind for p in got] == [
        "etcd-unhealthy",
        "storage-node-gone",
        "not-enough-writable-nodes",
        "backlog-quota-exceeded",
        "storage-node-read-only",
        "under-replicated-ledgers",
        "gateway-missing",
        "gateway-unreachable",
        "backlog-growing",
    ]
    severities = [p.severity for p in got]
    assert severities == sorted(severities, key=lambda s: s != CRITICAL)
    assert [p.target for p in got if p.kind.startswith("backlog")] == ["t-quota", "t-grow"]
    assert "ReadTimeout" in next(p.message for p in got if p.kind == "gateway-unreachable")


def test_sort_is_stable_by_target_within_a_kind() -> None:
    unordered = [
        Problem(WARNING, "backlog-growing", "m", "t2"),
        Problem(CRITICAL, "storage-node-gone", "m", "n2"),
        Problem(WARNING, "backlog-growing", "m", "t1"),
        Problem(CRITICAL, "storage-node-gone", "m", "n1"),
    ]
    assert [p.target for p in sort_problems(unordered)] == ["n1", "n2", "t1", "t2"]


# ---------------------------------------------------------------- backlog history


def test_backlog_growing_needs_rising_samples_over_a_span() -> None:
    history = BacklogHistory(sample_interval_ms=500)
    history.record({"t": 1, "flat": 5}, 0)
    history.record({"t": 2, "flat": 5}, 1_000)
    assert history.growing(samples_needed=3, span_ms=2_000) == []  # two samples only
    history.record({"t": 3, "flat": 5}, 2_000)
    assert history.growing(samples_needed=3, span_ms=2_000) == ["t"]
    assert history.growing(samples_needed=3, span_ms=2_001) == []  # span too short
    history.record({"t": 3, "flat": 5}, 3_000)  # stopped growing
    assert history.growing(samples_needed=3, span_ms=2_000) == []
    for i, at in enumerate(range(3_600, 5_000, 600)):  # rising again from the sample at 3_000: 1.8 s
        history.record({"t": 4 + i, "flat": 5}, at)
    assert history.growing(samples_needed=3, span_ms=2_000) == []
    history.record({"t": 9, "flat": 5}, 5_400)  # the run now spans 2.4 s
    assert history.growing(samples_needed=3, span_ms=2_000) == ["t"]


def test_backlog_samples_closer_than_the_interval_are_skipped_and_rings_are_bounded() -> None:
    history = BacklogHistory(ring_size=4, topics_max=2, sample_interval_ms=500)
    history.record({"t": 1}, 0)
    history.record({"t": 2}, 100)  # too soon: ignored
    assert history.samples("t") == [(0, 1)]
    for i in range(1, 10):
        history.record({"t": i + 1}, i * 1_000)
    assert len(history.samples("t")) == 4 and history.samples("t")[-1] == (9_000, 10)
    history.record({"t": 11, "u": 1, "v": 1}, 10_000)  # at most 2 topics
    assert history.samples("u") == [(10_000, 1)] and history.samples("v") == []
    history.record({"u": 2}, 11_000)  # t no longer reported: forgotten
    assert history.samples("t") == []


# ---------------------------------------------------------------- gateways


def test_gateway_missing_after_being_seen_until_the_window_passes() -> None:
    sightings = GatewaySightings(window_ms=10_000)
    sightings.observe(["g1", "g2"], 0)
    assert sightings.missing() == []
    sightings.observe(["g1"], 1_000)
    assert sightings.missing() == ["g2"]
    sightings.observe(["g1", "g2"], 2_000)  # came back
    assert sightings.missing() == []
    sightings.observe(["g1"], 3_000)
    sightings.observe(["g1"], 12_001)  # last seen at 2_000: forgotten
    assert sightings.missing() == []
