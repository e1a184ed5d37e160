"""The nemesis: a seeded schedule of real process faults, and its executor.

Owns: the closed set of fault kinds, the schedule (pure: seed in, faults out)
and how each fault is done and healed on a ``FaultCluster``. Rules: faults come
one after another (start, hold, heal), a new one ``interval`` seconds after the
previous start (or as soon as the previous is healed); kinds are drawn in
shuffled rounds, so any run of ``len(FaultKind)`` faults has every kind; each
start and heal goes to the history with its targets, so unavailability is
measured per kind; after every heal, components that exited on their own are
started again and the exit is recorded (``crash``). A node fault notes
``restart`` (and how many nodes are ``down``) as it starts them again, so an
ack while too many were dead stands out.
"""

from __future__ import annotations

import asyncio
import enum
import random
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from folio.faults import powerloss
from folio.faults.cluster import DISK_FULL_FREE, PLENTY_FREE, FaultCluster
from folio.faults.history import History

STEP_DOWN_WAIT_S = 10.0  # how long a woken owner is watched for its step-down
STEPPED_DOWN = "stepped down - its topics are dropped"  # the gateway's log line (gateway.api.tenure)


class FaultKind(enum.StrEnum):
    KILL_NODE = "kill-node"
    KILL_TWO_NODES = "kill-two-nodes"
    KILL_ALL_NODES = "kill-all-nodes"
    POWER_LOSS_NODE = "power-loss-node"
    POWER_LOSS_TWO_NODES = "power-loss-two-nodes"
    POWER_LOSS_ALL_NODES = "power-loss-all-nodes"
    PAUSE_NODE = "pause-node"
    DISK_FULL_NODE = "disk-full-node"
    KILL_OWNER_GATEWAY = "kill-owner-gateway"
    PAUSE_OWNER_GATEWAY = "pause-owner-gateway"
    KILL_ETCD = "kill-etcd"
    UNLOAD_NAMESPACE = "unload-namespace"


# seconds a fault lasts before it is healed (the owner's pause adds the lease TTL)
HOLD_S: dict[FaultKind, tuple[float, float]] = {
    FaultKind.KILL_NODE: (0.5, 4.0),
    FaultKind.KILL_TWO_NODES: (1.0, 8.0),
    FaultKind.KILL_ALL_NODES: (0.5, 3.0),
    FaultKind.POWER_LOSS_NODE: (0.5, 4.0),
    FaultKind.POWER_LOSS_TWO_NODES: (1.0, 6.0),
    FaultKind.POWER_LOSS_ALL_NODES: (0.5, 3.0),
    FaultKind.PAUSE_NODE: (1.0, 5.0),
    FaultKind.DISK_FULL_NODE: (3.0, 8.0),
    FaultKind.KILL_OWNER_GATEWAY: (0.5, 3.0),
    FaultKind.PAUSE_OWNER_GATEWAY: (1.0, 3.0),
    FaultKind.KILL_ETCD: (1.0, 6.0),
    FaultKind.UNLOAD_NAMESPACE: (0.0, 0.0),
}


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    hold_s: float
    interval_s: float  # from this fault's start to the next one's
    pick: int  # seeds the choice of targets
    torn: bool  # power loss: keep a random share of the unsynced bytes (a torn tail)


def schedule(
    seed: int,
    count: int,
    interval: tuple[float, float],
    kinds: tuple[FaultKind, ...] = tuple(FaultKind),
    hold_scale: float = 1.0,
) -> list[Fault]:
    rng = random.Random(seed)
    faults: list[Fault] = []
    while len(faults) < count:
        round_ = list(kinds)
        rng.shuffle(round_)
        for kind in round_[: count - len(faults)]:
            low, high = HOLD_S[kind]
            faults.append(
                Fault(
                    kind,
                    round(rng.uniform(low, high) * hold_scale, 2),
                    round(rng.uniform(*interval), 2),
                    rng.randrange(1 << 30),
                    rng.random() < 0.5,
                )
            )
    return faults


