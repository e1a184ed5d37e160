"""The etcd key schema: one function per key family (see docs/decisions/0003).

Owns: every key Folio writes to etcd. Nothing else builds key strings.
"""

from __future__ import annotations

ROOT = "/folio"

NODES = f"{ROOT}/nodes/"  # storage nodes, under their lease: JSON NodeInfo
GATEWAYS = f"{ROOT}/gateways/"  # gateways, under their lease
LEDGERS = f"{ROOT}/ledgers/"  # ledger metadata, JSON LedgerMetadata
LEDGER_ID_COUNTER = f"{ROOT}/ledger-id"  # next unreserved ledger id, decimal text; CAS-raised by a block
UNDER_REPLICATED = f"{ROOT}/under-replicated/"  # ledger id -> JSON {"nodes": [...]}
ELECTIONS = f"{ROOT}/elections/"  # <name>/ -> candidates under lease
RECOVERY_STATUS = f"{ROOT}/recovery-status"  # auditor's progress, JSON
NODES_KNOWN = (
    f"{ROOT}/nodes-known/"  # every storage node that ever registered (no lease; docs/decisions/0007)
)
DRAINS = f"{ROOT}/drains/"  # storage nodes being decommissioned (no lease; docs/decisions/0020)


def node(node_id: str) -> str:
    return f"{NODES}{node_id}"


def node_known(node_id: str) -> str:
    return f"{NODES_KNOWN}{node_id}"


def drain(node_id: str) -> str:
    return f"{DRAINS}{node_id}"


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


# ---------------------------------------------------------------- gateways (docs/decisions/0005)
# Names below are validated by gateway.names (no "/" inside a segment).

TENANTS = f"{ROOT}/tenants/"  # <tenant> -> JSON TenantInfo
NAMESPACES = f"{ROOT}/namespaces/"  # <tenant>/<ns> -> JSON policies
PARTITIONED = f"{ROOT}/partitioned/"  # <domain>/<tenant>/<ns>/<topic> -> {"partitions": N}
MANAGED_LOGS = f"{ROOT}/logs/"  # <domain>/<tenant>/<ns>/<topic> -> JSON managed-log state
CURSORS = f"{ROOT}/cursors/"  # <domain>/<tenant>/<ns>/<topic>/<sub> -> JSON cursor state
DEDUP = f"{ROOT}/dedup/"  # <domain>/<tenant>/<ns>/<topic> -> JSON dedup snapshot
SCHEMAS = f"{ROOT}/schemas/"  # <domain>/<tenant>/<ns>/<topic> -> JSON schema versions (ADR 0009)
WEBHOOKS = f"{ROOT}/webhooks/"  # <domain>/<tenant>/<ns>/<topic>/<sub> -> JSON webhook settings
BUNDLES = f"{ROOT}/bundles/"  # <tenant>/<ns>/<0xlo_0xhi> -> owner gateway id, under its lease
LOAD_MANAGER = "load-manager"  # election name of the gateways' load manager


def tenant(name: str) -> str:
    return f"{TENANTS}{name}"


def namespace(tenant_name: str, ns: str) -> str:
    return f"{NAMESPACES}{tenant_name}/{ns}"


def partitioned(topic_path: str) -> str:
    return f"{PARTITIONED}{topic_path}"


def managed_log(topic_path: str) -> str:
    return f"{MANAGED_LOGS}{topic_path}"


def cursors_of(topic_path: str) -> str:
    return f"{CURSORS}{topic_path}/"


def cursor(topic_path: str, subscription: str) -> str:
    return f"{CURSORS}{topic_path}/{subscription}"


def webhooks_of(topic_path: str) -> str:
    return f"{WEBHOOKS}{topic_path}/"


def webhook(topic_path: str, subscription: str) -> str:
    return f"{WEBHOOKS}{topic_path}/{subscription}"


def dedup(topic_path: str) -> str:
    return f"{DEDUP}{topic_path}"


def schemas(topic_path: str) -> str:
    """Every schema version of a topic (of a partitioned topic's base name: partitions share it)."""
    return f"{SCHEMAS}{topic_path}"


def bundles_of(tenant_name: str, ns: str) -> str:
    return f"{BUNDLES}{tenant_name}/{ns}/"


def bundle(tenant_name: str, ns: str, bundle_range: str) -> str:
    return f"{BUNDLES}{tenant_name}/{ns}/{bundle_range}"


# bundle ownership protocol (gateway/ownership/load_manager.py): both under the load manager's lease
BUNDLE_ASSIGN = f"{ROOT}/bundle-assign/"  # <tenant>/<ns>/<bundle> -> JSON {"gateway", "atMs"}
BUNDLE_UNLOAD = f"{ROOT}/bundle-unload/"  # <tenant>/<ns>/<bundle> -> JSON {"from", "to", "ownerRevision"}


def bundle_assignment(tenant_name: str, ns: str, bundle_range: str) -> str:
    return f"{BUNDLE_ASSIGN}{tenant_name}/{ns}/{bundle_range}"


def bundle_unload(tenant_name: str, ns: str, bundle_range: str) -> str:
    return f"{BUNDLE_UNLOAD}{tenant_name}/{ns}/{bundle_range}"


# ---------------------------------------------------------------- analytics (docs/decisions/0012)
ANALYTICS = f"{ROOT}/analytics/"
ANALYTICS_RUN = f"{ANALYTICS}run"  # JSON run record (coordination.analytics_run): requests, progress
ANALYTICS_SETTINGS = f"{ANALYTICS}settings"  # JSON cluster settings {"intervalSeconds"}
ANALYTICS_SUMMARY = f"{ANALYTICS}summary"  # JSON cluster summary of the last run
ANALYTICS_SCHEDULE = f"{ANALYTICS}schedule"  # JSON {"covered": {tenant/ns: ms}}: when each was last run
ANALYTICS_TOPICS = f"{ANALYTICS}topics/"  # <topic path> -> JSON results + folded state + positions
ANALYTICS_QUERIES = f"{ANALYTICS}queries/"  # <zero-padded id> -> JSON SQL query and its answer
ANALYTICS_ELECTION = "analytics"  # election name of the analytics services


def analytics_topic(topic_path: str) -> str:
    return f"{ANALYTICS_TOPICS}{topic_path}"


def analytics_query(query_id: int) -> str:
    return f"{ANALYTICS_QUERIES}{query_id:020d}"
