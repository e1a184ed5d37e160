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
ack while too many were dead stands out. Partition kinds cut links one way or
both through the cluster's ``Network`` (they need ``ClusterConfig(partitions=True)``)
and record the cut ``links``; every cut is healed when its fault ends. Gray
kinds slow one node's syncs (its disk-delay file), block the owner's event
loop (SIGUSR2 with its loop-block file), step one process's wall clock forward
and back (its clock-step file) or attach a reader to the owner that never drains
its socket (a tiny receive window). docs/reliability.md lists the kinds.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import random
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import websockets

from folio.faults import powerloss
from folio.faults.cluster import DISK_FULL_FREE, PLENTY_FREE, FaultCluster
from folio.faults.history import History
from folio.faults.network import ETCD, Network

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
    # partitions (network.py: each node and gateway in its own namespace)
    CUT_GATEWAY_NODE = "cut-gateway-node"
    CUT_GATEWAY_TWO_NODES = "cut-gateway-two-nodes"
    CUT_GATEWAY_ALL_NODES = "cut-gateway-all-nodes"
    CUT_GATEWAY_ETCD = "cut-gateway-etcd"  # its clients still reach it
    CUT_NODE_ETCD = "cut-node-etcd"  # gateways still reach it
    CUT_OWNER_PEERS = "cut-owner-peers"  # relayed consumers, forwarded publishes
    ONE_WAY_ETCD_TO_GATEWAY = "one-way-etcd-to-gateway"  # etcd's answers lost, its requests arrive
    ONE_WAY_GATEWAY_TO_NODE = "one-way-gateway-to-node"
    FLAP_GATEWAY_NODE = "flap-gateway-node"
    ETCD_MINORITY_SPLIT = "etcd-minority-split"  # one etcd member cut from the other two
    # gray failures
    SLOW_FSYNC_NODE = "slow-fsync-node"  # every fdatasync takes 200-1,000 ms
    STALL_WRITES_NODE = "stall-writes-node"  # a sync takes the whole hold: reads asked, writes stall
    BLOCK_GATEWAY_LOOP = "block-gateway-loop"  # the owner's event loop blocked for seconds, not paused
    CLOCK_JUMP_GATEWAY = "clock-jump-gateway"  # the owner's wall clock steps forward and back
    CLOCK_JUMP_NODE = "clock-jump-node"  # a node's wall clock steps forward and back
    SLOW_CONSUMER_OWNER = "slow-consumer-owner"  # a reader of the owner's that never drains its socket


