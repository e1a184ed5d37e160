"""Ensemble placement: which live nodes a ledger (or a replacement) goes to (pure).

Owns: the choice of E nodes for a new ledger and of a replacement for a failed
ensemble member (a node from outside the ensemble first; the failed member
itself once it answers again, when there is no other).
Rule (docs/architecture.md §3 "Placement"): only live, writable nodes that are not
being decommissioned (``NodeInfo.draining``, docs/decisions/0020); most free space
first, then least load; a seeded ``random.Random`` breaks ties, so equal nodes
share the load and a simulation replays exactly. Free space and load are
compared in coarse buckets so that noise (a few MiB, a few ops/s) does not pin
every ledger to the same node. ``NotEnoughNodes`` when impossible.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable

from storage.errors import NotEnoughNodes
from storage.types import NodeId, NodeInfo

FREE_SPACE_BUCKET_BYTES = 1 << 30  # nodes within the same GiB of free space count as equal
LOAD_BUCKET = 100.0  # ... and within the same 100 ops/s of load


def _rank(node: NodeInfo) -> tuple[int, int]:
    return (-(node.free_bytes // FREE_SPACE_BUCKET_BYTES), int(node.load // LOAD_BUCKET))


def candidates(nodes: Iterable[NodeInfo], exclude: Collection[NodeId], rng: random.Random) -> list[NodeInfo]:
    """Writable, not draining nodes not in ``exclude``, best first (ties in seeded random order)."""
    unique: dict[NodeId, NodeInfo] = {}
    for node in nodes:
        if not node.read_only and not node.draining and node.node_id not in exclude:
            unique[node.node_id] = node
    ordered = sorted(unique.values(), key=lambda n: n.node_id)  # input order must not matter
    rng.shuffle(ordered)
    ordered.sort(key=_rank)  # stable: the shuffle decides among equals
    return ordered


def choose_ensemble(
    nodes: Iterable[NodeInfo], ensemble_size: int, rng: random.Random, exclude: Collection[NodeId] = ()
) -> tuple[NodeId, ...]:
    """E distinct nodes for a new ledger."""
    assert ensemble_size >= 1
    ranked = candidates(nodes, exclude, rng)
    if len(ranked) < ensemble_size:
        raise NotEnoughNodes(f"need {ensemble_size} writable nodes, {len(ranked)} available")
    return tuple(node.node_id for node in ranked[:ensemble_size])


def choose_replacement(
    nodes: Iterable[NodeInfo],
    ensemble: Collection[NodeId],
    failed: Collection[NodeId],
    rng: random.Random,
) -> NodeId:
    """One node to take a failed member's place: never a current member of
    the ensemble, never a node known to have failed."""
    ranked = candidates(nodes, set(ensemble) | set(failed), rng)
    if not ranked:
        raise NotEnoughNodes("no writable node outside the ensemble is available")
    return ranked[0].node_id


def heal_members(
    nodes: Iterable[NodeInfo],
    ensemble: tuple[NodeId, ...],
    failed: Collection[NodeId],
    rng: random.Random,
    exclude: Collection[NodeId] = (),
    readmit: Collection[NodeId] = (),
) -> tuple[tuple[NodeId, ...], frozenset[NodeId]]:
    """``ensemble`` with each member in ``failed`` replaced where possible (indexes
    kept): by a node from outside the ensemble, ``failed`` and ``exclude`` when there
    is one, else by itself when it is in ``readmit`` (it answers again); a member
    with neither stays (still failed). Returns the ensemble and the readmitted."""
    pool = list(nodes)
    current = list(ensemble)
    avoid = set(failed) | set(exclude)
    readmitted: set[NodeId] = set()
    for index, member in enumerate(ensemble):
        if member not in failed:
            continue
        try:
            current[index] = choose_replacement(pool, current, avoid, rng)
        except NotEnoughNodes:
            if member in readmit:
                readmitted.add(member)
    return tuple(current), frozenset(readmitted)
