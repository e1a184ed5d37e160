"""The load manager's decisions (gateway/ownership/assign_core.py): pure, deterministic."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.names import NamespaceName
from gateway.ownership.assign_core import (
    Assign,
    BalancePolicy,
    ClearAssignment,
    ClusterView,
    Effect,
    LookupPicks,
    Unload,
    decide,
    least_loaded_gateway,
    score,
    shed_due,
)
from gateway.ownership.bundles import NamespaceBundle, bundle_ranges
from gateway.ownership.key_records import Assignment, GatewayInfo, LoadReport

pytestmark = pytest.mark.unit

K = TypeVar("K")
V = TypeVar("V")

NOW = 10_000_000
NS = NamespaceName("public", "default")
BUNDLES = [NamespaceBundle(NS, r) for r in bundle_ranges(32)]
POLICY = BalancePolicy(max_moves_per_round=100)


def gw(name: str, *, started_ms: int = 0, load: LoadReport | None = None) -> GatewayInfo:
    return GatewayInfo(name, f"http://{name}", load or LoadReport(), started_ms)


def gateways(*items: GatewayInfo) -> dict[str, GatewayInfo]:
    return {g.gateway_id: g for g in items}


def owned(**counts: int) -> dict[NamespaceBundle, str]:
    """``owned(a=3, b=1)``: the first 3 bundles to a, the next to b."""
    out: dict[NamespaceBundle, str] = {}
    it = iter(BUNDLES)
    for name, n in counts.items():
        for _ in range(n):
            out[next(it)] = name
    return out


def rated(rates: dict[NamespaceBundle, float]) -> LoadReport:
    """A report with per-bundle rates (``msg_rate_in`` = their sum, as if all were published)."""
    return LoadReport(
        msg_rate_in=sum(rates.values()), bundle_rates=tuple((b.path, r) for b, r in rates.items())
    )


def unloads(effects: list[Effect]) -> list[Unload]:
    return [e for e in effects if isinstance(e, Unload)]


def apply(
    owners: dict[NamespaceBundle, str], effects: list[Effect], moved: dict[NamespaceBundle, int], now: int
) -> None:
    """What the shell's protocol ends up doing: assignments get acquired, moves complete."""
    for e in effects:
        if isinstance(e, Assign):
            owners[e.bundle] = e.gateway
        elif isinstance(e, Unload):
            owners[e.bundle] = e.to_gateway
            moved[e.bundle] = now


def test_unowned_bundles_go_to_the_least_loaded_evenly_ties_by_name() -> None:
    view = ClusterView(gateways(gw("b"), gw("a")), owners={}, known=set(BUNDLES[:4]))
    assert decide(view, POLICY, NOW) == [
        Assign(BUNDLES[0], "a"),
        Assign(BUNDLES[1], "b"),
        Assign(BUNDLES[2], "a"),
        Assign(BUNDLES[3], "b"),
    ]


def test_reported_load_steers_assignments() -> None:
    busy = LoadReport(topics=40, sessions=100, msg_rate_in=2000.0, cpu=0.5)  # score 2 + 2 + 2 + 5 = 11
    view = ClusterView(gateways(gw("a", load=busy), gw("b")), owners={}, known=set(BUNDLES[:12]))
    targets = Counter(e.gateway for e in decide(view, POLICY, NOW) if isinstance(e, Assign))
    assert targets == {"b": 11, "a": 1}  # b takes 11 bundles before it is as loaded as a


def test_bundles_of_a_dead_gateway_are_reassigned() -> None:
    owners = owned(dead=2, a=1)
    view = ClusterView(gateways(gw("a"), gw("b")), owners=owners)
    assert decide(view, POLICY, NOW) == [Assign(BUNDLES[0], "b"), Assign(BUNDLES[1], "a")]


def test_no_live_gateway_means_no_assignment_only_cleanup() -> None:
    view = ClusterView(
        {}, owners=owned(dead=1), known={BUNDLES[5]}, assignments={BUNDLES[5]: Assignment("dead", NOW)}
    )
    assert decide(view, POLICY, NOW) == [ClearAssignment(BUNDLES[5])]


