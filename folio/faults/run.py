"""One fault run: start the cluster, run the workload under the nemesis, heal,
cold-restart the gateways, read everything back, check the history.

Owns: the run's order of phases and its workload table (which topics, which
producers and subscriptions). Rules: all randomness comes from the seed; the
final read goes through gateways started after the workload stopped (no entry
cache can hide a loss); the history file and every process log stay in the
run directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

from coordination import keys
from coordination.etcd_store import connect
from folio.faults import checkers
from folio.faults.clients import (
    Consumer,
    Gateways,
    HttpConsumer,
    Producer,
    RestProducer,
    WsProducer,
    read_topics,
)
from folio.faults.cluster import SYNC_LAG_MS, ClusterConfig, FaultCluster
from folio.faults.history import History
from folio.faults.nemesis import PARTITION_KINDS, FaultKind, Nemesis, schedule

DEFAULT_NS = "public/default"
DEDUP_NS = "public/dedup"
PARTITIONS = 3
POLICY_REFRESH_S = 2.5  # gateways re-read namespace policies every second


@dataclass(frozen=True)
class TopicPlan:
    namespace: str
    topic: str
    producers: tuple[tuple[str, int], ...]  # (ws|rest, keys)
    subtype: str
    consumers: int
    partitions: int = 0
    http_subtype: str = ""  # a second subscription ("http") read by an HTTP consumer

    @property
    def names(self) -> list[str]:
        if not self.partitions:
            return [self.topic]
        return [f"{self.topic}-partition-{i}" for i in range(self.partitions)]


WORKLOAD = (
    TopicPlan(DEFAULT_NS, "excl", (("ws", 0),), "Exclusive", 1),
    TopicPlan(DEFAULT_NS, "failover", (("rest", 0),), "Failover", 2),
    TopicPlan(DEFAULT_NS, "shared", (("ws", 0),), "Shared", 2, http_subtype="Shared"),
    TopicPlan(DEFAULT_NS, "keyshared", (("ws", 8),), "Key_Shared", 2),
    TopicPlan(DEFAULT_NS, "part", (("rest", 8),), "Shared", 2, partitions=PARTITIONS),
    TopicPlan(DEDUP_NS, "dedup", (("ws", 4), ("rest", 0)), "Exclusive", 1),
)

DEDUP_TOPICS = tuple(p.topic for p in WORKLOAD if p.namespace == DEDUP_NS)


@dataclass
class RunConfig:
    root: Path
    seed: int = 1
    faults: int = 50  # stop after this many faults...
    duration_s: float = 0.0  # ...or after this long (0: no time bound)
    interval: tuple[float, float] = (3.0, 7.0)
    hold_scale: float = 1.0  # shorter faults for the CI run
    kinds: tuple[FaultKind, ...] = tuple(FaultKind)
    node_args: tuple[str, ...] = ()
    gateway_args: tuple[str, ...] = ()  # e.g. a control's --unsafe-keep-serving-without-lease
    sync_lag_ms: int = SYNC_LAG_MS  # how long a node's fdatasync trails its write (power loss bites)
    lease_ttl_s: int = 5
    rate: float = 5.0  # messages/s per producer
    settle_s: float = 5.0
    drain_s: float = 30.0
    read_limit_s: float = 60.0  # the final read of a topic ends then, whatever is missing
    log: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        self.log.append(line)
        print(line, flush=True)


async def run(config: RunConfig) -> checkers.Result:
    config.root.mkdir(parents=True, exist_ok=True)
    history = History(config.root / "history.jsonl")
    cluster = FaultCluster(
        ClusterConfig(
            config.root,
            gateway_lease_ttl_s=config.lease_ttl_s,
            node_args=config.node_args,
            gateway_args=config.gateway_args,
            sync_lag_ms=config.sync_lag_ms,
            partitions=bool(PARTITION_KINDS & set(config.kinds)),
            etcd_members=3 if FaultKind.ETCD_MINORITY_SPLIT in config.kinds else 1,
        )
    )
    main = asyncio.current_task()
    assert main is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # stop everything it started, then exit
        loop.add_signal_handler(sig, main.cancel)
    try:
        await asyncio.to_thread(cluster.start)
        return await _run(config, cluster, history)
    finally:
        history.close()
        await asyncio.to_thread(cluster.stop)


async def _run(config: RunConfig, cluster: FaultCluster, history: History) -> checkers.Result:
    await _prepare(cluster.urls[0])
    gateways = Gateways(cluster.urls)
    stop_producing, drained, stop_consuming, stop_faults = (asyncio.Event() for _ in range(4))
    producers: list[Producer] = []
    consumers: list[Consumer] = []
    for n, plan in enumerate(WORKLOAD):
        for c in range(plan.consumers):
            consumers.append(
                Consumer(
                    history,
                    gateways,
                    plan.namespace,
                    plan.topic,
                    "sub",
                    plan.subtype,
                    f"c-{plan.topic}-{c}",
                    n + c,
                )
            )
        if plan.http_subtype:
            consumers.append(
                HttpConsumer(
                    history,
                    gateways,
                    plan.namespace,
                    plan.topic,
                    "http",
                    plan.http_subtype,
                    f"h-{plan.topic}",
                    n,
                )
            )
        for p, (kind, key_count) in enumerate(plan.producers):
            cls = WsProducer if kind == "ws" else RestProducer
            producers.append(
                cls(
                    history,
                    gateways,
                    plan.namespace,
                    plan.topic,
                    f"p-{plan.topic}-{kind}{p}",
                    keys=key_count,
                    sequence_ids=plan.namespace == DEDUP_NS,
                    rate=config.rate,
                    seed=config.seed * 100 + n + p,
                )
            )
    tasks = [asyncio.create_task(c.run(stop_consuming)) for c in consumers]
    tasks += [asyncio.create_task(p.run(stop_producing, drained)) for p in producers]
    sampler = asyncio.create_task(_sample_cursors(cluster, history, stop_consuming))
    await _warm_up(history)
    count = config.faults if not config.duration_s else 1_000_000
    faults = schedule(config.seed, count, config.interval, config.kinds, config.hold_scale)
    nemesis = Nemesis(
        cluster,
        history,
        [(p.namespace, p.topic) for p in WORKLOAD if not p.partitions],
        config.lease_ttl_s,
        config.say,
    )
    began = time.monotonic()
    if config.duration_s:
        asyncio.get_running_loop().call_later(config.duration_s, stop_faults.set)
    progress = asyncio.create_task(_progress(config, nemesis, history, stop_faults))
    await nemesis.run(faults, stop_faults)
    stop_faults.set()
    progress.cancel()
    config.say(f"faults done: {nemesis.done} in {time.monotonic() - began:.0f}s; healing")
    for component, code in await asyncio.to_thread(cluster.revive):
        history.record("info", "crash", process=component, code=code, after="end")
    history.record("info", "healed", process="nemesis")
    await asyncio.sleep(config.settle_s)
    stop_producing.set()
    drain_deadline = time.monotonic() + config.drain_s
    while any(p.unacked for p in producers) and time.monotonic() < drain_deadline:
        await asyncio.sleep(0.5)
    drained.set()
    stop_consuming.set()
    await asyncio.wait(tasks, timeout=15)
    sampler.cancel()
    unacked = sum(len(p.unacked) for p in producers)
    config.say(f"workload stopped ({unacked} messages never acked); cold-restarting the gateways")
    await asyncio.gather(*(asyncio.to_thread(g.stop) for g in cluster.gateways))
    await asyncio.gather(
        *(asyncio.to_thread(cluster.restart_gateway, i) for i in range(len(cluster.gateways)))
    )
    gateways.urls[:] = cluster.urls
    acked = {
        (op["process"], op["seq"], op["topic"])
        for op in history.ops
        if op["f"] == "publish" and op["type"] == "ok"
    }

    async def read_back(n: int, plan: TopicPlan) -> None:
        want = {(p, s) for p, s, t in acked if t == plan.topic}
        count = await read_topics(
            history, gateways.pick(n), plan.namespace, plan.names, want, limit_s=config.read_limit_s
        )
        config.say(
            f"final read {plan.namespace}/{plan.topic}: {count} messages, {len(want)} acked ones not found"
        )

    await asyncio.gather(*(read_back(n, plan) for n, plan in enumerate(WORKLOAD)))
    history.flush()
    return checkers.check(history.ops, dedup_topics=DEDUP_TOPICS)


async def _warm_up(history: History, at_least_s: float = 3.0, at_most_s: float = 60.0) -> None:
    """The nemesis starts once every topic has acked a publish (a loaded box may take a
    while to open the first sessions), after ``at_least_s`` and at the latest ``at_most_s``."""
    await asyncio.sleep(at_least_s)
    want = {plan.topic for plan in WORKLOAD}
    deadline = time.monotonic() + at_most_s
    while time.monotonic() < deadline:
        acked = {op["topic"] for op in history.ops if op["f"] == "publish" and op["type"] == "ok"}
        if want <= acked:
            return
        await asyncio.sleep(0.5)


async def _prepare(base: str) -> None:
    async with httpx.AsyncClient(timeout=30.0) as http:
        response = await http.put(f"{base}/admin/v2/namespaces/{DEDUP_NS}")
        assert response.status_code in (204, 409), response.text
        response = await http.post(f"{base}/admin/v2/namespaces/{DEDUP_NS}/deduplication", json=True)
        assert response.status_code == 204, response.text
        for namespace in (DEFAULT_NS, DEDUP_NS):  # keep consumed ledgers: the final read reads them all
            retention = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
            response = await http.post(f"{base}/admin/v2/namespaces/{namespace}/retention", json=retention)
            assert response.status_code == 204, response.text
        for plan in WORKLOAD:
            if plan.partitions:
                url = f"{base}/admin/v2/persistent/{plan.namespace}/{plan.topic}/partitions"
                response = await http.put(url, json=plan.partitions)
                assert response.status_code in (204, 409), response.text
    await asyncio.sleep(POLICY_REFRESH_S)


async def _sample_cursors(cluster: FaultCluster, history: History, stop: asyncio.Event) -> None:
    """Persisted mark-delete positions, read from etcd once a second (while it is up)."""
    assert cluster.etcd is not None
    store = await connect(cluster.etcd.endpoint)
    seen: dict[str, list[int]] = {}  # recorded only when it changes (a long run's history stays small)
    try:
        while not stop.is_set():
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    for kv in await store.list_prefix(keys.CURSORS):
                        topic_path, _, sub = kv.key[len(keys.CURSORS) :].rpartition("/")
                        mark = orjson.loads(kv.value)["cursor"]["markDelete"]
                        if seen.get(kv.key) == mark:
                            continue
                        seen[kv.key] = mark
                        history.record(
                            "ok", "cursor", process="sampler", topic=topic_path, sub=sub, mark=mark
                        )
            await asyncio.sleep(1.0)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(store.close(), 2)


async def _progress(config: RunConfig, nemesis: Nemesis, history: History, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await asyncio.sleep(30)
        acked = sum(1 for op in history.ops if op["f"] == "publish" and op["type"] == "ok")
        config.say(f"... {nemesis.done} faults, {acked} publish acks so far")
        history.flush()
