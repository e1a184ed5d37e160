"""The etcd key schema: one function per key family (see docs/decisions/0003).

Owns: every key Folio writes to etcd. Nothing else builds key strings.
"""

from __future__ import annotations

ROOT = "/folio"

NODES = f"{ROOT}/nodes/"  # storage nodes, under their lease: JSON NodeInfo
GATEWAYS = f"{ROOT}/gateways/"  # gateways, under their lease
LEDGERS = f"{ROOT}/ledgers/"  # ledger metadata, JSON LedgerMetadata
LEDGER_ID_COUNTER = f"{ROOT}/ledger-id"  # next ledger id, decimal text, CAS-incremented
UNDER_REPLICATED = f"{ROOT}/under-replicated/"  # ledger id -> JSON {"nodes": [...]}
ELECTIONS = f"{ROOT}/elections/"  # <name>/ -> candidates under lease
RECOVERY_STATUS = f"{ROOT}/recovery-status"  # auditor's progress, JSON


def node(node_id: str) -> str:
    return f"{NODES}{node_id}"


def gateway(gateway_id: str) -> str:
    return f"{GATEWAYS}{gateway_id}"


def ledger(ledger_id: int) -> str:
    # zero-padded so prefix listings come back in ledger-id order
    return f"{LEDGERS}{ledger_id:020d}"


def ledger_id_from_key(key: str) -> int:
    return int(key[len(LEDGERS) :])


def under_replicated(ledger_id: int) -> str:
    return f"{UNDER_REPLICATED}{ledger_id:020d}"


def election(name: str) -> str:
    return f"{ELECTIONS}{name}/"
