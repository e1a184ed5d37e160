"""A gateway's storage reach and what it does with its bundles
(gateway/ownership/storage_reach.py, and the load manager's ``serving`` targets in
assign_core.py): pure rules on ``now_ms``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.names import NamespaceName
from gateway.ownership.assign_core import (
    Assign,
    BalancePolicy,
    ClearAssignment,
    ClusterView,
    decide,
    least_loaded_gateway,
    serving,
)
from gateway.ownership.bundles import NamespaceBundle, bundle_ranges
from gateway.ownership.key_records import Assignment, GatewayInfo
from gateway.ownership.storage_reach import (
    ReachDecision,
    ReachPolicy,
    ReachState,
    observe,
    storage_ok,
)
from gateway.ownership.storage_reach import decide as reach

pytestmark = pytest.mark.unit

POLICY = ReachPolicy(grace_ms=2_000, recover_ms=3_000, settle_ms=2_500)
NEED = 2  # the ack quorum


def run(answers: list[tuple[int, int]], state: ReachState | None = None) -> ReachState:
    """Feed (now_ms, nodes answering) rounds in order."""
    state = state or ReachState()
    for now, answered in answers:
        state = observe(state, answered, NEED, now, POLICY)
    return state


def test_a_reached_quorum_serves() -> None:
    state = run([(0, 3), (1_000, 2)])
    assert state == ReachState()
    assert storage_ok(state, 1_000, POLICY)
    assert reach(state, [True], 1_000, POLICY) is ReachDecision.SERVE


def test_a_short_loss_is_tolerated_a_long_one_hands_over_when_a_peer_is_healthy() -> None:
    state = run([(0, 3), (1_000, 1), (2_500, 1)])
    assert storage_ok(state, 2_500, POLICY)  # lost 1.5 s < grace
    assert reach(state, [True], 2_500, POLICY) is ReachDecision.SERVE
    assert not storage_ok(state, 3_000, POLICY)  # grace passed, even before the next round
    state = run([(3_000, 1)], state)
    assert state.unhealthy
    # unhealthy, but a peer cut at the same moment may not have said so yet: wait
    assert reach(state, [True], 3_000, POLICY) is ReachDecision.KEEP
    state = run([(5_500, 1)], state)
    assert reach(state, [True], 5_500, POLICY) is ReachDecision.HAND_OVER


def test_nobody_hands_over_when_every_gateway_is_cut_from_storage() -> None:
    state = run([(0, 0), (5_000, 0)])  # past grace and settle (4.5 s)
    assert not storage_ok(state, 5_000, POLICY)
    assert reach(state, [False, False], 5_000, POLICY) is ReachDecision.KEEP
    assert reach(state, [], 5_000, POLICY) is ReachDecision.KEEP  # the only gateway
    assert reach(state, [False, True], 5_000, POLICY) is ReachDecision.HAND_OVER


def test_it_takes_bundles_back_only_after_a_steady_reach() -> None:
    state = run([(0, 1), (3_000, 1)])
    assert state.unhealthy
    assert reach(state, [True], 4_500, POLICY) is ReachDecision.HAND_OVER
    state = run([(5_000, 3), (7_000, 3)], state)  # reached for 2 s < recover
    assert not storage_ok(state, 7_000, POLICY)  # not given bundles yet ...
    # ... and not handing over what it holds: it is about to serve again (no flapping)
    assert reach(state, [True], 7_000, POLICY) is ReachDecision.KEEP
    state = run([(8_000, 3)], state)  # 3 s in a row
    assert state == ReachState()
    assert reach(state, [True], 8_000, POLICY) is ReachDecision.SERVE


def test_a_flapping_link_restarts_the_recovery_but_not_the_loss() -> None:
    state = run([(0, 1), (3_000, 1), (4_000, 3), (6_000, 1), (8_000, 3), (10_000, 3)])
    assert state.lost_since_ms == 0  # the loss began at 0 and never ended
    assert state.reached_since_ms == 8_000  # the reach restarted after the drop at 6 s
    assert not storage_ok(state, 10_000, POLICY)
    assert storage_ok(run([(11_000, 3)], state), 11_000, POLICY)


def test_a_flap_shorter_than_the_grace_never_marks_it_unhealthy() -> None:
    state = run([(0, 1), (1_000, 3), (1_500, 1), (1_900, 3)])
    assert storage_ok(state, 1_900, POLICY)
    assert reach(state, [True], 1_900, POLICY) is ReachDecision.SERVE


# ---------------------------------------------------------------- the load manager's targets

NS = NamespaceName("public", "default")
BUNDLES = [NamespaceBundle(NS, r) for r in bundle_ranges(4)]
NOW = 10_000_000


def gw(name: str, ok: bool = True) -> GatewayInfo:
    return GatewayInfo(name, f"http://{name}", storage_ok=ok)


def test_only_gateways_that_reach_storage_are_given_bundles() -> None:
    live = {"a": gw("a", ok=False), "b": gw("b")}
    view = ClusterView(gateways=live, owners={}, known=frozenset(BUNDLES))
    effects = decide(view, BalancePolicy(), NOW)
    assert effects == [Assign(b, "b") for b in sorted(BUNDLES)]
    assert least_loaded_gateway(live, {"b": 10}, BalancePolicy()) == "b"  # however loaded


def test_when_no_gateway_reaches_storage_every_one_may_be_given_bundles() -> None:
    live = {"a": gw("a", ok=False), "b": gw("b", ok=False)}
    assert serving(live) == live
    view = ClusterView(gateways=live, owners={}, known=frozenset(BUNDLES))
    targets = {e.gateway for e in decide(view, BalancePolicy(), NOW) if isinstance(e, Assign)}
    assert targets == {"a", "b"}


def test_an_assignment_to_a_gateway_cut_from_storage_is_withdrawn() -> None:
    live = {"a": gw("a", ok=False), "b": gw("b")}
    view = ClusterView(
        gateways=live, owners={}, known=frozenset(BUNDLES[:1]), assignments={BUNDLES[0]: Assignment("a", NOW)}
    )
    assert decide(view, BalancePolicy(), NOW) == [ClearAssignment(BUNDLES[0]), Assign(BUNDLES[0], "b")]


def test_the_flag_round_trips_and_defaults_to_healthy() -> None:
    info = gw("a", ok=False)
    decoded = GatewayInfo.decode(info.encode())
    assert decoded == info
    older = GatewayInfo.decode(b'{"id": "a", "httpUrl": "http://a"}')
    assert older is not None and older.storage_ok
    assert replace(info, storage_ok=True).storage_ok