def test_pending_assignments_count_and_are_not_repeated() -> None:
    view = ClusterView(
        gateways(gw("a"), gw("b")),
        owners={},
        known=set(BUNDLES[:3]),
        assignments={BUNDLES[0]: Assignment("a", NOW - 1000), BUNDLES[1]: Assignment("a", NOW - 1000)},
    )
    assert decide(view, POLICY, NOW) == [Assign(BUNDLES[2], "b")]


def test_stale_assignments_are_cleared_and_timed_out_ones_redecided() -> None:
    policy = BalancePolicy(assign_timeout_ms=5_000)
    view = ClusterView(
        gateways(gw("a"), gw("b")),
        owners={BUNDLES[1]: "a", BUNDLES[2]: "b"},
        assignments={
            BUNDLES[0]: Assignment("gone", NOW),  # target dead
            BUNDLES[1]: Assignment("a", NOW),  # done: a owns it
            BUNDLES[2]: Assignment("a", NOW),  # b owns it and no move is in progress
            BUNDLES[3]: Assignment("b", NOW - 6_000),  # never taken up
        },
    )
    effects = decide(view, policy, NOW)
    clears = [e for e in effects if isinstance(e, ClearAssignment)]
    assert clears == [ClearAssignment(BUNDLES[0]), ClearAssignment(BUNDLES[1]), ClearAssignment(BUNDLES[2])]
    assert [e for e in effects if isinstance(e, Assign)] == [Assign(BUNDLES[0], "a"), Assign(BUNDLES[3], "b")]


def test_assignment_of_a_bundle_being_moved_is_kept() -> None:
    view = ClusterView(
        gateways(gw("a"), gw("b")),
        owners={BUNDLES[0]: "a"},
        assignments={BUNDLES[0]: Assignment("b", NOW)},
        unloading={BUNDLES[0]},
    )
    assert decide(view, POLICY, NOW) == []


def test_overloaded_gateway_sheds_to_the_least_loaded() -> None:
    hot = LoadReport(cpu=0.8)  # +8
    view = ClusterView(gateways(gw("a", load=hot), gw("b"), gw("c")), owners=owned(a=4, b=1, c=2))
    # scores a=12, b=1, c=2; mean 5 -> a is overloaded; each of a's bundles "weighs" 3
    effects = decide(view, POLICY, NOW)
    assert effects[0] == Unload(BUNDLES[0], "a", "b")
    assert all(e.from_gateway == "a" for e in unloads(effects))
    # moves stop once no move improves balance: a 12 -> 9 -> 6 (b 4, c 5): next target c 5 + 3 = 8 > 6
    assert [e.to_gateway for e in unloads(effects)] == ["b", "c"]


def test_shedding_is_weighed_only_in_rounds_where_it_is_due() -> None:
    # assignment runs every round; shedding every shed_interval_ms (Pulsar: 1 min), so a
    # short burst does not move bundles (each move closes their sessions)
    hot = LoadReport(cpu=0.8)
    due = ClusterView(gateways(gw("a", load=hot), gw("b"), gw("c")), owners=owned(a=4, b=1, c=2))
    assert unloads(decide(due, POLICY, NOW))
    not_due = replace(due, shed_due=False)
    assert decide(not_due, POLICY, NOW) == []
    assert BalancePolicy().shed_interval_ms == 60_000 and BalancePolicy().move_cooldown_ms == 30 * 60_000


def test_shed_clock_is_due_first_then_once_per_interval() -> None:
    policy = BalancePolicy(shed_interval_ms=60_000)
    assert shed_due(None, policy, NOW)  # the first round a load manager leads
    assert not shed_due(NOW, policy, NOW + 59_999)
    assert shed_due(NOW, policy, NOW + 60_000)


def test_hysteresis_nothing_moves_below_the_overload_factor() -> None:
    view = ClusterView(gateways(gw("a"), gw("b")), owners=owned(a=7, b=4))  # a = 1.27 x mean
    assert decide(view, POLICY, NOW) == []
    idle = ClusterView(gateways(gw("a"), gw("b")), owners=owned(a=3, b=0))  # 2 x mean, but score < 4
    assert decide(idle, POLICY, NOW) == []


