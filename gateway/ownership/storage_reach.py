"""Whether this gateway can reach a write quorum of storage nodes, and what it does
about its bundles when it cannot (pure).

Owns: ``ReachPolicy`` (how long a loss or a recovery must last), ``ReachState``
(since when the quorum has been lost or reached), ``observe`` (one probe round's
answer + ``now_ms`` -> the next state), ``storage_ok`` (the flag the gateway
publishes in its registration, ``GatewayInfo.storage_ok``) and ``decide`` (state +
the peers' flags + ``now_ms`` -> ``ReachDecision``).
Rule (docs/reliability.md §6, BookKeeper's and Pulsar's way: a broker whose
managed ledgers cannot get enough writable bookies unloads its bundles so a broker
that can serves them):

- the quorum is lost when fewer writable nodes answer than a ledger's ack quorum
  (``need``); one good round does not end a loss: the quorum must be reached for
  ``recover_ms`` in a row (no flapping on a flapping link). A log's failed ledger
  is not a signal here: it follows its topic (a namespace asking for more nodes
  than exist fails on every gateway), so it would move topics around, not fix them;
- ``storage_ok`` is False once the quorum has been lost for ``grace_ms`` and until
  it has been reached again for ``recover_ms``;
- ``decide``: while not ``storage_ok``, ``HAND_OVER`` (unload every owned bundle
  and take no bundle) only if the quorum is still lost, has been for ``grace_ms`` +
  ``settle_ms`` (so a peer cut at the same moment has published its own flag by
  then) and another live gateway reports ``storage_ok`` - when every gateway is
  cut from storage, nobody can serve better, and a gateway whose quorum answers
  again is about to serve: each keeps its bundles (``KEEP``) and nothing flaps around;
  otherwise ``SERVE``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace


class ReachDecision(enum.Enum):
    SERVE = "serve"  # the quorum is reachable: own and take bundles as usual
    HAND_OVER = "hand-over"  # cut from the quorum while a peer is not: unload, take nothing
    KEEP = "keep"  # cut from the quorum, and so is every peer: keep what is held


@dataclass(frozen=True, slots=True)
class ReachPolicy:
    grace_ms: int = 2_000  # a loss this long makes the gateway unhealthy
    recover_ms: int = 3_000  # a reach this long (in a row) makes it healthy again
    settle_ms: int = 2_500  # past the grace, before handing over: two probe rounds and the flag's trip


@dataclass(frozen=True, slots=True)
class ReachState:
    lost_since_ms: int | None = None  # the quorum is lost since then (None: reached)
    reached_since_ms: int | None = None  # the quorum answers again since then, during a loss
    unhealthy: bool = False  # ``storage_ok`` is False (kept until ``recover_ms`` of reach)


def observe(state: ReachState, answered: int, need: int, now_ms: int, policy: ReachPolicy) -> ReachState:
    """The state after a probe round in which ``answered`` writable nodes answered and a
    write quorum takes ``need`` of them."""
    if answered < need:
        lost = state.lost_since_ms if state.lost_since_ms is not None else now_ms
        moved = replace(state, lost_since_ms=lost, reached_since_ms=None)
        return replace(moved, unhealthy=_unhealthy(moved, now_ms, policy))
    if state.lost_since_ms is None:
        return state
    reached = state.reached_since_ms if state.reached_since_ms is not None else now_ms
    if now_ms - reached >= policy.recover_ms:
        return ReachState()
    return replace(state, reached_since_ms=reached, unhealthy=_unhealthy(state, now_ms, policy))


def _unhealthy(state: ReachState, now_ms: int, policy: ReachPolicy) -> bool:
    lost = state.lost_since_ms
    return state.unhealthy or (lost is not None and now_ms - lost >= policy.grace_ms)


def storage_ok(state: ReachState, now_ms: int, policy: ReachPolicy) -> bool:
    """The flag this gateway publishes: False from ``grace_ms`` into a loss until
    ``recover_ms`` of reach."""
    return not _unhealthy(state, now_ms, policy)


def decide(state: ReachState, peers_ok: Iterable[bool], now_ms: int, policy: ReachPolicy) -> ReachDecision:
    """What to do with the owned bundles; ``peers_ok``: the ``storage_ok`` of every
    other live gateway."""
    if storage_ok(state, now_ms, policy):
        return ReachDecision.SERVE
    lost = state.lost_since_ms
    settled = lost is not None and now_ms - lost >= policy.grace_ms + policy.settle_ms
    if not settled or state.reached_since_ms is not None:
        return ReachDecision.KEEP
    return ReachDecision.HAND_OVER if any(peers_ok) else ReachDecision.KEEP
