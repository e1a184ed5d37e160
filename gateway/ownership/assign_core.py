"""The load manager's decisions: who should own which bundle, and what to move (pure).

Owns: ``BalancePolicy`` (weights and thresholds), the load ``score`` of a gateway,
``least_loaded`` (also used by lookup, so a gateway's own pick agrees with the
load manager's), ``LookupPicks`` (lookup's recent picks for unowned bundles,
counted until they are owned, so concurrent lookups spread new bundles) and
``decide``: cluster view + ``now_ms`` -> effects.
A gateway's score weighs its bundles, topics, sessions, cpu and message rate; the
message rate is the sum of its per-bundle rates (in + out) when its report has
them, else its publish rate ``msg_rate_in`` (reports of older gateways).
Rule: deterministic - every choice is a minimum over a total order (score, then
gateway id; bundles in sorted order), so the same view always gives the same
effects. Only ``serving`` gateways are given bundles (assigned, spread or shed
to): those whose registration says they reach a write quorum of storage nodes,
or every live one when none does (storage_reach.py). One round, in this order:

1. ``ClearAssignment`` for assignments that are done or stale (target gone or not serving,
   target already owns it, bundle owned by another live gateway with no move in
   progress). Assignments older than ``assign_timeout_ms`` whose bundle is still
   unowned are decided again.
2. ``Assign`` every bundle that has no live owner (unowned, or owned by a gateway
   that is no longer registered) and no pending assignment, to the least loaded
   gateway; each assignment adds one bundle to that gateway's projected score.
3. Spread to new gateways (registered less than ``new_gateway_ms`` ago and more
   than ``joined_after_ms`` after the oldest live one - gateways started together
   are balanced by assignment, not by moves - starting at load 0): ``Unload``
   bundles from the gateway with the most bundles to the new one until every
   gateway's bundle count is within 1 of the new one's. Each move takes the
   donor's coldest movable bundle (lowest reported rate, ties in bundle order), so
   a hot bundle moves only when it is the donor's only movable one, and only if the
   new gateway's score stays at or below the donor's afterwards (a count move
   never makes the receiver the busier one, nor undoes a shed).
4. Shed load (only in rounds where ``view.shed_due``: every ``shed_interval_ms``,
   while assignment runs every round): while a gateway's score is above ``overload_factor`` x the mean (and
   at least ``min_overload_score``), weigh moving each of its movable bundles to
   the least loaded other gateway. A bundle's load is ``bundle_weight`` +
   ``msg_rate_weight`` x its reported rate + the source's cpu term pro rata to
   rate (split evenly if all its rates are 0; a bundle missing from the report,
   acquired since, is idle: ``bundle_weight``); if the source's report has no
   per-bundle rates, every bundle carries the average share (score / bundles).
   The bundle giving the lowest peak = max(source - load, target + load) (ties in
   bundle order) is moved only if that peak is below the source's score, by at
   least ``min_gain_fraction`` x the source's score or by at least the mean load
   of the bundles in the source's report (the average share without one) - so a
   gateway of many evenly loaded bundles still sheds them one by one. So every
   move lowers the higher of the two by a real margin:
   a bundle so hot that the target would end up at least as loaded as the source
   is now never moves (it would only move the problem), a cold bundle next to a
   hot one is not moved for a negligible gain, and nothing ping-pongs.

Steps 3 and 4 together make at most ``max_moves_per_round`` moves, and never move
a bundle moved less than ``move_cooldown_ms`` ago, one being unloaded, or one
with a pending assignment. An ``Unload`` names its destination: the shell writes
the assignment first, so the bundle's next owner is known before it is released.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field

from gateway.ownership.bundles import NamespaceBundle
from gateway.ownership.key_records import Assignment, GatewayInfo, LoadReport

PICK_HOLD_MS = 10_000  # a lookup's pick for an unowned bundle counts this long unless it is owned sooner
PICKS_MAX = 1_000  # lookup picks remembered at most (one per unowned bundle looked up; each pick scans them)


@dataclass(frozen=True, slots=True)
class BalancePolicy:
    bundle_weight: float = 1.0  # per owned bundle
    topic_weight: float = 0.05  # per loaded topic
    session_weight: float = 0.02  # per producer/consumer/reader session
    msg_rate_weight: float = 0.001  # per message/s (in + out, or in only: see message_rate)
    cpu_weight: float = 10.0  # per whole machine of CPU (cpu is a fraction 0..1)
    overload_factor: float = 1.5  # shed from a gateway above this x the mean score
    min_overload_score: float = 4.0  # ... and above this absolute score (idle clusters stay put)
    min_gain_fraction: float = 0.1  # a shed must lower max(source, target) by this x source (or see rule 4)
    max_moves_per_round: int = 2
    move_cooldown_ms: int = 30 * 60_000  # a moved bundle stays (loadBalancerSheddingGracePeriodMinutes)
    shed_interval_ms: int = 60_000  # shedding is weighed this often (loadBalancerSheddingIntervalMinutes)
    new_gateway_ms: int = 300_000  # a gateway this young is "new" and gets bundles spread to it ...
    joined_after_ms: int = 30_000  # ... if it started this long after the oldest (not at cluster start)
    assign_timeout_ms: int = 30_000  # an assignment not taken up within this is decided again


def shed_due(last_shed_ms: int | None, policy: BalancePolicy, now_ms: int) -> bool:
    """Whether this round weighs shedding: the first round a load manager leads, then
    once ``shed_interval_ms`` has passed since the last round that did."""
    return last_shed_ms is None or now_ms - last_shed_ms >= policy.shed_interval_ms


def message_rate(load: LoadReport) -> float:
    """Messages/s the score counts: the per-bundle rates (in + out) summed, or the
    publish rate of a report without them (a gateway that predates them)."""
    if load.bundle_rates:
        return sum(rate for _, rate in load.bundle_rates)
    return load.msg_rate_in


def load_score(load: LoadReport, policy: BalancePolicy) -> float:
    return (
        policy.topic_weight * load.topics
        + policy.session_weight * load.sessions
        + policy.msg_rate_weight * message_rate(load)
        + policy.cpu_weight * load.cpu
    )


def bundle_loads(load: LoadReport, policy: BalancePolicy) -> dict[str, float] | None:
    """Each reported bundle's share of its gateway's score (bundle path -> load):
    ``bundle_weight`` + ``msg_rate_weight`` x rate + the cpu term pro rata to rate
    (evenly if every rate is 0). None if the report has no per-bundle rates."""
    if not load.bundle_rates:
        return None
    total = sum(rate for _, rate in load.bundle_rates)
    cpu = policy.cpu_weight * load.cpu
    return {
        path: policy.bundle_weight
        + policy.msg_rate_weight * rate
        + (cpu * rate / total if total > 0 else cpu / len(load.bundle_rates))
        for path, rate in load.bundle_rates
    }


def score(load: LoadReport, bundles: int, policy: BalancePolicy) -> float:
    """A gateway's load: its report plus ``bundle_weight`` per bundle it owns."""
    return load_score(load, policy) + policy.bundle_weight * bundles


