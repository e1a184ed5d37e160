"""Value types of the storage layer: ids, ledger metadata, ensembles (pure).

Owns: ``LedgerMetadata`` and its JSON form in etcd (docs/decisions/0003).
Rule (BookKeeper): an entry uses the segment with the greatest
``first_entry_id`` <= its id; metadata is only ever changed by CAS.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import NewType

import orjson

LedgerId = NewType("LedgerId", int)
EntryId = NewType("EntryId", int)
NodeId = str  # "host:port" of a storage node

NO_ENTRY = -1  # LAC / last entry id of an empty ledger


class LedgerState(enum.Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


@dataclass(frozen=True, slots=True)
class Segment:
    first_entry_id: int
    ensemble: tuple[NodeId, ...]
    # members that may lack some of their entries of this segment: they failed while it
    # was written (the writer went on without them); the auditor copies them back
    missing: frozenset[NodeId] = frozenset()


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    state: LedgerState
    segments: tuple[Segment, ...]
    last_entry_id: int = NO_ENTRY  # set when CLOSED
    length: int = 0  # payload bytes, set when CLOSED
    ctime_ms: int = 0
    custom: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1
        assert self.segments and self.segments[0].first_entry_id == 0
        assert all(len(s.ensemble) == self.ensemble_size for s in self.segments)

    def segment_for(self, entry_id: int) -> Segment:
        chosen = self.segments[0]
        for segment in self.segments:
            if segment.first_entry_id <= entry_id:
                chosen = segment
            else:
                break
        return chosen

    def write_set(self, entry_id: int) -> tuple[NodeId, ...]:
        """The Qw nodes holding ``entry_id`` (round-robin striping from e mod E)."""
        ensemble = self.segment_for(entry_id).ensemble
        e = self.ensemble_size
        return tuple(ensemble[(entry_id + i) % e] for i in range(self.write_quorum))

    @property
    def last_ensemble(self) -> tuple[NodeId, ...]:
        return self.segments[-1].ensemble

    def with_changes(self, **changes: object) -> LedgerMetadata:
        return replace(self, **changes)  # type: ignore[arg-type]

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "ledgerId": self.ledger_id,
                "ensembleSize": self.ensemble_size,
                "writeQuorum": self.write_quorum,
                "ackQuorum": self.ack_quorum,
                "state": self.state.value,
                "segments": [_segment_json(s) for s in self.segments],
                "lastEntryId": self.last_entry_id,
                "length": self.length,
                "ctimeMs": self.ctime_ms,
                "custom": self.custom,
            }
        )

    @staticmethod
    def from_json(data: bytes) -> LedgerMetadata:
        raw = orjson.loads(data)
        return LedgerMetadata(
            ledger_id=int(raw["ledgerId"]),
            ensemble_size=int(raw["ensembleSize"]),
            write_quorum=int(raw["writeQuorum"]),
            ack_quorum=int(raw["ackQuorum"]),
            state=LedgerState(raw["state"]),
            segments=tuple(
                Segment(
                    int(s["firstEntryId"]),
                    tuple(str(n) for n in s["ensemble"]),
                    frozenset(str(n) for n in s.get("missing", ())),
                )
                for s in raw["segments"]
            ),
            last_entry_id=int(raw["lastEntryId"]),
            length=int(raw["length"]),
            ctime_ms=int(raw.get("ctimeMs", 0)),
            custom={str(k): str(v) for k, v in raw.get("custom", {}).items()},
        )


def _segment_json(segment: Segment) -> dict[str, object]:
    out: dict[str, object] = {"firstEntryId": segment.first_entry_id, "ensemble": list(segment.ensemble)}
    if segment.missing:
        out["missing"] = sorted(segment.missing)
    return out


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What a storage node publishes in etcd under its lease."""

    node_id: NodeId
    address: str  # host:port of the wire protocol
    metrics_address: str  # host:port of /metrics
    free_bytes: int
    total_bytes: int
    load: float  # adds+reads per second, smoothed
    read_only: bool  # refuses adds: disk nearly full, or being decommissioned
    ledger_count: int = 0
    draining: bool = False  # being decommissioned: takes no new ledgers (docs/decisions/0020)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "nodeId": self.node_id,
                "address": self.address,
                "metricsAddress": self.metrics_address,
                "freeBytes": self.free_bytes,
                "totalBytes": self.total_bytes,
                "load": self.load,
                "readOnly": self.read_only,
                "ledgerCount": self.ledger_count,
                "draining": self.draining,
            }
        )

    @staticmethod
    def from_json(data: bytes) -> NodeInfo:
        raw = orjson.loads(data)
        return NodeInfo(
            node_id=str(raw["nodeId"]),
            address=str(raw["address"]),
            metrics_address=str(raw.get("metricsAddress", "")),
            free_bytes=int(raw["freeBytes"]),
            total_bytes=int(raw["totalBytes"]),
            load=float(raw["load"]),
            read_only=bool(raw["readOnly"]),
            ledger_count=int(raw.get("ledgerCount", 0)),
            draining=bool(raw.get("draining", False)),
        )
