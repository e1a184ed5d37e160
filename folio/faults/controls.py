"""Ledger-level fencing scenarios whose histories the checkers judge: the controls
that must fail when a node's fencing is switched off, and their safe twins.

Owns: two scenarios on real node processes (a ``FaultCluster`` without
gateways), each recorded as a history in the format of ``checkers.py``:
- ``zombie``: writer A appends; B opens the ledger with recovery (fence, close);
  A keeps appending. Every add A gets acked after the close is a zombie write:
  its id lies past the closed ledger's end, so ``lost`` counts it;
- ``deleted``: B recovers A's ledger (closed empty) and deletes it; once the
  nodes saw the deletion, A appends. An ack there is a write into a ledger no
  log holds (``lost`` again).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import orjson

from coordination.etcd_store import connect
from folio.faults.clients import payload
from folio.faults.cluster import ClusterConfig, FaultCluster
from folio.faults.history import History
from storage.client.api import LedgerClient
from storage.client.writer import LedgerWriter

APPEND_TIMEOUT_S = 5.0
DELETION_SEEN_S = 2.0  # nodes learn of a deletion from an etcd watch


async def _append(history: History, writer: LedgerWriter, seq: int) -> None:
    history.record("invoke", "publish", process="A", topic="ledger", seq=seq)
    try:
        entry_id = await asyncio.wait_for(writer.append(payload("A", seq, None)), APPEND_TIMEOUT_S)
    except Exception as exc:  # Fenced (as it must be), or a timeout
        history.record("fail", "publish", process="A", topic="ledger", seq=seq, error=repr(exc)[:200])
        return
    history.record(
        "ok", "publish", process="A", topic="ledger", seq=seq, id=f"{writer.ledger_id}:{entry_id}:-1:-1"
    )


async def _read_back(history: History, client: LedgerClient, ledger_id: int) -> None:
    """The final read: the ledger as its log would serve it (nothing, once deleted)."""
    if ledger_id not in await client.list_ledgers():
        return
    reader = await client.open(ledger_id)
    last = reader.metadata.last_entry_id
    for entry_id, data in enumerate(await reader.read_range(0, last) if last >= 0 else []):
        value = orjson.loads(data)
        history.record(
            "ok",
            "read",
            process="reader",
            topic="ledger",
            producer=value["p"],
            seq=value["s"],
            key=None,
            id=f"{ledger_id}:{entry_id}:-1:-1",
        )


async def fencing_scenario(
    root: Path, scenario: str, node_args: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """Run ``zombie`` or ``deleted`` on 3 fresh nodes; returns the history."""
    cluster = FaultCluster(ClusterConfig(root, gateways=0, node_args=node_args))
    history = History(root / "history.jsonl")
    await asyncio.to_thread(cluster.start)
    stores = []
    try:
        assert cluster.etcd is not None
        stores = [await connect(cluster.etcd.endpoint) for _ in range(2)]
        a, b = LedgerClient(stores[0], seed=1), LedgerClient(stores[1], seed=2)
        writer = await a.create(ensemble_size=3, write_quorum=3, ack_quorum=2)
        before = 5 if scenario == "zombie" else 0  # the deleted ledger is closed empty
        for seq in range(before):
            await _append(history, writer, seq)
        await b.open(writer.ledger_id, recover=True)  # fences the nodes, closes the ledger
        if scenario == "deleted":
            await b.delete(writer.ledger_id)
            await asyncio.sleep(DELETION_SEEN_S)
        for seq in range(before, before + 5):
            await _append(history, writer, seq)
        await _read_back(history, b, writer.ledger_id)
        with contextlib.suppress(Exception):
            await writer.abandon()
        await a.close()
        await b.close()
        return history.ops
    finally:
        history.close()
        for store in stores:
            with contextlib.suppress(Exception):
                await store.close()
        await asyncio.to_thread(cluster.stop)
