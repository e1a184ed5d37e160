"""``folio status``: members, ledgers, under-replication and auditor progress.

Owns: reading cluster state from etcd and printing it; writes nothing.
"""

from __future__ import annotations

import orjson

from coordination import keys
from coordination.etcd_store import connect
from storage.types import LedgerMetadata, LedgerState, NodeInfo


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


async def collect(endpoint: str, namespace: str = "") -> dict[str, object]:
    store = await connect(endpoint, namespace=namespace)
    try:
        nodes = [NodeInfo.from_json(kv.value) for kv in await store.list_prefix(keys.NODES)]
        ledgers = [LedgerMetadata.from_json(kv.value) for kv in await store.list_prefix(keys.LEDGERS)]
        under = await store.list_prefix(keys.UNDER_REPLICATED)
        progress_kv = await store.get(keys.RECOVERY_STATUS)
        auditors = await store.list_prefix(keys.election("auditor"))
    finally:
        await store.close()
    live = {n.node_id for n in nodes}
    return {
        "nodes": nodes,
        "ledgers": ledgers,
        "under_replicated": [
            keys.ledger_id_from_key(kv.key.replace(keys.UNDER_REPLICATED, keys.LEDGERS)) for kv in under
        ],
        "progress": orjson.loads(progress_kv.value) if progress_kv else None,
        "auditor": min(auditors, key=lambda kv: kv.create_revision).value.decode() if auditors else None,
        "missing": sorted({n for m in ledgers for s in m.segments for n in s.ensemble} - live),
    }


async def status(endpoint: str, ledger_limit: int, namespace: str = "") -> int:
    state = await collect(endpoint, namespace)
    nodes: list[NodeInfo] = state["nodes"]  # type: ignore[assignment]
    ledgers: list[LedgerMetadata] = state["ledgers"]  # type: ignore[assignment]
    print(f"etcd {endpoint}")
    print(f"\nstorage nodes ({len(nodes)} live)")
    for node in sorted(nodes, key=lambda n: n.node_id):
        mode = "read-only" if node.read_only else "writable"
        print(
            f"  {node.node_id:<22} {mode:<9} free {_gib(node.free_bytes)} of {_gib(node.total_bytes)}"
            f"  load {node.load:.0f}/s  ledgers {node.ledger_count}"
        )
    for node_id in state["missing"]:  # type: ignore[attr-defined]
        print(f"  {node_id:<22} GONE (named by ledger ensembles, not registered)")
    counts = {s: sum(1 for m in ledgers if m.state is s) for s in LedgerState}
    print(f"\nledgers: {len(ledgers)} ({', '.join(f'{s.value} {c}' for s, c in counts.items())})")
    for m in sorted(ledgers, key=lambda m: -m.ledger_id)[:ledger_limit]:
        ensembles = " | ".join(f"{s.first_entry_id}:{','.join(s.ensemble)}" for s in m.segments)
        last = m.last_entry_id if m.state is LedgerState.CLOSED else "-"
        print(
            f"  {m.ledger_id:>8} {m.state.value:<11} E{m.ensemble_size}/Qw{m.write_quorum}/Qa{m.ack_quorum}"
            f" last {last}  [{ensembles}]"
        )
    under: list[int] = state["under_replicated"]  # type: ignore[assignment]
    print(f"\nunder-replicated ledgers: {len(under)}" + (f" {under[:20]}" if under else ""))
    print(f"auditor: {state['auditor'] or 'none elected'}")
    if state["progress"]:
        print(f"recovery progress: {orjson.dumps(state['progress']).decode()}")
    return 0