def least_loaded(scores: Mapping[str, float], exclude: str | None = None) -> str | None:
    """The gateway with the lowest score, ties broken by id; None if there is none."""
    candidates = [(s, g) for g, s in scores.items() if g != exclude]
    return min(candidates)[1] if candidates else None


def serving(gateways: Mapping[str, GatewayInfo]) -> Mapping[str, GatewayInfo]:
    """The gateways that may be given bundles: those that reach a write quorum of
    storage nodes (``storage_ok``), or every one if none does (nobody serves better,
    so nothing is kept unowned for it)."""
    ok = {g: info for g, info in gateways.items() if info.storage_ok}
    return ok or gateways


def least_loaded_gateway(
    gateways: Mapping[str, GatewayInfo], counts: Mapping[str, int], policy: BalancePolicy
) -> str | None:
    """Lookup's pick for an unowned bundle (``counts``: bundles each gateway owns),
    among the ``serving`` gateways."""
    return least_loaded(
        {g: score(info.load, counts.get(g, 0), policy) for g, info in serving(gateways).items()}
    )


class LookupPicks:
    """One gateway's recent lookup picks for unowned bundles: ``pick`` is lookup's
    choice of who acquires one.

    Rule: lookups running at the same time must not all pick the same gateway
    because none of them sees the others' picks among the ownership keys yet (a
    client looking up many new topics at once would put every bundle on the one
    gateway that looked least loaded at the start). So a pick counts as one of the
    picked gateway's bundles, and another lookup of the same bundle gets the same
    answer, until the bundle is owned, the pick is ``hold_ms`` old (its client never
    followed it) or its gateway no longer serves. At most ``picks_max`` are kept,
    the oldest dropped first.
    """

    def __init__(self, hold_ms: int = PICK_HOLD_MS, picks_max: int = PICKS_MAX) -> None:
        self.hold_ms = hold_ms
        self.picks_max = picks_max
        self._picks: dict[NamespaceBundle, tuple[str, int]] = {}  # bundle -> (gateway, picked at)

    def __len__(self) -> int:
        return len(self._picks)

    def pick(
        self,
        bundle: NamespaceBundle,
        gateways: Mapping[str, GatewayInfo],
        counts: Mapping[str, int],
        owned: Callable[[NamespaceBundle], bool],
        policy: BalancePolicy,
        now_ms: int,
    ) -> str | None:
        """Who should acquire ``bundle`` (unowned): ``counts`` are the bundles each
        gateway owns, ``owned`` says whether a bundle has an owner now."""
        candidates = serving(gateways)
        for other, (gateway, at) in list(self._picks.items()):
            if owned(other) or now_ms - at >= self.hold_ms or gateway not in candidates:
                del self._picks[other]
        held = self._picks.get(bundle)
        if held is not None:
            return held[0]
        pending = dict(counts)
        for gateway, _ in self._picks.values():
            pending[gateway] = pending.get(gateway, 0) + 1
        target = least_loaded_gateway(gateways, pending, policy)
        if target is not None:
            if len(self._picks) >= self.picks_max:
                del self._picks[next(iter(self._picks))]
            self._picks[bundle] = (target, now_ms)
        return target


