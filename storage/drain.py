"""Decommissioning a storage node: the drain record and its state machine (pure).

Owns: ``DrainState``, ``DrainRecord`` (the JSON value of ``keys.drain(node_id)``,
docs/decisions/0020) and the decisions on it: what a node still holds, the
progress of its drain, when the drain is finished and when an idle writer's
open ledger on it may be fenced. Rules (BookKeeper's decommission, docs/membership.md):
- absent -> DRAINING (an operator asks) -> DRAINED (the auditor: no ledger names
  the node and the node refuses adds) -> absent (the operator clears the record
  of a node that has left); DRAINING -> absent is a cancel; nothing else;
- a draining node takes no new ledger and no replacement (storage.client.placement)
  and refuses adds; the auditor copies its fixed fragments to other nodes;
- a ledger still open on it is fenced only after ``fence_grace_ms``: an active
  writer moves off by itself at its next add (the node refuses it), only an idle
  one is closed under it;
- times in the record are wall-clock milliseconds (written by a gateway, read by
  the auditor: another process, maybe another machine);
- bytes are estimated from closed ledgers' lengths (an open ledger's size is not in
  its metadata): ``bytesTotal`` is a floor that grows as ledgers close.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace

import orjson

from storage.types import LedgerMetadata, LedgerState, NodeId

DEFAULT_FENCE_GRACE_MS = 10_000


class DrainState(enum.Enum):
    DRAINING = "draining"  # no new ledgers; its fragments are being copied elsewhere
    DRAINED = "drained"  # no ledger names it: it may leave, its data dir may be deleted


@dataclass(frozen=True, slots=True)
class Holdings:
    """What ledger metadata still places on one node."""

    ledgers: int
    bytes: int


@dataclass(frozen=True, slots=True)
class DrainRecord:
    node_id: NodeId
    state: DrainState
    requested_ms: int
    ledgers_total: int
    bytes_total: int
    ledgers_done: int = 0
    bytes_done: int = 0
    updated_ms: int = 0
    drained_ms: int = 0

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "nodeId": self.node_id,
                "state": self.state.value,
                "requestedMs": self.requested_ms,
                "ledgersTotal": self.ledgers_total,
                "ledgersDone": self.ledgers_done,
                "bytesTotal": self.bytes_total,
                "bytesDone": self.bytes_done,
                "updatedMs": self.updated_ms,
                "drainedMs": self.drained_ms,
            }
        )

    @staticmethod
    def from_json(data: bytes) -> DrainRecord:
        raw = orjson.loads(data)
        return DrainRecord(
            node_id=str(raw["nodeId"]),
            state=DrainState(raw["state"]),
            requested_ms=int(raw["requestedMs"]),
            ledgers_total=int(raw.get("ledgersTotal", 0)),
            bytes_total=int(raw.get("bytesTotal", 0)),
            ledgers_done=int(raw.get("ledgersDone", 0)),
            bytes_done=int(raw.get("bytesDone", 0)),
            updated_ms=int(raw.get("updatedMs", 0)),
            drained_ms=int(raw.get("drainedMs", 0)),
        )


def _entries_on(metadata: LedgerMetadata, index: int, node: NodeId) -> int:
    """How many entries of closed segment ``index`` are written on ``node``."""
    segments = metadata.segments
    first = segments[index].first_entry_id
    last = segments[index + 1].first_entry_id - 1 if index + 1 < len(segments) else metadata.last_entry_id
    position = segments[index].ensemble.index(node)
    e, qw = metadata.ensemble_size, metadata.write_quorum
    return sum(1 for x in range(first, last + 1) if (position - x) % e < qw)


def holdings(ledgers: Iterable[LedgerMetadata], node: NodeId) -> Holdings:
    """Ledgers whose ensembles name ``node``, and the bytes of theirs it holds
    (closed ledgers: entries on it x the ledger's mean entry size)."""
    count = 0
    size = 0
    for metadata in ledgers:
        named = [i for i, s in enumerate(metadata.segments) if node in s.ensemble]
        if not named:
            continue
        count += 1
        entries = metadata.last_entry_id + 1
        if metadata.state is not LedgerState.CLOSED or entries <= 0:
            continue
        on_node = sum(_entries_on(metadata, i, node) for i in named)
        size += metadata.length * on_node // entries
    return Holdings(count, size)


def start(node: NodeId, held: Holdings, now_ms: int) -> DrainRecord:
    """The record an operator's decommission request writes."""
    return DrainRecord(node, DrainState.DRAINING, now_ms, held.ledgers, held.bytes, updated_ms=now_ms)


def progress(record: DrainRecord, held: Holdings, now_ms: int) -> DrainRecord:
    """``record`` with done/total from what the node still holds (a ledger deleted
    meanwhile counts as done; totals grow when more turns up than was counted)."""
    ledgers_total = max(record.ledgers_total, record.ledgers_done + held.ledgers)
    bytes_total = max(record.bytes_total, held.bytes)
    return replace(
        record,
        ledgers_total=ledgers_total,
        ledgers_done=ledgers_total - held.ledgers,
        bytes_total=bytes_total,
        bytes_done=bytes_total - held.bytes,
        updated_ms=now_ms,
    )


def finished(record: DrainRecord, held: Holdings, refuses_adds: bool) -> bool:
    """May a DRAINING node be declared DRAINED? Only when no ledger names it and it
    refuses adds (or is not registered): nothing can be written to it any more."""
    return record.state is DrainState.DRAINING and held.ledgers == 0 and refuses_adds


def drained(record: DrainRecord, now_ms: int) -> DrainRecord:
    return replace(record, state=DrainState.DRAINED, drained_ms=now_ms, updated_ms=now_ms)


def advance(stored: DrainRecord, held: Holdings, refuses_adds: bool, now_ms: int) -> DrainRecord | None:
    """The auditor's update of a stored record after a pass: progress, and DRAINED
    when ``finished``; None when it is not DRAINING (nothing to do)."""
    if stored.state is not DrainState.DRAINING:
        return None
    updated = progress(stored, held, now_ms)
    return drained(updated, now_ms) if finished(updated, held, refuses_adds) else updated


def fence_due(record: DrainRecord, now_ms: int, grace_ms: int = DEFAULT_FENCE_GRACE_MS) -> bool:
    """May the auditor fence a ledger still open on this draining node?"""
    return record.state is DrainState.DRAINING and now_ms - record.requested_ms >= grace_ms


def draining_nodes(records: Iterable[DrainRecord]) -> frozenset[NodeId]:
    """Nodes that take no new ledgers: draining, or drained and about to leave."""
    return frozenset(r.node_id for r in records)