def test_a_single_hot_bundle_is_not_moved_around() -> None:
    hot = LoadReport(cpu=1.0)
    view = ClusterView(gateways(gw("a", load=hot), gw("b"), gw("c")), owners=owned(a=1))
    assert decide(view, POLICY, NOW) == []  # moving it would only make b the hot one


def test_a_gateway_whose_load_is_one_hot_bundle_is_not_shed_from() -> None:
    # one topic at 28,000 msg/s in + 28,000 out on a's second bundle; a and b own 4 bundles each
    a = rated({BUNDLES[0]: 5.0, BUNDLES[1]: 56_000.0, BUNDLES[2]: 5.0, BUNDLES[3]: 5.0})
    b = rated({bundle: 10.0 for bundle in BUNDLES[4:8]})
    view = ClusterView(gateways(gw("a", load=a), gw("b", load=b)), owners=owned(a=4, b=4))
    # scores a 60, b 4: the hot bundle would make b the hot one (61), a cold one gains 1 of 60
    assert decide(view, POLICY, NOW) == []
    idle = ClusterView(gateways(gw("a", load=a), gw("b", load=b), gw("c")), owners=owned(a=4, b=4))
    assert decide(idle, POLICY, NOW) == []  # c would take 57 of a's 60: a gain of 3


def test_of_two_hot_bundles_one_moves_to_the_idle_gateway_and_balance_improves() -> None:
    a_rates = {BUNDLES[0]: 0.0, BUNDLES[1]: 5000.0, BUNDLES[2]: 0.0, BUNDLES[3]: 5000.0}
    live = gateways(gw("a", load=rated(a_rates)), gw("b", load=rated({BUNDLES[4]: 0.0})))
    owners = owned(a=4, b=1)
    effects = decide(ClusterView(live, owners=owners), POLICY, NOW)
    assert effects == [Unload(BUNDLES[1], "a", "b")]  # a hot one (the first of the two), not a cold one
    before = max(score(live["a"].load, 4, POLICY), score(live["b"].load, 1, POLICY))
    moved: dict[NamespaceBundle, int] = {}
    apply(owners, effects, moved, NOW)
    del a_rates[BUNDLES[1]]
    after_reports = gateways(
        gw("a", load=rated(a_rates)), gw("b", load=rated({BUNDLES[4]: 0.0, BUNDLES[1]: 5000.0}))
    )
    after = max(score(after_reports["a"].load, 3, POLICY), score(after_reports["b"].load, 2, POLICY))
    assert (before, after) == (pytest.approx(14.0), pytest.approx(8.0))
    later = NOW + POLICY.move_cooldown_ms
    assert decide(ClusterView(after_reports, owners=owners, last_moved_ms=moved), POLICY, later) == []


def test_a_gateway_without_bundle_rates_sheds_average_shares_in_a_mixed_cluster() -> None:
    old = LoadReport(msg_rate_in=8000.0)  # a predates bundleRates: score 4 + 8, each bundle weighs 3
    draining = LoadReport(bundle_rates=((BUNDLES[4].path, 3000.0),))  # delivering only: score 1 + 3
    idle = LoadReport(bundle_rates=((BUNDLES[5].path, 0.0), (BUNDLES[6].path, 0.0)))  # score 2
    view = ClusterView(
        gateways(gw("a", load=old), gw("b", load=draining), gw("c", load=idle)), owners=owned(a=4, b=1, c=2)
    )
    # a 12 -> 9, c 2 -> 5; then a (9) is not above 1.5 x the mean (6)
    assert decide(view, POLICY, NOW) == [Unload(BUNDLES[0], "a", "c")]


def test_a_move_that_barely_helps_is_not_made() -> None:
    view = ClusterView(
        gateways(
            gw("a", load=LoadReport(cpu=0.8)),
            gw("b", load=LoadReport(cpu=0.32)),
            gw("c", load=LoadReport(cpu=0.35)),
        ),
        owners=owned(a=2, b=1, c=1),
    )
    # a 10 (above 1.5 x the mean 6.23), b 4.2, c 4.5: moving a share of 5 to b gives 5 / 9.2, a gain of 8%
    assert decide(view, POLICY, NOW) == []


