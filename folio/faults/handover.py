"""Single-fault partition scenarios whose unavailability is bounded: one cut held
for a long while on a whole cluster in network namespaces (``network.py``), with
one REST producer publishing through each gateway, then a heal and a final read.

Owns: ``cut_owner_from_nodes``: the owner of a topic is cut from two of the
three storage nodes (both ways) for ``hold_s`` - it can no longer reach a write
quorum, the other gateway can (or, ``every_gateway``, neither can: nobody may
hand anything over then). The history (format of ``checkers.py``) holds
every publish, the fault's start and heal, and the final read; ``Outcome`` adds
when each producer was acknowledged again after the cut and which gateway the
lookup named at the end of the cut. Rule: the gateway cut from storage must hand
the topic over within the lease TTL plus a few seconds (docs/reliability.md §6).

And ``cut_owner_from_peer``: the packets of a partition's owner to the other gateway
are dropped (one way: the other's connections to it hang, its established ones
stall) while a WebSocket producer of the partitioned topic is relayed through the
other gateway and a REST publish to the partition is sent there: ``PeerOutcome``
says how long each client was held before it was told to go elsewhere.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import websockets
from websockets.exceptions import ConnectionClosed

from folio.faults.clients import normal_id, payload, read_topics
from folio.faults.cluster import ClusterConfig, FaultCluster
from folio.faults.history import History
from folio.faults.run import POLICY_REFRESH_S

TOPIC = "storage-cut"
NAMESPACE = "public/handover"
LEASE_TTL_S = 3
PUBLISH_TIMEOUT_S = 2.0  # a publish held longer counts as unanswered (finer outage figures)
KIND = "cut-gateway-two-nodes"


@dataclass
class Outcome:
    ops: list[dict[str, Any]]
    back_after_s: dict[str, float] = field(default_factory=dict)  # producer -> first ack after the cut
    owner_at_cut: str = ""
    owner_before_heal: str = ""  # the lookup's answer just before the heal
    back_after_heal_s: dict[str, float] = field(default_factory=dict)  # producer -> first ack after the heal
    longest_gap_s: dict[str, float] = field(default_factory=dict)  # producer -> longest wait for an ack


async def _publish(history: History, http: httpx.AsyncClient, base: str, producer: str, seq: int) -> bool:
    history.record("invoke", "publish", process=producer, topic=TOPIC, seq=seq)
    body = {"producerName": producer, "messages": [{"payload": payload(producer, seq, None).decode()}]}
    try:
        response = await http.post(f"{base}/topics/persistent/{NAMESPACE}/{TOPIC}", json=body)
        results = response.json().get("messagePublishResults", []) if response.status_code == 200 else []
    except (httpx.HTTPError, ValueError) as exc:
        history.record("info", "publish", process=producer, topic=TOPIC, seq=seq, error=repr(exc)[:200])
        return False
    if len(results) == 1 and results[0].get("errorCode") == 0:
        message_id = normal_id(str(results[0]["messageId"]))
        history.record("ok", "publish", process=producer, topic=TOPIC, seq=seq, id=message_id)
        return True
    history.record("fail", "publish", process=producer, topic=TOPIC, seq=seq, error=response.text[:200])
    return False


async def _producer(
    history: History, http: httpx.AsyncClient, base: str, name: str, stop: asyncio.Event, acked: set[int]
) -> None:
    """Publish seq 0, 1, ... through ``base``, each resent (same seq) until acknowledged."""
    seq = 0
    while not stop.is_set():
        if await _publish(history, http, base, name, seq):
            acked.add(seq)
            seq += 1
        await asyncio.sleep(0.2)


async def _owner(http: httpx.AsyncClient, base: str) -> str:
    with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
        response = await http.get(f"{base}/lookup/v2/topic/persistent/{NAMESPACE}/{TOPIC}")
        return str(response.json()["httpUrl"])
    return ""


async def _prepare(http: httpx.AsyncClient, base: str) -> None:
    """The scenario's namespace, keeping every ledger (no subscription holds them: without
    retention a rolled ledger is trimmed, and the final read would miss it)."""
    response = await http.put(f"{base}/admin/v2/namespaces/{NAMESPACE}")
    assert response.status_code in (204, 409), response.text
    retention = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    response = await http.post(f"{base}/admin/v2/namespaces/{NAMESPACE}/retention", json=retention)
    assert response.status_code == 204, response.text
    await asyncio.sleep(POLICY_REFRESH_S)


async def cut_owner_from_nodes(
    root: Path, hold_s: float, *, every_gateway: bool = False, etcd_answers: bool = False
) -> Outcome:
    """Cut the topic's owner (``every_gateway``: both gateways) from nodes 0 and 1 for
    ``hold_s`` (``etcd_answers``: drop etcd's packets to the owner instead, its requests
    still arrive), publishing through both gateways; heal; read everything back."""
    cluster = FaultCluster(ClusterConfig(root, gateway_lease_ttl_s=LEASE_TTL_S, partitions=True))
    history = History(root / "history.jsonl")
    await asyncio.to_thread(cluster.start)
    try:
        urls = cluster.urls
        async with httpx.AsyncClient(timeout=PUBLISH_TIMEOUT_S) as http:
            await _prepare(http, urls[0])
            seq = 0
            while not await _publish(history, http, urls[0], "first", seq):  # creates the topic
                seq += 1
                await asyncio.sleep(0.5)
            owner_url = await _owner(http, urls[0])
            owner = urls.index(owner_url)
            other = 1 - owner
            stop = asyncio.Event()
            acked: dict[str, set[int]] = {"via-owner": set(), "via-other": set()}
            producers = [
                asyncio.create_task(_producer(history, http, urls[i], name, stop, acked[name]))
                for i, name in ((owner, "via-owner"), (other, "via-other"))
            ]
            await asyncio.sleep(2.0)
            assert cluster.network is not None
            cut_at = history.record("info", "fault", process="nemesis", kind=KIND, phase="start")["t"]
            if etcd_answers:
                cluster.network.cut("etcd", f"gateway{owner}")
            for gateway in () if etcd_answers else (0, 1) if every_gateway else (owner,):
                for node in ("node0", "node1"):
                    cluster.network.cut_both(f"gateway{gateway}", node)
            await asyncio.sleep(hold_s)
            owner_before_heal = await _owner(http, urls[other])
            cluster.network.heal()
            healed_at = history.record("info", "fault", process="nemesis", kind=KIND, phase="heal")["t"]
            await asyncio.sleep(3.0)
            stop.set()
            await asyncio.gather(*producers)
            want = {(p, s) for p, seqs in acked.items() for s in seqs} | {("first", seq)}
            await read_topics(history, urls[other], NAMESPACE, [TOPIC], want)
        back: dict[str, float] = {}  # the first ack of a publish sent after the cut
        sent: dict[tuple[str, int], float] = {}
        for op in history.ops:
            if op["f"] != "publish":
                continue
            value = (str(op["process"]), int(op["seq"]))
            if op["type"] == "invoke":
                sent[value] = op["t"]
            elif op["type"] == "ok" and sent.get(value, 0.0) > cut_at:
                back.setdefault(value[0], op["t"] - cut_at)
        after_heal: dict[str, float] = {}
        for op in history.ops:
            value = (str(op["process"]), int(op.get("seq", -1)))
            if op["f"] == "publish" and op["type"] == "ok" and sent.get(value, 0.0) > healed_at:
                after_heal.setdefault(str(op["process"]), op["t"] - healed_at)
        gaps: dict[str, float] = {}  # the longest time without an ack, from the cut on
        last: dict[str, float] = {}
        for op in history.ops:
            if op["f"] == "publish" and op["type"] == "ok" and op["process"] in acked:
                name = str(op["process"])
                gap = op["t"] - max(last.get(name, cut_at), cut_at)
                gaps[name] = max(gaps.get(name, 0.0), gap)
                last[name] = op["t"]
        return Outcome(history.ops, back, owner_url, owner_before_heal, after_heal, gaps)
    finally:
        history.close()
        await asyncio.to_thread(cluster.stop)


PARTITIONED = "peer-cut"


@dataclass
class PeerOutcome:
    ws_acked_before: int = 0  # the relayed producer's acks before the cut
    ws_told_after_s: float | None = None  # the relayed producer closed (or refused a send) after the cut
    ws_close_code: int | None = None
    rest_status: int = 0
    rest_answer_s: float = 0.0  # a REST publish sent through the cut gateway: time to its answer
    rest_retry_after: str | None = None


async def _ws_send(ws: Any, seq: int) -> None:
    body = base64.b64encode(payload("relayed", seq, None)).decode()
    await ws.send(orjson.dumps({"payload": body, "context": str(seq)}).decode())


async def cut_owner_from_peer(root: Path, hold_s: float) -> PeerOutcome:
    """Drop partition 0's owner's packets to the other gateway for ``hold_s`` while a
    producer of the partitioned topic is relayed through the other gateway."""
    cluster = FaultCluster(ClusterConfig(root, gateway_lease_ttl_s=LEASE_TTL_S, partitions=True))
    await asyncio.to_thread(cluster.start)
    outcome = PeerOutcome()
    try:
        urls = cluster.urls
        async with httpx.AsyncClient(timeout=60.0) as http:
            await _prepare(http, urls[0])
            topic = f"persistent/{NAMESPACE}/{PARTITIONED}"
            response = await http.put(f"{urls[0]}/admin/v2/{topic}/partitions", json=2)
            assert response.status_code in (204, 409), response.text
            part0 = f"{topic}-partition-0"
            body = {"messages": [{"payload": payload("rest", 0, None).decode()}]}
            while (await http.post(f"{urls[0]}/topics/{part0}", json=body)).status_code != 200:
                await asyncio.sleep(0.5)  # partition 0 is owned now
            owner = urls.index(str((await http.get(f"{urls[0]}/lookup/v2/topic/{part0}")).json()["httpUrl"]))
            other = 1 - owner
            ws_url = f"{urls[other].replace('http', 'ws', 1)}/ws/v2/producer/{topic}?producerName=relayed"
            async with websockets.connect(ws_url, open_timeout=10, close_timeout=1, ping_interval=None) as ws:
                seq = 0
                while outcome.ws_acked_before < 4:  # both partitions reached through the relay
                    await _ws_send(ws, seq)
                    seq += 1
                    reply = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
                    outcome.ws_acked_before += reply.get("result") == "ok"
                assert cluster.network is not None
                cut_at = time.monotonic()
                cluster.network.cut(f"gateway{owner}", f"gateway{other}")
                rest = asyncio.create_task(_rest_through(http, urls[other], part0, cut_at))
                end = cut_at + hold_s
                while time.monotonic() < end:
                    try:
                        await _ws_send(ws, seq)
                        seq += 1
                        reply = orjson.loads(await asyncio.wait_for(ws.recv(), 0.5))
                    except TimeoutError:
                        continue
                    except ConnectionClosed as exc:
                        outcome.ws_told_after_s = time.monotonic() - cut_at
                        outcome.ws_close_code = exc.rcvd.code if exc.rcvd is not None else None
                        break
                    if reply.get("result") not in (None, "ok"):  # an error: the client may go elsewhere
                        outcome.ws_told_after_s = time.monotonic() - cut_at
                        break
                outcome.rest_status, outcome.rest_answer_s, outcome.rest_retry_after = await rest
            cluster.network.heal()
        return outcome
    finally:
        await asyncio.to_thread(cluster.stop)


async def _rest_through(
    http: httpx.AsyncClient, base: str, topic: str, cut_at: float
) -> tuple[int, float, str | None]:
    """A REST publish sent through ``base`` once its pooled connections to peers expired."""
    await asyncio.sleep(3.0)
    sent = time.monotonic()
    body = {"messages": [{"payload": payload("rest", 1, None).decode()}]}
    try:
        response = await http.post(f"{base}/topics/{topic}", json=body)
    except httpx.HTTPError:
        return 0, time.monotonic() - sent, None
    return response.status_code, time.monotonic() - sent, response.headers.get("retry-after")
