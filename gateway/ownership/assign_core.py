"""The load manager's decisions, pure: who should own which bundle, and what to move.

Owns: ``BalancePolicy`` (weights and thresholds), the load ``score`` of a gateway,
``least_loaded`` (also used by lookup, so a gateway's own pick agrees with the
load manager's) and ``decide``: cluster view + ``now_ms`` -> effects.
Rule: deterministic - every choice is a minimum over a total order (score, then
gateway id; bundles in sorted order), so the same view always gives the same
effects. One round, in this order:

1. ``ClearAssignment`` for assignments that are done or stale (target gone,
   target already owns it, bundle owned by another live gateway with no move in
   progress). Assignments older than ``assign_timeout_ms`` whose bundle is still
   unowned are decided again.
2. ``Assign`` every bundle that has no live owner (unowned, or owned by a gateway
   that is no longer registered) and no pending assignment, to the least loaded
   gateway; each assignment adds one bundle to that gateway's projected score.
3. Spread to new gateways (registered less than ``new_gateway_ms`` ago, starting
   at load 0): ``Unload`` bundles from the gateway with the most bundles to the
   new one until every gateway's bundle count is within 1 of the new one's.
4. Shed load: while a gateway's score is above ``overload_factor`` x the mean (and
   at least ``min_overload_score``), ``Unload`` one of its bundles to the least
   loaded gateway - only if that gateway's score plus the bundle's estimated share
   (score / bundles of the source) stays below the source's score, so a move
   always improves balance and cannot ping-pong.

Steps 3 and 4 together make at most ``max_moves_per_round`` moves, and never move
a bundle moved less than ``move_cooldown_ms`` ago, one being unloaded, or one
with a pending assignment. An ``Unload`` names its destination: the shell writes
the assignment first, so the bundle's next owner is known before it is released.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field

from gateway.ownership.bundles import NamespaceBundle
from gateway.ownership.records import Assignment, GatewayInfo, LoadReport


@dataclass(frozen=True, slots=True)
class BalancePolicy:
    bundle_weight: float = 1.0  # per owned bundle
    topic_weight: float = 0.05  # per loaded topic
    session_weight: float = 0.02  # per producer/consumer/reader session
    msg_rate_weight: float = 0.001  # per message/s published
    cpu_weight: float = 10.0  # per whole machine of CPU (cpu is a fraction 0..1)
    overload_factor: float = 1.5  # shed from a gateway above this x the mean score
    min_overload_score: float = 4.0  # ... and above this absolute score (idle clusters stay put)
    max_moves_per_round: int = 2
    move_cooldown_ms: int = 60_000
    new_gateway_ms: int = 300_000  # a gateway this young is "new" and gets bundles spread to it
    assign_timeout_ms: int = 30_000  # an assignment not taken up within this is decided again


def load_score(load: LoadReport, policy: BalancePolicy) -> float:
    return (
        policy.topic_weight * load.topics
        + policy.session_weight * load.sessions
        + policy.msg_rate_weight * load.msg_rate_in
        + policy.cpu_weight * load.cpu
    )


def score(load: LoadReport, bundles: int, policy: BalancePolicy) -> float:
    """A gateway's load: its report plus ``bundle_weight`` per bundle it owns."""
    return load_score(load, policy) + policy.bundle_weight * bundles


def least_loaded(scores: Mapping[str, float], exclude: str | None = None) -> str | None:
    """The gateway with the lowest score, ties broken by id; None if there is none."""
    candidates = [(s, g) for g, s in scores.items() if g != exclude]
    return min(candidates)[1] if candidates else None


def least_loaded_gateway(
    gateways: Mapping[str, GatewayInfo], counts: Mapping[str, int], policy: BalancePolicy
) -> str | None:
    """Lookup's pick for an unowned bundle (``counts``: bundles each gateway owns)."""
    return least_loaded({g: score(info.load, counts.get(g, 0), policy) for g, info in gateways.items()})


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


class _Round:
    """Projected state while one round's effects are chosen."""

    def __init__(self, view: ClusterView, policy: BalancePolicy, now_ms: int) -> None:
        self.view = view
        self.policy = policy
        self.now_ms = now_ms
        self.live = view.gateways
        self.holder: dict[NamespaceBundle, str] = {}  # projected owner of each bundle
        self.pending: set[NamespaceBundle] = set()
        self.moved: set[NamespaceBundle] = set()
        self.effects: list[Effect] = []
        self.counts: dict[str, int] = dict.fromkeys(self.live, 0)
        self.scores: dict[str, float] = {}

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

    def move(self, bundle: NamespaceBundle, source: str, target: str) -> None:
        share = self.scores[source] / max(self.counts[source], 1)
        self.effects.append(Unload(bundle, source, target))
        self.set_holder(bundle, target)
        self.scores[source] -= share
        self.scores[target] += share
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
    _shed_overload(r, policy.max_moves_per_round - moves)
    return r.effects


def _settle_assignments(r: _Round) -> None:
    for bundle, assignment in sorted(r.view.assignments.items()):
        owner = r.view.owners.get(bundle)
        target = assignment.gateway_id
        owned_elsewhere = owner in r.live and owner != target and bundle not in r.view.unloading
        if target not in r.live or owner == target or owned_elsewhere:
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
        target = least_loaded(r.scores)
        assert target is not None
        r.effects.append(Assign(bundle, target))
        r.set_holder(bundle, target)
        r.scores[target] += r.policy.bundle_weight


def _spread_to_new(r: _Round, budget: int) -> int:
    new = [g for g, info in r.live.items() if r.now_ms - info.started_ms < r.policy.new_gateway_ms]
    moves = 0
    while moves < budget and new:
        target = min(new, key=lambda g: (r.counts[g], g))
        donors = sorted(
            (g for g in r.live if g != target and r.counts[g] - r.counts[target] > 1),
            key=lambda g: (-r.counts[g], -r.scores[g], g),
        )
        for donor in donors:
            movable = r.movable(donor)
            if movable:
                r.move(movable[0], donor, target)
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
            target = least_loaded(r.scores, exclude=source)
            if not movable or target is None:
                continue
            share = r.scores[source] / max(r.counts[source], 1)
            if r.scores[target] + share < r.scores[source]:
                r.move(movable[0], source, target)
                moves += 1
                break
        else:
            return