def test_many_evenly_loaded_bundles_are_still_shed_one_by_one() -> None:
    # each of a's 16 bundles weighs 2 (a gain of 6% of a's 32 per move, but one whole mean bundle load)
    a = rated(dict.fromkeys(BUNDLES[:16], 1000.0))
    b = rated({BUNDLES[16]: 0.0, BUNDLES[17]: 0.0})
    view = ClusterView(gateways(gw("a", load=a), gw("b", load=b)), owners=owned(a=16, b=2))
    # a 32 -> 30 -> 28 -> 26 -> 24, b 2 -> 10; 24 is not above 1.5 x the mean 17
    assert unloads(decide(view, POLICY, NOW)) == [Unload(bundle, "a", "b") for bundle in BUNDLES[:4]]


def test_moves_per_round_are_capped() -> None:
    policy = BalancePolicy(max_moves_per_round=1)
    view = ClusterView(
        gateways(gw("a", load=LoadReport(cpu=0.8)), gw("b"), gw("c")), owners=owned(a=4, b=1, c=2)
    )
    assert len(unloads(decide(view, policy, NOW))) == 1


def test_recently_moved_unloading_and_pending_bundles_stay() -> None:
    policy = BalancePolicy(max_moves_per_round=1, move_cooldown_ms=60_000)
    owners = owned(a=4, b=1, c=2)
    view = ClusterView(
        gateways(gw("a", load=LoadReport(cpu=0.8)), gw("b"), gw("c")),
        owners=owners,
        unloading={BUNDLES[0]},
        last_moved_ms={BUNDLES[1]: NOW - 59_999, BUNDLES[2]: NOW - 60_000},
    )
    assert unloads(decide(view, policy, NOW)) == [Unload(BUNDLES[2], "a", "b")]


def test_new_gateway_gets_bundles_until_counts_are_within_one() -> None:
    view = ClusterView(
        gateways(gw("a"), gw("b"), gw("c", started_ms=NOW - 1000)),
        owners=owned(a=6, b=6),
    )
    effects = decide(view, POLICY, NOW)
    assert all(isinstance(e, Unload) and e.to_gateway == "c" for e in effects)
    counts = Counter(owned(a=6, b=6).values())
    for e in unloads(effects):
        counts[e.from_gateway] -= 1
        counts[e.to_gateway] += 1
    assert counts == {"a": 4, "b": 4, "c": 4}


def test_counts_are_not_balanced_toward_a_busy_new_gateway() -> None:
    """Seen in a benchmark: a shed left two young gateways at 3 and 1 bundles, and the
    next round's count spreading moved a bundle back onto the busy one - two unloads
    (sessions closed) for nothing. A count move must leave the receiver no busier
    than the donor."""
    owners = owned(a=3, b=1)
    hot = rated({BUNDLES[3]: 10_000.0})  # b: 1 bundle + 10 for its rate = 11; a: 3 idle = 3
    joined = NOW - 1000  # b joined a running cluster: a "new" gateway
    busy_b = gateways(gw("a"), gw("b", started_ms=joined, load=hot))
    assert unloads(decide(ClusterView(busy_b, owners=owners), POLICY, NOW)) == []
    idle = ClusterView(gateways(gw("a"), gw("b", started_ms=joined)), owners=owners)
    assert [(e.from_gateway, e.to_gateway) for e in unloads(decide(idle, POLICY, NOW))] == [("a", "b")]


def test_gateways_started_together_are_not_count_balanced_by_moves() -> None:
    """At cluster start every gateway is young; none joined a running cluster, so the
    bundles assignment placed are left where they are (moves close sessions)."""
    together = NOW - 1000
    view = ClusterView(
        gateways(gw("a", started_ms=together), gw("b", started_ms=together + 5_000)), owners=owned(a=3, b=1)
    )
    assert unloads(decide(view, POLICY, NOW)) == []
    late = ClusterView(gateways(gw("a"), gw("b", started_ms=together)), owners=owned(a=3, b=1))
    assert len(unloads(decide(late, POLICY, NOW))) == 1  # b joined later: it gets one