class Nemesis:
    def __init__(
        self,
        cluster: FaultCluster,
        history: History,
        topics: list[tuple[str, str]],
        lease_ttl_s: float,
        say: Callable[[str], None] = print,
    ) -> None:
        self.cluster = cluster
        self.say = say  # one line per power loss: what it dropped
        self.history = history
        self.topics = topics  # (namespace, topic) whose owners the gateway faults aim at
        self.lease_ttl_s = lease_ttl_s
        self.done = 0

    async def run(self, faults: list[Fault], stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        for fault in faults:
            if stop.is_set():
                return
            started = loop.time()
            await self.inflict(fault)
            self.done += 1
            rest = fault.interval_s - (loop.time() - started)
            if rest > 0:
                try:
                    await asyncio.wait_for(stop.wait(), rest)
                except TimeoutError:
                    pass

    async def inflict(self, fault: Fault) -> None:
        rng = random.Random(fault.pick)
        cluster = self.cluster
        kind = fault.kind
        nodes = list(range(len(cluster.nodes)))
        targets: list[str] = []
        if kind in (
            FaultKind.KILL_NODE,
            FaultKind.POWER_LOSS_NODE,
            FaultKind.PAUSE_NODE,
            FaultKind.DISK_FULL_NODE,
        ):
            chosen = rng.sample(nodes, 1)
        elif kind in (FaultKind.KILL_TWO_NODES, FaultKind.POWER_LOSS_TWO_NODES):
            chosen = rng.sample(nodes, 2)
        elif kind in (FaultKind.KILL_ALL_NODES, FaultKind.POWER_LOSS_ALL_NODES):
            chosen = nodes
        else:
            chosen = []
        targets = [f"node{i}" for i in chosen]
        owner = -1
        if kind in (FaultKind.KILL_OWNER_GATEWAY, FaultKind.PAUSE_OWNER_GATEWAY):
            owner = await self.owner_of(*rng.choice(self.topics))
            targets = [f"gateway{owner}"]
        self.history.record(
            "info",
            "fault",
            process="nemesis",
            kind=str(kind),
            phase="start",
            targets=targets,
            hold=fault.hold_s,
        )
        detail: dict[str, object] = {}
        if kind in (FaultKind.KILL_NODE, FaultKind.KILL_TWO_NODES, FaultKind.KILL_ALL_NODES):
            self._kill_nodes(kind, chosen)
            await asyncio.sleep(fault.hold_s)
            self.history.record(
                "info", "fault", process="nemesis", kind=str(kind), phase="restart", down=len(chosen)
            )
            await self._restart_nodes(chosen)
        elif kind in (
            FaultKind.POWER_LOSS_NODE,
            FaultKind.POWER_LOSS_TWO_NODES,
            FaultKind.POWER_LOSS_ALL_NODES,
        ):
            self._kill_nodes(kind, chosen)
            dropped = records = 0
            for i in chosen:
                cut = powerloss.apply(cluster.sync_log(i), random.Random(fault.pick + i), fault.torn)
                dropped += cut.dropped_bytes
                records += cut.dropped_records
            detail = {
                "unsynced_bytes_dropped": dropped,
                "unsynced_records_dropped": records,
                "torn": fault.torn,
            }
            self.say(
                f"{kind} {','.join(targets)}: dropped {dropped} unsynced bytes"
                f" ({records} journal records){' with a torn tail' if fault.torn else ''}"
            )
            await asyncio.sleep(fault.hold_s)
            self.history.record(
                "info", "fault", process="nemesis", kind=str(kind), phase="restart", down=len(chosen)
            )
            await self._restart_nodes(chosen)
        elif kind is FaultKind.PAUSE_NODE:
            pid = cluster.nodes[chosen[0]].pid
            cluster.pause(pid)
            await asyncio.sleep(fault.hold_s)
            cluster.resume(pid)
        elif kind is FaultKind.DISK_FULL_NODE:
            cluster.free_file(chosen[0]).write_text(DISK_FULL_FREE)
            await asyncio.sleep(fault.hold_s)
            cluster.free_file(chosen[0]).write_text(PLENTY_FREE)
        elif kind is FaultKind.KILL_OWNER_GATEWAY:
            cluster.gateways[owner].kill9()
            await asyncio.sleep(fault.hold_s)
            await asyncio.to_thread(cluster.restart_gateway, owner)
        elif kind is FaultKind.PAUSE_OWNER_GATEWAY:
            gateway = cluster.gateways[owner]
            steps_before = gateway.log_text().count(STEPPED_DOWN)
            cluster.pause(gateway.pid)
            await asyncio.sleep(self.lease_ttl_s + fault.hold_s)
            cluster.resume(gateway.pid)
            woke = asyncio.get_running_loop().time()

            def stepped_down() -> bool:
                return not gateway.running() or gateway.log_text().count(STEPPED_DOWN) > steps_before

            # it wakes, finds its lease gone and steps down (then rejoins): how long that takes
            while not stepped_down() and asyncio.get_running_loop().time() - woke < STEP_DOWN_WAIT_S:
                await asyncio.sleep(0.1)
            if not stepped_down():
                detail = {"still_running_after_s": STEP_DOWN_WAIT_S}
            else:
                detail = {"stepped_down_s": round(asyncio.get_running_loop().time() - woke, 2)}
            if not gateway.running():
                detail["exit"] = gateway.proc.returncode if gateway.proc else None
                await asyncio.to_thread(cluster.restart_gateway, owner)
        elif kind is FaultKind.KILL_ETCD:
            assert cluster.etcd is not None
            cluster.etcd.kill()
            await asyncio.sleep(fault.hold_s)
            await asyncio.to_thread(cluster.restart_etcd)
        elif kind is FaultKind.UNLOAD_NAMESPACE:
            namespace = rng.choice(sorted({ns for ns, _ in self.topics}))
            detail = {"namespace": namespace, "status": await self.unload(namespace)}
        self.history.record(
            "info", "fault", process="nemesis", kind=str(kind), phase="heal", targets=targets, **detail
        )
        for component, code in await asyncio.to_thread(cluster.revive):
            self.history.record("info", "crash", process=component, code=code, after=str(kind))

    async def _restart_nodes(self, indexes: list[int]) -> None:
        await asyncio.gather(*(asyncio.to_thread(self.cluster.restart_node, i) for i in indexes))

    def _kill_nodes(self, kind: FaultKind, chosen: list[int]) -> None:
        """kill -9 each target and wait until it has exited, then note ``down``: from
        then on no request can reach them (one sent between ``start`` and ``down`` may
        still be made durable by a target that had not died yet)."""
        for i in chosen:
            self.cluster.nodes[i].kill9()
        self.history.record(
            "info", "fault", process="nemesis", kind=str(kind), phase="down", down=len(chosen)
        )

    async def owner_of(self, namespace: str, topic: str) -> int:
        """Index of the gateway owning ``topic`` (0 when no lookup answers)."""
        urls = self.cluster.urls
        async with httpx.AsyncClient(timeout=3.0) as http:
            for url in urls:
                try:
                    response = await http.get(f"{url}/lookup/v2/topic/persistent/{namespace}/{topic}")
                    owner = str(response.json()["httpUrl"])
                except (httpx.HTTPError, ValueError, KeyError):
                    continue
                if owner in urls:
                    return urls.index(owner)
        return 0

    async def unload(self, namespace: str) -> int:
        async with httpx.AsyncClient(timeout=10.0) as http:
            for url in self.cluster.urls:
                try:
                    return (await http.put(f"{url}/admin/v2/namespaces/{namespace}/unload")).status_code
                except httpx.HTTPError:
                    continue
        return 0