# ---------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class Assign:
    """Write an assignment: ``gateway`` is to acquire ``bundle``."""

    bundle: NamespaceBundle
    gateway: str


@dataclass(frozen=True, slots=True)
class Unload:
    """Move ``bundle`` off ``from_gateway``: assign it to ``to_gateway``, then ask the owner to unload."""

    bundle: NamespaceBundle
    from_gateway: str
    to_gateway: str
    reason: str = field(default="", compare=False)  # for the operator's log line


@dataclass(frozen=True, slots=True)
class ClearAssignment:
    """Delete the (done or stale) assignment of ``bundle``."""

    bundle: NamespaceBundle


Effect = Assign | Unload | ClearAssignment


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What the load manager read this round."""

    gateways: Mapping[str, GatewayInfo]  # live (registered) gateways
    owners: Mapping[NamespaceBundle, str]  # ownership keys; the owner may be gone
    known: Set[NamespaceBundle] = frozenset()  # bundles that should be owned (e.g. they have topics)
    assignments: Mapping[NamespaceBundle, Assignment] = field(default_factory=dict)
    unloading: Set[NamespaceBundle] = frozenset()  # valid pending unload requests
    last_moved_ms: Mapping[NamespaceBundle, int] = field(default_factory=dict)
    shed_due: bool = True  # weigh shedding this round (``shed_due`` of the shell's last round)


class _Round:
    """Projected state while one round's effects are chosen."""

    def __init__(self, view: ClusterView, policy: BalancePolicy, now_ms: int) -> None:
        self.view = view
        self.policy = policy
        self.now_ms = now_ms
        self.live = view.gateways
        self.targets = set(serving(view.gateways))  # who may be given a bundle
        self.holder: dict[NamespaceBundle, str] = {}  # projected owner of each bundle
        self.pending: set[NamespaceBundle] = set()
        self.moved: set[NamespaceBundle] = set()
        self.effects: list[Effect] = []
        self.counts: dict[str, int] = dict.fromkeys(self.live, 0)
        self.scores: dict[str, float] = {}
        self.rates = {g: dict(info.load.bundle_rates) for g, info in self.live.items()}
        self.loads = {g: bundle_loads(info.load, policy) for g, info in self.live.items()}

    def set_holder(self, bundle: NamespaceBundle, gateway: str) -> None:
        old = self.holder.get(bundle)
        if old is not None:
            self.counts[old] -= 1
        self.holder[bundle] = gateway
        self.counts[gateway] += 1

    def compute_scores(self) -> None:
        self.scores = {g: score(info.load, self.counts[g], self.policy) for g, info in self.live.items()}

    def movable(self, gateway: str) -> list[NamespaceBundle]:
        cooldown = self.policy.move_cooldown_ms
        return sorted(
            b
            for b, g in self.holder.items()
            if g == gateway
            and self.view.owners.get(b) == gateway
            and b not in self.view.unloading
            and b not in self.pending
            and b not in self.moved
            and self.now_ms - self.view.last_moved_ms.get(b, self.now_ms - cooldown) >= cooldown
        )

    def rate(self, bundle: NamespaceBundle, gateway: str) -> float:
        """The bundle's rate as its owner ``gateway`` reported it (0 if not reported)."""
        return self.rates[gateway].get(bundle.path, 0.0)

    def load(self, bundle: NamespaceBundle, source: str) -> float:
        """What moving ``bundle`` off ``source`` takes from its score (module docstring, 4)."""
        loads = self.loads[source]
        if loads is None:  # no per-bundle rates: the average share, as projected now
            return self.scores[source] / max(self.counts[source], 1)
        return loads.get(bundle.path, self.policy.bundle_weight)  # acquired after the report: idle

    def mean_load(self, gateway: str) -> float:
        """The mean load of ``gateway``'s bundles (over its report, or the average share)."""
        loads = self.loads[gateway]
        if loads is None:
            return self.scores[gateway] / max(self.counts[gateway], 1)
        return sum(loads.values()) / len(loads)

    def move(self, bundle: NamespaceBundle, source: str, target: str, reason: str = "") -> None:
        load = self.load(bundle, source)
        self.effects.append(Unload(bundle, source, target, reason))
        self.set_holder(bundle, target)
        self.scores[source] -= load
        self.scores[target] += load
        self.moved.add(bundle)