def test_spreading_to_a_new_gateway_takes_the_coldest_bundles() -> None:
    a = rated(dict(zip(BUNDLES[:6], [900.0, 800.0, 10.0, 0.0, 20.0, 700.0], strict=True)))
    b = rated(dict(zip(BUNDLES[6:12], [500.0, 5.0, 600.0, 1.0, 700.0, 3.0], strict=True)))
    view = ClusterView(
        gateways(gw("a", load=a), gw("b", load=b), gw("c", started_ms=NOW - 1000)), owners=owned(a=6, b=6)
    )
    assert decide(view, POLICY, NOW) == [
        Unload(BUNDLES[3], "a", "c"),
        Unload(BUNDLES[9], "b", "c"),
        Unload(BUNDLES[2], "a", "c"),
        Unload(BUNDLES[11], "b", "c"),
    ]


def test_spreading_converges_over_rounds_with_a_small_budget() -> None:
    policy = BalancePolicy(max_moves_per_round=2, move_cooldown_ms=0)
    owners = owned(a=9, b=8)
    moved: dict[NamespaceBundle, int] = {}
    live = gateways(gw("a"), gw("b"), gw("c", started_ms=NOW), gw("d", started_ms=NOW))
    for round_no in range(10):
        now = NOW + round_no * 5000
        effects = decide(ClusterView(live, owners=dict(owners), last_moved_ms=moved), policy, now)
        assert len(effects) <= 2
        apply(owners, effects, moved, now)
    counts = Counter(owners.values())
    assert max(counts.values()) - min(counts.values()) <= 1 and sum(counts.values()) == 17


def test_old_gateways_do_not_count_balance_only_load() -> None:
    # c is not new (joined long ago) and idle: counts 5/5/0 are left alone (score 5 < 1.5 x mean)
    view = ClusterView(gateways(gw("a"), gw("b"), gw("c")), owners=owned(a=5, b=5))
    assert decide(view, POLICY, NOW) == []


def test_least_loaded_gateway_matches_decide() -> None:
    live = gateways(gw("b"), gw("a", load=LoadReport(topics=30)), gw("c"))
    counts = {"b": 2, "c": 1}
    assert least_loaded_gateway(live, counts, POLICY) == "c"
    assert score(live["a"].load, 0, POLICY) == pytest.approx(1.5)
    view = ClusterView(live, owners=owned(b=2, c=1), known={BUNDLES[10]})
    assert decide(view, POLICY, NOW) == [Assign(BUNDLES[10], "c")]
    assert least_loaded_gateway({}, {}, POLICY) is None


def test_lookups_at_once_spread_new_bundles_and_agree_on_each() -> None:
    """Four bundles looked up before any is owned: two each, not all four on the
    gateway that looked least loaded first (the picks count as its bundles)."""
    live = gateways(gw("a"), gw("b"))
    picks = LookupPicks(hold_ms=1_000)
    unowned = lambda _b: False  # noqa: E731 - nothing is owned yet
    chosen = [picks.pick(b, live, {}, unowned, POLICY, NOW) for b in BUNDLES[:4]]
    assert chosen == ["a", "b", "a", "b"]
    assert [least_loaded_gateway(live, {}, POLICY)] * 4 == ["a"] * 4  # the control: without picks
    # the same bundle again while its pick holds: the same gateway, whatever the counts say now
    assert picks.pick(BUNDLES[1], live, {"b": 9}, unowned, POLICY, NOW + 999) == "b"
    assert len(picks) == 4


def test_a_pick_ends_when_owned_old_or_its_gateway_is_gone() -> None:
    live = gateways(gw("a"), gw("b"))
    picks = LookupPicks(hold_ms=1_000)
    first, second = BUNDLES[0], BUNDLES[1]
    assert picks.pick(first, live, {}, lambda _b: False, POLICY, NOW) == "a"
    # owned now: counted by its owner's key (counts), no longer as a pick
    assert picks.pick(second, live, {"a": 1}, lambda b: b == first, POLICY, NOW) == "b"
    assert len(picks) == 1
    # an old pick no longer counts, and its bundle is decided again
    assert picks.pick(second, live, {"b": 3}, lambda _b: False, POLICY, NOW + 1_000) == "a"
    # a pick of a gateway that is gone (or not serving) is decided again
    assert picks.pick(second, gateways(gw("b")), {}, lambda _b: False, POLICY, NOW + 1_001) == "b"


