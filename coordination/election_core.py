"""Leader election decisions: given the candidate keys, who leads and what to do (pure).

Owns: the rules of ``election.Election`` (no asyncio, no store access).
Rule: every candidate holds ``<election prefix><candidate id>`` under its own
lease, created with create-if-absent. The leader is the candidate whose key has
the lowest ``create_revision`` (etcd's election recipe; ties cannot happen in
etcd, the id breaks them for safety). A waiting candidate watches only its
predecessor - the next older key - so one departure wakes one waiter.
A leader is only as good as its lease: it is a liveness hint, never a lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from coordination.prefix_view import Entry
from coordination.store import KeyValue


@dataclass(frozen=True, slots=True)
class Candidate:
    candidate_id: str
    create_revision: int
    lease: int = 0  # 0 when unknown (built from watch events)


def validate_candidate_id(candidate_id: str) -> None:
    if not candidate_id or "/" in candidate_id or not candidate_id.isprintable():
        raise ValueError(f"bad candidate id {candidate_id!r}: non-empty, printable, no '/'")


def candidates_from_listing(prefix: str, listing: Iterable[KeyValue]) -> list[Candidate]:
    """Candidates directly under ``prefix`` (deeper keys are ignored)."""
    out = []
    for kv in listing:
        if kv.key.startswith(prefix):
            cid = kv.key[len(prefix) :]
            if cid and "/" not in cid:
                out.append(Candidate(cid, kv.create_revision, kv.lease))
    return out


def candidates_from_entries(prefix: str, entries: Mapping[str, Entry]) -> list[Candidate]:
    """Candidates from a ``prefix_view`` snapshot (``{key: Entry}``)."""
    out = []
    for key, entry in entries.items():
        cid = key[len(prefix) :] if key.startswith(prefix) else ""
        if cid and "/" not in cid:
            out.append(Candidate(cid, entry.create_revision))
    return out


def _order(candidate: Candidate) -> tuple[int, str]:
    return candidate.create_revision, candidate.candidate_id


def leader(candidates: Iterable[Candidate]) -> Candidate | None:
    """The candidate with the lowest create_revision, or None if there is none."""
    return min(candidates, key=_order, default=None)


def leader_id(candidates: Iterable[Candidate]) -> str | None:
    found = leader(candidates)
    return found.candidate_id if found else None


def predecessor(candidates: Iterable[Candidate], me: str) -> Candidate | None:
    """The next older candidate than ``me`` (whose departure may make me leader)."""
    ordered = sorted(candidates, key=_order)
    for i, candidate in enumerate(ordered):
        if candidate.candidate_id == me:
            return ordered[i - 1] if i > 0 else None
    return None


@dataclass(frozen=True, slots=True)
class Create:
    """My key is missing: create it (create-if-absent) under my lease."""


@dataclass(frozen=True, slots=True)
class Lead:
    """I hold the oldest key: I am the leader."""


@dataclass(frozen=True, slots=True)
class WaitFor:
    """Wait until ``candidate_id``'s key is deleted, then decide again."""

    candidate_id: str


@dataclass(frozen=True, slots=True)
class Blocked:
    """My id is held under another lease (an earlier incarnation of me whose lease
    has not expired yet): wait until that key is deleted, then decide again."""

    lease: int


Step = Create | Lead | WaitFor | Blocked


def campaign_step(candidates: Iterable[Candidate], me: str, my_lease: int) -> Step:
    """The next campaign action for candidate ``me`` holding lease ``my_lease``."""
    pool = list(candidates)
    mine = next((c for c in pool if c.candidate_id == me), None)
    if mine is None:
        return Create()
    if mine.lease != my_lease:
        return Blocked(mine.lease)
    before = predecessor(pool, me)
    if before is None:
        return Lead()
    return WaitFor(before.candidate_id)
