"""The ledger writer's interface to its shell: the bounds it is given, what it
asks the shell to do, and the ensemble changes it makes (pure).

Owns: ``WriterConfig`` (the writer's count, byte and time bounds), the effects
``write_core`` returns (``SendAdd``, ``CompleteAdds``, ``FindNodes``,
``WriteSegment``, ``FailAll``) and the metadata change a ``WriteSegment``
makes (add bodies are ``wire.encode_add_body``'s). Rules (docs/compatibility.md
§6.2-6.4): a new segment starts at LAC+1 and records on the old one
the members that may lack entries of it; the change applies only while the
ledger is OPEN and its last ensemble is the one the writer saw (else Fenced /
MetadataConflict). No asyncio, no sockets, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from storage.errors import Fenced, MetadataConflict, StorageError
from storage.types import LedgerMetadata, LedgerState, NodeId, Segment


@dataclass(frozen=True, slots=True)
class WriterConfig:
    outstanding_adds_max: int = 4096  # appended but not yet confirmed (backpressure bound)
    outstanding_bytes_max: int = 64 * 1024 * 1024
    add_timeout_ms: int = 5_000  # a member that has not acked by then counts as failed
    ensemble_retry_ms: int = 1_000  # retry a replacement search that found no node
    node_retry_ms: int = 1_000  # a failed node is not chosen again before this (first failure) ...
    node_retry_max_ms: int = 30_000  # ... doubling with each failure, up to this


class SendAdd(NamedTuple):  # hot path: a NamedTuple is built ~3x faster than a frozen dataclass
    """Send the add ``body`` (wire add body) for ``entry_id`` to ``nodes``."""

    entry_id: int
    nodes: tuple[NodeId, ...]
    body: bytes


class CompleteAdds(NamedTuple):
    """Every entry up to ``lac`` is confirmed (in order)."""

    lac: int


@dataclass(frozen=True, slots=True)
class FindNodes:
    """List the live nodes and probe (node info, short timeout) the ``probe``
    nodes among them, then call ``on_live_nodes`` with those that answered."""

    failed: frozenset[NodeId]
    probe: frozenset[NodeId] = frozenset()


@dataclass(frozen=True, slots=True)
class WriteSegment:
    """CAS the metadata: the last segment (``old_ensemble``) is followed by one
    starting at ``first_entry_id`` with ``ensemble`` (see ``apply_segment``);
    ``missing``: members that failed while the old one was written (recorded on
    it: they may lack entries of it). Then call ``on_segment_written`` or
    ``on_segment_failed``."""

    first_entry_id: int
    old_ensemble: tuple[NodeId, ...]
    ensemble: tuple[NodeId, ...]
    missing: frozenset[NodeId] = frozenset()


@dataclass(frozen=True, slots=True)
class FailAll:
    """Fail every pending add (and every later append) with ``error``."""

    error: StorageError


Effect = SendAdd | CompleteAdds | FindNodes | WriteSegment | FailAll

NO_EFFECTS_LIST: list[Effect] = []  # shared "nothing to do" result of the hot path; never mutated


def apply_segment(current: LedgerMetadata, change: WriteSegment) -> LedgerMetadata:
    """The metadata after ``change``; the modify step of the CAS loop.

    Raises Fenced when the ledger is no longer OPEN (someone is recovering or
    closed it) and MetadataConflict when the last ensemble moved under us."""
    if current.state is not LedgerState.OPEN:
        raise Fenced(f"ledger {current.ledger_id} is {current.state.value}")
    last = current.segments[-1]
    if last.ensemble != change.old_ensemble:
        raise MetadataConflict(f"ledger {current.ledger_id}: last ensemble changed concurrently")
    new = Segment(change.first_entry_id, change.ensemble)
    if last.first_entry_id == change.first_entry_id:  # nothing was written to the old one
        segments = (*current.segments[:-1], new)
    else:
        assert last.first_entry_id < change.first_entry_id
        old = Segment(last.first_entry_id, last.ensemble, last.missing | change.missing)
        segments = (*current.segments[:-1], old, new)
    return current.with_changes(segments=segments)