def decide(view: ClusterView, policy: BalancePolicy, now_ms: int) -> list[Effect]:
    """The effects of one load-manager round (see the module docstring)."""
    r = _Round(view, policy, now_ms)
    live = view.gateways
    for bundle, owner in view.owners.items():
        if owner in live:
            r.set_holder(bundle, owner)
    _settle_assignments(r)
    r.compute_scores()
    if not live:
        return r.effects
    _assign_unowned(r)
    moves = _spread_to_new(r, policy.max_moves_per_round)
    if view.shed_due:
        _shed_overload(r, policy.max_moves_per_round - moves)
    return r.effects


def _settle_assignments(r: _Round) -> None:
    for bundle, assignment in sorted(r.view.assignments.items()):
        owner = r.view.owners.get(bundle)
        target = assignment.gateway_id
        owned_elsewhere = owner in r.live and owner != target and bundle not in r.view.unloading
        if target not in r.targets or owner == target or owned_elsewhere:
            r.effects.append(ClearAssignment(bundle))
            continue
        unowned = owner not in r.live
        if unowned and r.now_ms - assignment.at_ms > r.policy.assign_timeout_ms:
            continue  # never taken up: decide again below
        r.pending.add(bundle)
        r.set_holder(bundle, target)


def _assign_unowned(r: _Round) -> None:
    candidates = set(r.view.known) | set(r.view.owners) | set(r.view.assignments)
    for bundle in sorted(candidates):
        if bundle in r.pending or r.view.owners.get(bundle) in r.live:
            continue
        target = least_loaded({g: s for g, s in r.scores.items() if g in r.targets})
        assert target is not None
        r.effects.append(Assign(bundle, target))
        r.set_holder(bundle, target)
        r.scores[target] += r.policy.bundle_weight


def _spread_to_new(r: _Round, budget: int) -> int:
    oldest = min(info.started_ms for info in r.live.values())
    new = [
        g
        for g, info in r.live.items()
        if g in r.targets
        and r.now_ms - info.started_ms < r.policy.new_gateway_ms
        and info.started_ms - oldest > r.policy.joined_after_ms
    ]
    moves = 0
    while moves < budget and new:
        target = min(new, key=lambda g: (r.counts[g], g))
        donors = sorted(
            (g for g in r.live if g != target and r.counts[g] - r.counts[target] > 1),
            key=lambda g: (-r.counts[g], -r.scores[g], g),
        )
        for donor in donors:
            movable = r.movable(donor)
            if not movable:
                continue
            coldest = min(movable, key=lambda b: (r.rate(b, donor), b))
            load = r.load(coldest, donor)
            if r.scores[target] + load > r.scores[donor] - load:
                continue  # balancing counts would unbalance load (e.g. undo a shed): leave it
            rate = r.rate(coldest, donor)
            r.move(coldest, donor, target, f"spread to new gateway: bundle counts, rate {rate:.0f}/s")
            moves += 1
            break
        else:
            return moves
    return moves


def _shed_overload(r: _Round, budget: int) -> None:
    moves = 0
    while moves < budget and len(r.live) >= 2:
        mean = sum(r.scores.values()) / len(r.scores)
        overloaded = sorted(
            (
                g
                for g, s in r.scores.items()
                if s > r.policy.overload_factor * mean and s >= r.policy.min_overload_score
            ),
            key=lambda g: (-r.scores[g], g),
        )
        for source in overloaded:
            movable = r.movable(source)
            target = least_loaded({g: s for g, s in r.scores.items() if g in r.targets}, exclude=source)
            if not movable or target is None:
                continue
            before = r.scores[source]
            after, bundle = min((_peak_after(r, b, source, target), b) for b in movable)
            gain = before - after
            if gain > 0 and gain >= min(r.policy.min_gain_fraction * before, r.mean_load(source)):
                load = r.load(bundle, source)
                reason = f"shed: score {before:.1f} -> peak {after:.1f}, bundle load {load:.1f}"
                r.move(bundle, source, target, reason)
                moves += 1
                break
        else:
            return


def _peak_after(r: _Round, bundle: NamespaceBundle, source: str, target: str) -> float:
    """The higher of the two scores once ``bundle`` has moved from ``source`` to ``target``."""
    load = r.load(bundle, source)
    return max(r.scores[source] - load, r.scores[target] + load)