def test_picks_are_bounded() -> None:
    picks = LookupPicks(hold_ms=1_000, picks_max=3)
    live = gateways(gw("a"), gw("b"))
    for bundle in BUNDLES[:10]:
        picks.pick(bundle, live, {}, lambda _b: False, POLICY, NOW)
    assert len(picks) == 3
    assert picks.pick(BUNDLES[9], live, {}, lambda _b: False, POLICY, NOW) is not None


@st.composite
def views(draw: st.DrawFn) -> ClusterView:
    names = draw(st.lists(st.sampled_from("abcdef"), min_size=0, max_size=5, unique=True))
    paths = st.sampled_from([b.path for b in BUNDLES[:24]])  # some reported bundles are not owned
    live = {
        n: gw(
            n,
            started_ms=draw(st.sampled_from([0, NOW - 10, NOW - 400_000])),
            load=LoadReport(
                topics=draw(st.integers(0, 200)),
                cpu=draw(st.floats(0, 1)),
                bundle_rates=tuple(draw(st.dictionaries(paths, st.floats(0, 50_000), max_size=8)).items()),
            ),
        )
        for n in names
    }
    holders = [*names, "dead"]
    bundles = draw(st.lists(st.sampled_from(BUNDLES), max_size=20, unique=True))
    owners = {b: draw(st.sampled_from(holders)) for b in bundles if draw(st.booleans())}
    assignments = {
        b: Assignment(draw(st.sampled_from(holders)), NOW - draw(st.integers(0, 60_000)))
        for b in bundles
        if draw(st.integers(0, 3)) == 0
    }
    unloading = {b for b in owners if draw(st.integers(0, 4)) == 0}
    moved = {b: NOW - draw(st.integers(0, 120_000)) for b in owners if draw(st.booleans())}
    return ClusterView(live, owners, set(bundles), assignments, unloading, moved)


def shuffled(view: ClusterView, seed: int) -> ClusterView:
    rng = random.Random(seed)

    def mix(d: dict[K, V]) -> dict[K, V]:
        items = list(d.items())
        rng.shuffle(items)
        return dict(items)

    return ClusterView(
        mix(dict(view.gateways)),
        mix(dict(view.owners)),
        set(view.known),
        mix(dict(view.assignments)),
        set(view.unloading),
        mix(dict(view.last_moved_ms)),
    )


@settings(max_examples=300, deadline=None)
@given(views(), st.integers(0, 2**32))
def test_decisions_are_deterministic_and_sane(view: ClusterView, seed: int) -> None:
    policy = BalancePolicy(max_moves_per_round=3)
    effects = decide(view, policy, NOW)
    assert decide(shuffled(view, seed), policy, NOW) == effects
    moves = unloads(effects)
    assert len(moves) <= 3
    for e in effects:
        if isinstance(e, Assign):
            assert e.gateway in view.gateways
            assert view.owners.get(e.bundle) not in view.gateways
        elif isinstance(e, Unload):
            assert view.owners[e.bundle] == e.from_gateway != e.to_gateway
            assert e.to_gateway in view.gateways
            assert e.bundle not in view.unloading
            assert NOW - view.last_moved_ms.get(e.bundle, 0) >= policy.move_cooldown_ms
    assert len({e.bundle for e in moves}) == len(moves)
    assigned = [e.bundle for e in effects if isinstance(e, Assign)]
    assert len(set(assigned)) == len(assigned)
    if view.gateways:  # every bundle that should be owned has a live owner or a live target
        pending = {b for b, a in view.assignments.items() if a.gateway_id in view.gateways}
        for b in view.known:
            assert view.owners.get(b) in view.gateways or b in pending or b in assigned
