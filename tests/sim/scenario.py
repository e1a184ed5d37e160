"""Seeded scenarios: the real storage nodes and ledger client under faults, then checked.

Owns: turning a seed into a ``Scenario`` (cluster shape, workload, fault plan,
timing) and running it in a fresh world (world.py) with the checkers wired in.
What runs is production code: each node is ``NodeService`` + ``NodeServer``
(journal, group commit, entry store, checkpoints, replay) over a ``SimDisk``;
the writer, the recoverers and the readers are ``LedgerClient``s (writer,
connection, pool, recovery, reader) over the ``SimNetwork``; etcd is the real
``MemoryStore`` behind a seeded round-trip delay. Only the nodes' etcd
registration is the simulation's own (a lease refreshed every second).
Phases of a run (docs/compatibility.md §6.2-6.5):
1. the nodes start and register; the writer creates a ledger on an ensemble the
   real ``placement`` chooses and appends ``entries`` with up to ``window`` adds
   unconfirmed (ensemble changes follow from crashes, resets and time-outs);
   sometimes it closes the ledger itself when done;
2. until ``faults_end_ms``: kills (kill -9) and power losses of single nodes at
   seeded instants (at most ``max_down`` down at a time), sometimes a correlated
   power loss of several nodes, clogged writer<->node connections, slow disks,
   disk stalls and an fdatasync error (the node dies); a power loss keeps only
   what was fsynced, and drops, keeps a prefix of or tears the rest;
3. at ``recovery_at_ms`` - while the writer is still writing in many seeds - a
   new owner (sometimes two) opens the ledger with recovery (fences and closes
   it); a tailing reader may run throughout;
4. after the faults every node is started again, and a fresh reader reads the
   closed ledger back; the checker compares it with what the writer did.
A quarter of the seeds use the ``takeover`` family instead (see ``takeover``).
Broken rules for the controls (docs/testing.md §6): ``fsync=False`` (the nodes'
disks return from fdatasync without making anything durable: acks before
durability) and ``skip_recovery=True`` (the new owner closes the ledger at the
LAC it reads from the nodes, without fencing or recovering it). Both live here,
in the simulation; no production code reads them.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from coordination import keys
from coordination.errors import CoordinationError
from coordination.memory_store import MemoryStore
from storage import wire
from storage.client.api import LedgerClient
from storage.client.connection import ConnectionConfig
from storage.client.write_effects import WriterConfig
from storage.client.writer import close_writer
from storage.errors import ProtocolViolation, Status, StorageError
from storage.node.journal_core import JournalConfig
from storage.node.server import NodeServer
from storage.node.service import NodeConfig, NodeService
from storage.types import LedgerMetadata, LedgerState, NodeInfo

from .checkers import Checker
from .world import (
    NetConfig,
    Process,
    SimClock,
    SimDisk,
    SimDiskPort,
    SimLoop,
    SimNetwork,
    SimTransport,
    Stalled,
    seeded,
)

NODE_PORT = 3181
LEASE_TTL_S = 3
SIM_TIME_MAX_S = 120.0  # a scenario that has not finished by then is a liveness failure
ENTRIES_MAX = 48  # per seed: between half of this and this many appends
RECOVERY_ATTEMPTS_MAX = 100


@dataclass(frozen=True, slots=True)
class Crash:
    at_ms: int
    node: int
    down_ms: int
    power: bool  # power loss (un-synced bytes lost), else kill -9 (the page cache survives)


@dataclass(frozen=True, slots=True)
class Clog:
    at_ms: int
    node: int
    to_node: bool  # writer -> node (else node -> writer)
    ms: int


@dataclass(frozen=True, slots=True)
class Scenario:
    seed: int
    ensemble: int
    write_quorum: int
    ack_quorum: int
    nodes: int
    entries: int
    window: int
    think_ms_max: int
    writer_closes: bool
    crashes: tuple[Crash, ...]
    max_down: int
    outage: tuple[Crash, ...]  # correlated power loss: these nodes lose power at the same instant
    clogs: tuple[Clog, ...]
    faults_end_ms: int
    recovery_at_ms: int
    second_recovery_at_ms: int | None  # a concurrent recoverer (they converge through the CAS)
    tailing_reader_at_ms: int | None
    add_timeout_ms: int
    journal: JournalConfig
    rotate_bytes: int
    prealloc_bytes: int
    inline_sync_records: int
    checkpoint_interval_s: float
    net: NetConfig
    disk_ms: tuple[int, int]
    slow_disks: tuple[int, ...]  # nodes whose disk takes 5-20x longer (a slow or busy disk)
    disk_stall: float  # chance that any one disk operation stalls for 20-300 ms
    fsync_error: tuple[int, int] | None  # (node, n): that node's n-th fdatasync fails
    fsync: bool = True
    skip_recovery: bool = False
    family: str = "random"  # or "takeover" (see takeover())

    def describe(self) -> str:
        return (
            f"SEED={self.seed} family={self.family} E={self.ensemble} Qw={self.write_quorum} "
            f"Qa={self.ack_quorum} nodes={self.nodes} entries={self.entries} window={self.window} "
            f"crashes={len(self.crashes)} max_down={self.max_down} outage={[c.node for c in self.outage]} "
            f"clogs={len(self.clogs)} slow_disks={list(self.slow_disks)} fsync_error={self.fsync_error} "
            f"recovery_at={self.recovery_at_ms}ms writer_closes={self.writer_closes} "
            f"fsync={self.fsync} skip_recovery={self.skip_recovery}"
        )


def make_scenario(
    seed: int, entries_max: int = ENTRIES_MAX, fsync: bool = True, skip_recovery: bool = False
) -> Scenario:
    rng = seeded(seed, "scenario")
    ensemble = rng.choice((3, 3, 3, 4, 5))
    nodes = min(6, ensemble + rng.choice((0, 1, 1, 2)))
    entries = rng.randint(entries_max // 2, entries_max)
    window = rng.choice((1, 4, 8, 16))
    think_ms_max = rng.choice((1, 3, 8))
    spike = rng.random() < 0.3
    net = NetConfig(
        delay_min_ms=1,
        delay_max_ms=rng.choice((2, 5, 12)),
        jitter=rng.random() < 0.85,
        spike_chance=0.01 if spike else 0.0,
        spike_ms=200 if spike else 0,
    )
    journal = JournalConfig(
        max_group_wait_ms=rng.choice((0, 1, 2, 5)),
        buffered_bytes_threshold=rng.choice((200, 1024, 512 * 1024)),
        buffered_entries_threshold=rng.choice((0, 0, 3)),
        flush_when_queue_empty=rng.random() < 0.5,
        max_queued_records=rng.choice((10_000, 10_000, 10_000, 16)),  # 16: hit by window 16
    )
    disk_ms = rng.choice(((1, 2), (1, 4), (2, 12)))
    # about how long the writing takes: think time or one round trip per window
    round_trip = net.delay_max_ms + 1 + journal.max_group_wait_ms + sum(disk_ms) // 2
    horizon = entries * max(think_ms_max // 2 + 1, round_trip // window + 1) + 20
    crashes = tuple(
        Crash(
            rng.randint(0, horizon * 3 // 2),
            rng.randrange(nodes),
            rng.choice((rng.randint(1, 30), rng.randint(30, 400))),
            rng.random() < 0.6,
        )
        for _ in range(rng.choice((0, 1, 2, 3, 4, 6, 8)))
    )
    outage_at = rng.randint(horizon // 4, horizon * 3 // 2)
    outage_down = rng.randint(1, 200)
    victims = rng.sample(range(nodes), rng.randint(2, nodes)) if rng.random() < 0.4 else []
    outage = tuple(Crash(outage_at, victim, outage_down, True) for victim in sorted(victims))
    clogs = [
        Clog(rng.randint(0, horizon), rng.randrange(nodes), rng.random() < 0.5, rng.randint(20, 600))
        for _ in range(rng.choice((0, 0, 1, 2)))
    ]
    slow_disks = {n for n in range(nodes) if rng.random() < 0.25}
    during = rng.random() < 0.6  # recovery while the writer is still writing
    recovery_at = rng.randint(horizon // 5, horizon) if during else rng.randint(horizon, horizon * 2)
    fsync_error = (rng.randrange(nodes), rng.randint(2, 16)) if rng.random() < 0.15 else None
    base = Scenario(
        seed=seed,
        ensemble=ensemble,
        write_quorum=3,
        ack_quorum=2,
        nodes=nodes,
        entries=entries,
        window=window,
        think_ms_max=think_ms_max,
        writer_closes=rng.random() < 0.3,
        crashes=crashes,
        max_down=rng.choice((1, 1, 2, 2, 3)),
        outage=outage,
        clogs=tuple(clogs),
        faults_end_ms=max(recovery_at, horizon * 3 // 2) + rng.randint(0, 300),
        recovery_at_ms=recovery_at,
        second_recovery_at_ms=recovery_at + rng.randint(0, 40) if rng.random() < 0.25 else None,
        tailing_reader_at_ms=rng.randint(0, horizon) if rng.random() < 0.6 else None,
        add_timeout_ms=rng.choice((60, 150, 400)),
        journal=journal,
        rotate_bytes=rng.choice((2048, 16 * 1024, 1 << 20)),
        prealloc_bytes=rng.choice((0, 0, 4096)),
        inline_sync_records=rng.choice((0, 0, 4)),
        checkpoint_interval_s=rng.choice((0.02, 0.1, 1.0)),
        net=net,
        disk_ms=disk_ms,
        slow_disks=tuple(sorted(slow_disks)),
        disk_stall=rng.choice((0.0, 0.0, 0.05, 0.2)),
        fsync_error=fsync_error,
    )
    if rng.random() < 0.25:
        base = takeover(base, rng)
    return replace(base, fsync=fsync, skip_recovery=skip_recovery)


def takeover(base: Scenario, rng: random.Random) -> Scenario:
    """The classic zombie-writer takeover: just before a new owner recovers the ledger,
    one replica is cut off from the old writer and another has a slow disk, so the
    writer waits on the slow one while the recoverer fences and reads."""
    nodes = rng.choice((3, 3, 4))
    recovery_at = rng.randint(60, 200)
    cut_off, slow = rng.sample(range(nodes), 2)
    return replace(
        base,
        family="takeover",
        ensemble=3,
        nodes=nodes,
        entries=rng.randint(32, 48),
        window=rng.choice((4, 8, 16)),
        think_ms_max=1,
        writer_closes=False,
        crashes=(),
        outage=(),
        clogs=(Clog(recovery_at - rng.randint(5, 60), cut_off, True, 2000),),
        slow_disks=(slow,),
        disk_stall=0.0,
        fsync_error=None,
        recovery_at_ms=recovery_at,
        second_recovery_at_ms=None,
        faults_end_ms=recovery_at + 100,
        add_timeout_ms=rng.choice((150, 400, 1000)),
    )


@dataclass(slots=True)
class Outcome:
    scenario: Scenario
    violations: list[str]
    stats: dict[str, int] = field(default_factory=dict)
    digest: str = ""  # of everything observable: equal digests = an exact replay


# ---------------------------------------------------------------- etcd


class DelayedStore:
    """The real ``MemoryStore`` one seeded round trip away; every ledger metadata a
    client reads back after a write goes to the checker."""

    def __init__(self, store: MemoryStore, rng: random.Random, on_write: Callable[[], None]) -> None:
        self._store = store
        self._rng = rng
        self._on_write = on_write

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(self._rng.randint(1, 3) / 1000)
            try:
                return await method(*args, **kwargs)
            finally:
                if name in ("compare_and_swap", "put", "put_guarded"):
                    self._on_write()
                await asyncio.sleep(self._rng.randint(1, 3) / 1000)

        return call


# ---------------------------------------------------------------- processes


class SimNode:
    """One storage node: the real ``NodeService`` + ``NodeServer`` in a simulated process."""

    def __init__(self, world: World, index: int, s: Scenario) -> None:
        self.world = world
        self.name = f"n{index}"
        self.node_id = f"{self.name}:{NODE_PORT}"
        slow = index in s.slow_disks
        disk_ms = (s.disk_ms[0] * 5, s.disk_ms[1] * 20) if slow else s.disk_ms
        self.process = Process(world.loop, self.name, disk_ms)
        self.process.disk_stall = s.disk_stall
        # the n-th fdatasync after the node first started fails
        self._fsync_error_in = s.fsync_error[1] if s.fsync_error and s.fsync_error[0] == index else 0
        self.disk = SimDisk(seeded(s.seed, f"disk{index}"), s.fsync)
        self.network = world.net.port(self.process)
        self.config = NodeConfig(
            data_dir=Path(f"/sim/{self.name}"),
            journal=s.journal,
            journal_rotate_bytes=s.rotate_bytes,
            journal_cache_bytes=None,
            journal_prealloc_bytes=s.prealloc_bytes,
            checkpoint_interval_s=s.checkpoint_interval_s,
            compaction_threshold=0.0,
            journal_inline_sync_records=s.inline_sync_records,
        )
        self.service: NodeService | None = None
        self.ready = False
        self.power_losses = 0

    @property
    def up(self) -> bool:
        return self.process.up

    def start(self) -> None:
        self.ready = False
        self.process.start(self._main)

    def kill(self, power: bool) -> None:
        if not self.up:
            return
        self.process.kill()
        if power:
            self.power_losses += 1
            self.disk.power_loss()

    async def _main(self) -> None:
        world = self.world
        service = NodeService(self.config, world.clock, disk=SimDiskPort(self.disk, self.process))
        await service.start()
        self.service = service
        info = NodeInfo(self.node_id, self.node_id, "", 100 << 30, 200 << 30, 0.0, False)
        server = NodeServer(service, info.to_json, idle_timeout_s=0, network=self.network)
        await server.start(self.name, NODE_PORT)
        store = world.store
        lease = await store.grant_lease(LEASE_TTL_S)
        await store.put(keys.node(self.node_id), info.to_json(), lease)
        self.ready = True
        if self._fsync_error_in:
            self.disk.fsync_error_after, self._fsync_error_in = self.disk.syncs + self._fsync_error_in, 0
        while True:
            await asyncio.sleep(1.0)
            try:
                await store.refresh_lease(lease)
            except CoordinationError:
                lease = await store.grant_lease(LEASE_TTL_S)
                await store.put(keys.node(self.node_id), info.to_json(), lease)

    def lac(self, ledger_id: int) -> int:
        if not self.up or self.service is None or not self.ready:
            return -1
        reply = self.service.ledgers.lac_reply(ledger_id)
        return reply[0] if reply else -1

    def holds(self, ledger_id: int, last: int) -> set[int]:
        assert self.service is not None
        return {e for e in range(last + 1) if self.service.entries.locate(ledger_id, e) is not None}


class World:
    def __init__(self, s: Scenario) -> None:
        self.scenario = s
        self.loop = SimLoop(s.seed)
        self.clock = SimClock(self.loop)
        self.memory = MemoryStore(self.clock)
        self.checker = Checker(-1, self.clock.now_ms)
        self.net = SimNetwork(self.loop, seeded(s.seed, "net"), s.net)
        self.store = DelayedStore(self.memory, seeded(s.seed, "etcd"), self.check_metadata)
        self.nodes = [SimNode(self, i, s) for i in range(s.nodes)]
        self.ledger_id: int | None = None

    def client(self, name: str, seed_name: str, **kwargs: Any) -> tuple[Process, Callable[[], LedgerClient]]:
        process = Process(self.loop, name)
        network = self.net.port(process)
        s = self.scenario

        def make() -> LedgerClient:
            return LedgerClient(
                self.store,
                self.clock,
                seed=seeded(s.seed, seed_name).getrandbits(32),
                connection_config=ConnectionConfig(
                    connect_timeout_ms=500, backoff_initial_ms=20, backoff_max_ms=200, auth_secret=None
                ),
                network=network,
                **kwargs,
            )

        return process, make

    def metadata(self) -> LedgerMetadata | None:
        if self.ledger_id is None:
            return None
        kv = self.memory._state.data.get(keys.ledger(self.ledger_id))
        return LedgerMetadata.from_json(kv.value) if kv is not None else None

    def check_metadata(self) -> None:
        if self.ledger_id is not None:
            self.checker.metadata(self.metadata())


class WireObserver:
    """Reads the node protocol off the simulated wire (storage/wire.py's codec): which
    node acked which normal add, and which replied to a fence. Requests are read as
    they arrive at a node, replies as the node sends them: an add that arrived after
    its node sent a fence reply must not be acked (ack and fence reply may leave in
    either order when the add arrived first: both wait for the same fdatasync)."""

    def __init__(self, world: World) -> None:
        self._checker = world.checker
        self._nodes = {node.name for node in world.nodes}
        self._decoders: dict[SimTransport, wire.FrameDecoder] = {}
        self._asked: dict[tuple[SimTransport, int], tuple[int, int, bool, bool]] = {}
        world.net.arrival_taps.append(self.arrived)
        world.net.sent_taps.append(self.sent)

    def _frames(self, src: SimTransport, data: bytes, replies: bool) -> list[Any]:
        decoder = self._decoders.get(src)
        if decoder is None:
            decoder = self._decoders[src] = (
                wire.FrameDecoder.responses() if replies else wire.FrameDecoder.requests()
            )
        try:
            return decoder.feed(data)
        except ProtocolViolation:
            return []

    def arrived(self, src: SimTransport, dst: SimTransport, data: bytes) -> None:
        if dst.host not in self._nodes or src.host in self._nodes:
            return
        after_fence = dst.host in self._checker.fence_replied
        for (op, request_id), body in self._frames(src, data, replies=False):
            recovery, entry_id = False, -1
            if op == wire.Op.ADD:
                recovery, _, entry_id, _, _ = wire.parse_add(body)
            self._asked[(src, request_id)] = (op, entry_id, recovery, after_fence)

    def sent(self, src: SimTransport, dst: SimTransport, data: bytes) -> None:
        if src.host not in self._nodes or dst.host in self._nodes:
            return
        for (_, request_id, status), _ in self._frames(src, data, replies=True):
            asked = self._asked.pop((dst, request_id), None)
            if asked is None or status != Status.OK:
                continue
            op, entry_id, recovery, after_fence = asked
            if op == wire.Op.ADD:
                self._checker.node_acked_add(src.host, entry_id, recovery, after_fence)
            elif op == wire.Op.FENCE:
                self._checker.node_fence_replied(src.host)


class Writer:
    def __init__(self, world: World) -> None:
        s = world.scenario
        self.world = world
        self.process, self._make = world.client(
            "writer",
            "writer",
            writer_config=WriterConfig(
                outstanding_adds_max=s.window, add_timeout_ms=s.add_timeout_ms, ensemble_retry_ms=50
            ),
        )
        self._rng = seeded(s.seed, "workload")
        self.appended = 0
        self.confirmed = -1
        self.error: Exception | None = None
        self.ensemble_changes = 0
        self.lac = -1
        self.done = False

    def start(self) -> None:
        self.process.start(self._main)

    async def _main(self) -> None:
        s, world, checker = self.world.scenario, self.world, self.world.checker
        client = self._make()
        writer = await client.create(s.ensemble, s.write_quorum, s.ack_quorum)
        world.ledger_id = checker.ledger_id = writer.ledger_id
        self.writer = writer
        room = asyncio.Event()

        def on_done(future: asyncio.Future[int]) -> None:
            if not future.cancelled() and future.exception() is None:
                self.confirmed = future.result()
                checker.writer_confirmed(self.confirmed)
            room.set()

        try:
            for index in range(s.entries):
                while writer.error is None and writer.outstanding >= s.window:
                    room.clear()
                    await room.wait()
                if writer.error is not None:
                    break
                payload = f"e{index}:".encode() + self._rng.randbytes(self._rng.randint(1, 120))
                writer.append_nowait(payload, on_done)
                checker.writer_appended(index, payload)
                self.appended += 1
                await asyncio.sleep(self._rng.randint(0, s.think_ms_max) / 1000)
            if s.writer_closes and writer.error is None:
                await writer.close()
        except StorageError as exc:
            self.error = exc
        finally:
            self.error = self.error or writer.error
            self.ensemble_changes = writer.ensemble_changes
            self.done = True


class Recoverer:
    """A new owner: opens the ledger with recovery (fence, recover, close), retrying
    from fresh metadata after a failure, as a gateway taking a topic over does.
    ``skip_recovery`` (a control): it closes the ledger at the LAC the nodes report."""

    def __init__(self, world: World, name: str, skip_recovery: bool) -> None:
        self.world = world
        self.name = name
        self.process, self._make = world.client(name, name)
        self.skip_recovery = skip_recovery
        self.attempt = 0
        self.failures: list[Exception] = []
        self.closed: LedgerMetadata | None = None
        self.gave_up = False

    @property
    def done(self) -> bool:
        return self.closed is not None or self.gave_up

    def start(self) -> None:
        self.process.start(self._main)

    async def _main(self) -> None:
        ledger_id = self.world.ledger_id
        assert ledger_id is not None, "the ledger is created before any recovery starts"
        client = self._make()
        while self.attempt < RECOVERY_ATTEMPTS_MAX:
            self.attempt += 1
            try:
                if self.skip_recovery:
                    reader = await client.open(ledger_id, recover=False)
                    self.closed = await client.metadata.update(
                        ledger_id, partial(close_unrecovered, lac=reader.last_add_confirmed)
                    )
                else:
                    self.closed = (await client.open(ledger_id, recover=True)).metadata
                return
            except (StorageError, CoordinationError) as exc:
                self.failures.append(exc)
                await asyncio.sleep(0.05)
        self.gave_up = True


def close_unrecovered(current: LedgerMetadata, lac: int) -> LedgerMetadata | None:
    """The broken rule of the skip-recovery control: close an OPEN ledger at ``lac``."""
    return close_writer(current, lac, 0) if current.state is LedgerState.OPEN else None


class Reader:
    """Reads the ledger from entry 0 with the real ``LedgerReader``: tailing (bounded by
    the LAC while OPEN) or, once CLOSED, to its last entry."""

    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name
        self.process, self._make = world.client(name, name)
        self.read: dict[int, bytes] = {}
        self.complete = False
        self.stopped = False

    def start(self) -> None:
        self.process.start(self._main)

    async def _main(self) -> None:
        ledger_id = self.world.ledger_id
        assert ledger_id is not None
        client = self._make()
        checker = self.world.checker
        reader = await client.open(ledger_id)
        next_entry = 0
        while not self.stopped:
            try:
                if reader.closed:
                    bound = reader.metadata.last_entry_id
                else:
                    bound = await reader.read_lac(next_entry - 1, timeout_ms=50)
                    if bound < next_entry:
                        await reader.refresh()
                        continue
                while next_entry <= bound:
                    entry = await reader.read_entry(next_entry)
                    checker.reader_returned(self.name, entry.entry_id, entry.payload, reader.closed)
                    self.read[entry.entry_id] = entry.payload
                    next_entry += 1
                if reader.closed:
                    self.complete = True
                    return
            except (StorageError, CoordinationError):
                await asyncio.sleep(0.02)


# ---------------------------------------------------------------- a run


def inject_faults(world: World) -> None:
    """Schedule the crashes, the correlated outage, the clogs and the final restart."""
    s, loop, nodes = world.scenario, world.loop, world.nodes

    def restart_later(node: SimNode, down_ms: int) -> None:
        loop.call_later(down_ms / 1000, lambda: None if node.up else node.start())

    def crash(plan: Crash) -> None:
        node = nodes[plan.node]
        down = sum(1 for n in nodes if not n.up)
        if node.up and down < s.max_down and world.clock.now_ms() < s.faults_end_ms:
            node.kill(plan.power)
            restart_later(node, plan.down_ms)

    def outage() -> None:
        for plan in s.outage:
            node = nodes[plan.node]
            if node.up:
                node.kill(power=True)
                restart_later(node, plan.down_ms)

    def clog(src: str, dst: str, ms: int) -> None:
        world.net.clog(src, dst, loop.time() + ms / 1000)

    def restart_all() -> None:
        for node in nodes:
            if not node.up:
                node.start()

    for plan in s.crashes:
        loop.call_at(plan.at_ms / 1000, partial(crash, plan))
    if s.outage:
        loop.call_at(s.outage[0].at_ms / 1000, outage)
    for c in s.clogs:
        path = ("writer", nodes[c.node].name) if c.to_node else (nodes[c.node].name, "writer")
        loop.call_at(c.at_ms / 1000, partial(clog, *path, c.ms))
    loop.call_at(s.faults_end_ms / 1000, restart_all)


def run(scenario: Scenario) -> Outcome:
    world = World(scenario)
    try:
        return _run(world, scenario)
    except Stalled as exc:
        world.checker.fail(f"liveness: the world stalled: {exc}")
        for error in world.loop.errors:
            world.checker.fail(f"unexpected error: {error}")
        return Outcome(scenario, world.checker.violations)
    finally:
        world.loop.close()


def _run(world: World, s: Scenario) -> Outcome:
    loop, checker, nodes = world.loop, world.checker, world.nodes
    WireObserver(world)
    for node in nodes:
        node.start()
    loop.run_until(lambda: all(node.ready for node in nodes), 10.0)
    start_ms = world.clock.now_ms()
    writer = Writer(world)
    writer.start()
    if not loop.run_until(lambda: world.ledger_id is not None, 10.0):
        checker.fail("liveness: the writer never created its ledger")
        return Outcome(s, checker.violations)
    recoverers = [Recoverer(world, "recoverer", s.skip_recovery)]
    loop.call_at((start_ms + s.recovery_at_ms) / 1000, recoverers[0].start)
    if s.second_recovery_at_ms is not None:
        recoverers.append(Recoverer(world, "recoverer2", s.skip_recovery))
        loop.call_at((start_ms + s.second_recovery_at_ms) / 1000, recoverers[1].start)
    tailing = Reader(world, "tailer")
    if s.tailing_reader_at_ms is not None:
        loop.call_at((start_ms + s.tailing_reader_at_ms) / 1000, tailing.start)
    inject_faults(world)
    ledger_id = world.ledger_id
    assert ledger_id is not None

    def after_step() -> bool:
        checker.node_lacs((n.name, n.lac(ledger_id)) for n in nodes if n.up and n.ready)
        return False

    def all_done() -> bool:
        after_step()
        return all(r.done for r in recoverers) and world.clock.now_ms() >= s.faults_end_ms

    if not loop.run_until(all_done, SIM_TIME_MAX_S):
        checker.fail(f"liveness: recovery not done by {world.clock.now_ms()}ms")
    for r in recoverers:
        if r.gave_up:
            checker.fail(f"liveness: {r.name} gave up after {r.attempt} attempts: {r.failures[-1]!r}")
    tailing.stopped = True
    for node in nodes:  # every node serves the read-back
        if not node.up:
            node.start()
    final = Reader(world, "final-reader")
    final.start()
    if any(r.closed for r in recoverers) and not loop.run_until(
        lambda: final.complete and all(n.ready for n in nodes), loop.time() + 30.0
    ):
        checker.fail(f"liveness: final read-back not done by {world.clock.now_ms()}ms")
    closed = world.metadata()
    checker.metadata(closed)
    checker.final(closed, final.read, final.complete)
    if closed is not None and closed.state is LedgerState.CLOSED:
        checker.replicated(closed, {n.node_id: n.holds(ledger_id, closed.last_entry_id) for n in nodes})
    for error in world.loop.errors:
        checker.fail(f"unexpected error: {error}")

    stats = {
        "steps": loop.steps,
        "sim_ms": world.clock.now_ms(),
        "appended": writer.appended,
        "confirmed": writer.confirmed + 1,
        "closed_entries": closed.last_entry_id + 1 if closed else -1,
        "recovered_unconfirmed": max(0, closed.last_entry_id - writer.confirmed) if closed else 0,
        "ensemble_changes": writer.ensemble_changes,
        "writer_failed": int(writer.error is not None),
        "kills": sum(n.process.kills for n in nodes),
        "power_losses": sum(n.power_losses for n in nodes),
        "torn_or_lost_tails": sum(len(n.disk.crash_notes) for n in nodes),
        "fsync_errors": sum(n.disk.fsync_errors for n in nodes),
        "recovery_attempts": sum(r.attempt for r in recoverers),
        "fence_replies": checker.fence_replies,
        "tailer_entries": len(tailing.read),
        "writes": world.net.writes,
        "refused_connects": world.net.refused,
        "resets": world.net.resets,
        "journal_files": sum(1 for n in nodes for name in n.disk.dirs.get(f"/sim/{n.name}/journal", {})),
    }
    digest = hashlib.sha256(repr((sorted(stats.items()), checker.violations)).encode())
    digest.update(closed.to_json() if closed else b"")
    for node in nodes:
        for directory, names in sorted(node.disk.dirs.items()):
            for name, inode in sorted(names.items()):
                digest.update(f"{directory}/{name}".encode() + bytes(inode.data))
    return Outcome(s, checker.violations, stats, digest.hexdigest())
