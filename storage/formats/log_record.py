"""A topic's ledger list as stored in etcd under ``coordination.keys.managed_log`` (pure).

Owns: ``LedgerInfo`` (one ledger of a topic's log as listed there) and the JSON
codec of the whole value, ``{"ledgers": [...], "createdMs": ..., ...}``
(docs/decisions/0005). Rule: the gateway that owns the topic writes it; Spark
and admin readers only read it. Ledgers are listed in ascending id order, the
last one is the open ledger (``entries`` 0 until it closes); unknown fields are
kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    ledger_id: int
    entries: int = 0  # confirmed entries (for the open ledger: 0 until it closes, as Pulsar shows it)
    size: int = 0  # bytes
    timestamp_ms: int = 0  # when the ledger was closed (0 while open)
    messages: int = 0  # messages in its entries (0 = unknown: closed by recovery)

    def to_json(self) -> dict[str, Any]:
        return {
            "ledgerId": self.ledger_id,
            "entries": self.entries,
            "size": self.size,
            "timestamp": self.timestamp_ms,
            "messages": self.messages,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LedgerInfo:
        return cls(
            int(data["ledgerId"]),
            int(data["entries"]),
            int(data["size"]),
            int(data["timestamp"]),
            int(data.get("messages", 0)),
        )


def encode_state(ledgers: list[LedgerInfo], created_ms: int, extra: dict[str, Any]) -> bytes:
    return orjson.dumps({"ledgers": [info.to_json() for info in ledgers], "createdMs": created_ms, **extra})


def decode_state(raw: bytes) -> tuple[list[LedgerInfo], int, dict[str, Any]]:
    """(ledgers, created ms, the other fields) of a stored value."""
    data = orjson.loads(raw)
    ledgers = [LedgerInfo.from_json(item) for item in data.get("ledgers", [])]
    created_ms = int(data.get("createdMs", 0))
    extra = {k: v for k, v in data.items() if k not in ("ledgers", "createdMs")}
    return ledgers, created_ms, extra