PARTITION_KINDS = frozenset(
    {
        FaultKind.CUT_GATEWAY_NODE,
        FaultKind.CUT_GATEWAY_TWO_NODES,
        FaultKind.CUT_GATEWAY_ALL_NODES,
        FaultKind.CUT_GATEWAY_ETCD,
        FaultKind.CUT_NODE_ETCD,
        FaultKind.CUT_OWNER_PEERS,
        FaultKind.ONE_WAY_ETCD_TO_GATEWAY,
        FaultKind.ONE_WAY_GATEWAY_TO_NODE,
        FaultKind.FLAP_GATEWAY_NODE,
        FaultKind.ETCD_MINORITY_SPLIT,
    }
)
GRAY_KINDS = frozenset(
    {
        FaultKind.SLOW_FSYNC_NODE,
        FaultKind.STALL_WRITES_NODE,
        FaultKind.BLOCK_GATEWAY_LOOP,
        FaultKind.CLOCK_JUMP_GATEWAY,
        FaultKind.CLOCK_JUMP_NODE,
        FaultKind.SLOW_CONSUMER_OWNER,
    }
)
Link = tuple[str, str]  # (from, to): from's packets to it are dropped
SLOW_FSYNC_MS = (200, 1_000)
LOOP_BLOCK_S = (1.0, 2.5)  # one block; a fault blocks the loop again and again for its hold
FLAP_S = (0.3, 1.0)  # a flapping link changes state this often
CLOCK_STEP_S = (5, 30)  # a wall-clock step, either way (well inside the nodes' 60 s proof window)
SLOW_READER_RCVBUF = 4096  # the slow reader's socket receive buffer: a tiny TCP window


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
    FaultKind.CUT_GATEWAY_NODE: (2.0, 8.0),
    FaultKind.CUT_GATEWAY_TWO_NODES: (2.0, 8.0),
    FaultKind.CUT_GATEWAY_ALL_NODES: (2.0, 6.0),
    FaultKind.CUT_GATEWAY_ETCD: (1.0, 4.0),  # plus the lease TTL: the lease must run out
    FaultKind.CUT_NODE_ETCD: (2.0, 8.0),
    FaultKind.CUT_OWNER_PEERS: (2.0, 8.0),
    FaultKind.ONE_WAY_ETCD_TO_GATEWAY: (1.0, 4.0),  # plus the lease TTL
    FaultKind.ONE_WAY_GATEWAY_TO_NODE: (2.0, 8.0),
    FaultKind.FLAP_GATEWAY_NODE: (4.0, 10.0),
    FaultKind.ETCD_MINORITY_SPLIT: (3.0, 8.0),
    FaultKind.SLOW_FSYNC_NODE: (3.0, 8.0),
    FaultKind.STALL_WRITES_NODE: (2.0, 5.0),
    FaultKind.BLOCK_GATEWAY_LOOP: (3.0, 6.0),
    FaultKind.CLOCK_JUMP_GATEWAY: (2.0, 6.0),
    FaultKind.CLOCK_JUMP_NODE: (2.0, 6.0),
    FaultKind.SLOW_CONSUMER_OWNER: (3.0, 8.0),
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
        links: list[Link] = []
        if kind in PARTITION_KINDS or kind is FaultKind.BLOCK_GATEWAY_LOOP:
            owner = await self.owner_of(*rng.choice(self.topics))
            links, targets = self._links(kind, rng, owner)
        elif kind in (FaultKind.CLOCK_JUMP_GATEWAY, FaultKind.SLOW_CONSUMER_OWNER):
            topic = rng.choice(self.topics)
            owner = await self.owner_of(*topic)
            targets = [f"gateway{owner}"]
        elif kind in (FaultKind.SLOW_FSYNC_NODE, FaultKind.STALL_WRITES_NODE, FaultKind.CLOCK_JUMP_NODE):
            chosen = rng.sample(nodes, 1)
            targets = [f"node{chosen[0]}"]
        self.history.record(
            "info",
            "fault",
            process="nemesis",
            kind=str(kind),
            phase="start",
            targets=targets,
            hold=fault.hold_s,
            links=[list(link) for link in links],
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
        elif kind in (FaultKind.CUT_GATEWAY_ETCD, FaultKind.ONE_WAY_ETCD_TO_GATEWAY):
            gateway = cluster.gateways[owner]
            steps_before = gateway.log_text().count(STEPPED_DOWN)
            cut_at = asyncio.get_running_loop().time()
            for src, dst in links:
                self.network.cut(src, dst)
            await asyncio.sleep(self.lease_ttl_s + fault.hold_s)
            self.network.heal()
            steps = gateway.log_text().count(STEPPED_DOWN) - steps_before
            detail = {"stepped_down": steps, "cut_s": round(asyncio.get_running_loop().time() - cut_at, 2)}
        elif kind is FaultKind.FLAP_GATEWAY_NODE:
            loop = asyncio.get_running_loop()
            end, flips = loop.time() + fault.hold_s, 0
            while loop.time() < end:
                for src, dst in links:
                    if flips % 2 == 0:
                        self.network.cut(src, dst)
                    else:
                        self.network.restore(src, dst)
                flips += 1
                await asyncio.sleep(min(rng.uniform(*FLAP_S), max(0.0, end - loop.time())))
            self.network.heal()
            detail = {"flips": flips}
        elif kind in PARTITION_KINDS:
            for src, dst in links:
                self.network.cut(src, dst)
            await asyncio.sleep(fault.hold_s)
            self.network.heal()
        elif kind in (FaultKind.SLOW_FSYNC_NODE, FaultKind.STALL_WRITES_NODE):
            delay_ms = (
                rng.randint(*SLOW_FSYNC_MS) if kind is FaultKind.SLOW_FSYNC_NODE else int(fault.hold_s * 1000)
            )
            cluster.disk_delay_file(chosen[0]).write_text(str(delay_ms))
            await asyncio.sleep(fault.hold_s)
            cluster.disk_delay_file(chosen[0]).write_text("0")
            detail = {"fsync_ms": delay_ms}
        elif kind is FaultKind.BLOCK_GATEWAY_LOOP:
            gateway = cluster.gateways[owner]
            loop = asyncio.get_running_loop()
            end, blocked = loop.time() + fault.hold_s, 0.0
            while loop.time() < end:
                seconds = round(rng.uniform(*LOOP_BLOCK_S), 2)
                cluster.loop_block_file(owner).write_text(str(seconds))
                with contextlib.suppress(ProcessLookupError):
                    os.kill(gateway.pid, signal.SIGUSR2)
                blocked += seconds
                await asyncio.sleep(seconds + rng.uniform(0.2, 1.0))
            detail = {"blocked_s": round(blocked, 2)}
        elif kind in (FaultKind.CLOCK_JUMP_GATEWAY, FaultKind.CLOCK_JUMP_NODE):
            step_file = cluster.clock_step_file(targets[0])
            step_ms = rng.randint(*CLOCK_STEP_S) * 1000 * rng.choice((1, -1))
            step_file.write_text(str(step_ms))  # one way for half the hold, then the other way
            await asyncio.sleep(fault.hold_s / 2)
            step_file.write_text(str(-step_ms))
            await asyncio.sleep(fault.hold_s / 2)
            step_file.write_text("0")
            detail = {"step_ms": step_ms}
        elif kind is FaultKind.SLOW_CONSUMER_OWNER:
            detail = await self._slow_reader(cluster.urls[owner], *topic, fault.hold_s)
        self.history.record(
            "info", "fault", process="nemesis", kind=str(kind), phase="heal", targets=targets, **detail
        )
        for component, code in await asyncio.to_thread(cluster.revive):
            self.history.record("info", "crash", process=component, code=code, after=str(kind))

    @property
    def network(self) -> Network:
        assert self.cluster.network is not None, "partition faults need ClusterConfig(partitions=True)"
        return self.cluster.network

    def _links(
        self, kind: FaultKind, rng: random.Random, owner: int
    ) -> tuple[list[tuple[str, str]], list[str]]:
        """The one-way cuts a partition kind makes, and the processes it targets."""
        gateway = f"gateway{owner}"
        nodes = [f"node{i}" for i in range(len(self.cluster.nodes))]
        peers = [f"gateway{i}" for i in range(len(self.cluster.gateways)) if i != owner]
        both: list[Link] = []
        one: list[Link] = []
        if kind in (FaultKind.CUT_GATEWAY_NODE, FaultKind.FLAP_GATEWAY_NODE):
            both = [(gateway, n) for n in rng.sample(nodes, 1)]
        elif kind is FaultKind.CUT_GATEWAY_TWO_NODES:
            both = [(gateway, n) for n in rng.sample(nodes, 2)]
        elif kind is FaultKind.CUT_GATEWAY_ALL_NODES:
            both = [(gateway, n) for n in nodes]
        elif kind is FaultKind.CUT_GATEWAY_ETCD:
            both = [(gateway, ETCD)]
        elif kind is FaultKind.CUT_NODE_ETCD:
            both = [(rng.choice(nodes), ETCD)]
        elif kind is FaultKind.CUT_OWNER_PEERS:
            both = [(gateway, peer) for peer in peers]
        elif kind is FaultKind.ONE_WAY_ETCD_TO_GATEWAY:
            one = [(ETCD, gateway)]
        elif kind is FaultKind.ONE_WAY_GATEWAY_TO_NODE:
            one = [(gateway, rng.choice(nodes))]
        elif kind is FaultKind.ETCD_MINORITY_SPLIT:
            members = self.network.etcd_members
            assert len(members) >= 3, "a minority split needs 3 etcd members"
            owners_member = members[(owner + 1) % len(members)]  # FaultCluster.etcd_endpoints
            alone = owners_member if rng.random() < 0.5 else rng.choice(members)
            both = [(alone, other) for other in members if other != alone]
        links = one + both + [(b, a) for a, b in both]
        if kind is FaultKind.BLOCK_GATEWAY_LOOP:
            return [], [gateway]
        targets = sorted({name for link in links for name in link})
        return links, targets

    async def _slow_reader(self, url: str, namespace: str, topic: str, hold_s: float) -> dict[str, object]:
        """A reader from the topic's start on ``url`` whose socket is never drained for
        ``hold_s`` (a receive window of ``SLOW_READER_RCVBUF`` bytes, one frame queued):
        the owner must hold it within its byte bounds while serving everyone else."""
        host, port = url.split("://", 1)[1].rsplit(":", 1)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_READER_RCVBUF)
        sock.setblocking(False)
        ws_url = f"ws://{host}:{port}/ws/v2/reader/persistent/{namespace}/{topic}?messageId=earliest"
        try:
            await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, (host, int(port))), 3.0)
            ws = await websockets.connect(ws_url, sock=sock, max_queue=1, max_size=None, open_timeout=3.0)
        except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
            sock.close()
            await asyncio.sleep(hold_s)
            return {"reader": f"not opened: {exc!r}"[:200]}
        await asyncio.sleep(hold_s)
        closed = ws.close_code  # the gateway may close a reader that does not drain (a byte bound)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ws.close(), 1.0)
        return {"reader": "open" if closed is None else f"closed {closed}"}

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
