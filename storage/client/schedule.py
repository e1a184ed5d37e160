"""Striping rules of a ledger: write sets and recovery coverage (pure).

Owns: which ensemble indexes hold entry *e* (round-robin from ``e mod E``)
and the coverage question asked by fencing and recovery (the writer's ack
count per entry is ``write_core.AckSet``). Rule (BookKeeper ``RoundRobinDistributionSchedule`` /
``QuorumCoverageSet``, docs/compatibility.md §6.2-6.4): an add is acked once Qa
distinct members of its write set made it durable; a fence (or "this entry is
absent") is conclusive once, for every write set, at least ``Qw - Qa + 1`` of
its members answered, because then no write set can still gather Qa acks for
the old writer.
No I/O, no clock: plain functions.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from storage.types import NodeId


def write_set_indexes(entry_id: int, ensemble_size: int, write_quorum: int) -> tuple[int, ...]:
    """Ensemble indexes receiving ``entry_id``: ``(e + i) mod E`` for i < Qw."""
    assert entry_id >= 0 and ensemble_size >= write_quorum >= 1
    start = entry_id % ensemble_size
    return tuple((start + i) % ensemble_size for i in range(write_quorum))


def write_set(ensemble: Sequence[NodeId], entry_id: int, write_quorum: int) -> tuple[NodeId, ...]:
    """Nodes receiving ``entry_id`` within one segment's ensemble."""
    return tuple(ensemble[i] for i in write_set_indexes(entry_id, len(ensemble), write_quorum))


def all_write_sets(ensemble: Sequence[NodeId], write_quorum: int) -> list[tuple[NodeId, ...]]:
    """The E distinct write sets of an ensemble (one per starting index)."""
    return [write_set(ensemble, start, write_quorum) for start in range(len(ensemble))]


def coverage_needed(write_quorum: int, ack_quorum: int) -> int:
    """Answers needed from one write set: ``Qw - Qa + 1``."""
    assert write_quorum >= ack_quorum >= 1
    return write_quorum - ack_quorum + 1


def is_covered(
    ensemble: Sequence[NodeId], write_quorum: int, ack_quorum: int, answered: Collection[NodeId]
) -> bool:
    """True once every write set of ``ensemble`` has ``Qw - Qa + 1`` members
    in ``answered`` (the nodes that gave a definite answer)."""
    needed = coverage_needed(write_quorum, ack_quorum)
    return all(
        sum(1 for node in ws if node in answered) >= needed for ws in all_write_sets(ensemble, write_quorum)
    )


def entry_absent(
    entry_write_set: Sequence[NodeId], write_quorum: int, ack_quorum: int, negatives: Collection[NodeId]
) -> bool:
    """True when enough members of the entry's write set said "no such entry"
    that it can never have been acked (``Qw - Qa + 1`` of them)."""
    needed = coverage_needed(write_quorum, ack_quorum)
    return sum(1 for node in entry_write_set if node in negatives) >= needed


def can_still_cover(
    ensemble: Sequence[NodeId],
    write_quorum: int,
    ack_quorum: int,
    answered: Collection[NodeId],
    failed: Collection[NodeId],
) -> bool:
    """Whether coverage is still reachable if every node not yet ``failed``
    eventually answers (used to give up early instead of waiting forever)."""
    needed = coverage_needed(write_quorum, ack_quorum)
    return all(
        sum(1 for node in ws if node in answered or node not in failed) >= needed
        for ws in all_write_sets(ensemble, write_quorum)
    )
