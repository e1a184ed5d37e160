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

And one on a whole cluster in network namespaces (``network.py``):
- ``zombie_owner``: the owner of a topic is cut from etcd while its clients
  still reach it; for three lease TTLs one producer publishes through it and one
  through the other gateway. With the owner keeping its lost lease
  (``--unsafe-keep-lease-on-loss``) and nodes that do not fence, both gateways
  acknowledge into ledgers of their own at once: ``dual_acks`` counts it.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import httpx
import orjson

from coordination.etcd_store import connect
from folio.faults.clients import normal_id, payload
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


ZOMBIE_TOPIC = "public/default/zombie"
ZOMBIE_LEASE_TTL_S = 3
ZOMBIE_WINDOW_TTLS = 3  # the cut lasts this many lease TTLs
# between two publishes of each publisher (each at its own pace): the zombie acks alongside
# its successor only from the successor's first ack until the zombie's topic closes, 0.1-0.8 s
# measured; with 0.1 s between rounds of both together, that window held no zombie ack in
# some runs
ZOMBIE_PUBLISH_GAP_S = 0.02


async def _publish(history: History, http: httpx.AsyncClient, base: str, producer: str, seq: int) -> bool:
    history.record("invoke", "publish", process=producer, topic="zombie", seq=seq)
    body = {"producerName": producer, "messages": [{"payload": payload(producer, seq, None).decode()}]}
    try:
        response = await http.post(f"{base}/topics/persistent/{ZOMBIE_TOPIC}", json=body)
        results = response.json().get("messagePublishResults", []) if response.status_code == 200 else []
    except (httpx.HTTPError, ValueError) as exc:
        history.record("info", "publish", process=producer, topic="zombie", seq=seq, error=repr(exc)[:200])
        return False
    if len(results) == 1 and results[0].get("errorCode") == 0:
        message_id = normal_id(str(results[0]["messageId"]))
        history.record("ok", "publish", process=producer, topic="zombie", seq=seq, id=message_id)
        return True
    history.record("fail", "publish", process=producer, topic="zombie", seq=seq, error=response.text[:200])
    return False


async def zombie_owner_scenario(root: Path, unsafe: bool) -> list[dict[str, Any]]:
    """Cut a topic's owner from etcd and publish through both gateways; returns the history."""
    cluster = FaultCluster(
        ClusterConfig(
            root,
            gateway_lease_ttl_s=ZOMBIE_LEASE_TTL_S,
            node_args=("--unsafe-no-fencing",) if unsafe else (),
            gateway_args=("--unsafe-keep-lease-on-loss",) if unsafe else (),
            partitions=True,
        )
    )
    history = History(root / "history.jsonl")
    await asyncio.to_thread(cluster.start)
    try:
        urls = cluster.urls
        async with httpx.AsyncClient(timeout=5.0) as http:
            seq = 0
            while not await _publish(history, http, urls[0], "first", seq):  # creates the topic
                seq += 1
                await asyncio.sleep(0.5)
            response = await http.get(f"{urls[0]}/lookup/v2/topic/persistent/{ZOMBIE_TOPIC}")
            owner = urls.index(str(response.json()["httpUrl"]))
            other = 1 - owner
            assert cluster.network is not None
            cluster.network.cut_both(f"gateway{owner}", "etcd")
            history.record("info", "fault", process="nemesis", kind="cut-gateway-etcd", phase="start")
            loop = asyncio.get_running_loop()
            end = loop.time() + ZOMBIE_WINDOW_TTLS * ZOMBIE_LEASE_TTL_S

            async def publisher(url: str, process: str) -> None:  # each at its own pace
                seq = 0
                while loop.time() < end:
                    await _publish(history, http, url, process, seq)
                    seq += 1
                    await asyncio.sleep(ZOMBIE_PUBLISH_GAP_S)

            await asyncio.gather(publisher(urls[owner], "via-owner"), publisher(urls[other], "via-other"))
            cluster.network.heal()
            history.record("info", "fault", process="nemesis", kind="cut-gateway-etcd", phase="heal")
        return history.ops
    finally:
        history.close()
        await asyncio.to_thread(cluster.stop)
