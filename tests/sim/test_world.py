"""Tests of the simulated world itself (world.py): virtual time, processes, the disk's
durability model, the network's order and resets, and the real node over them."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from storage import wire
from storage.client.connection import ConnectionConfig, NodeConnection
from storage.errors import Status
from storage.node.server import NodeServer
from storage.node.service import NodeConfig, NodeService

from .world import (
    NetConfig,
    Process,
    SimClock,
    SimDisk,
    SimDiskPort,
    SimLoop,
    SimNetwork,
    Stalled,
    seeded,
)

pytestmark = pytest.mark.sim

J = Path("/d/j")


def disk_with_file(disk: SimDisk, loop: SimLoop) -> tuple[SimDiskPort, int]:
    port = SimDiskPort(disk, Process(loop, "p"))
    port.makedirs(Path("/d"))
    fd = port.open(J, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    port.fsync(port.open(Path("/d"), os.O_RDONLY | os.O_DIRECTORY))  # the name is durable
    return port, fd


def test_a_power_loss_never_touches_synced_bytes_and_sometimes_tears_the_rest() -> None:
    loop = SimLoop(0)
    modes = set()
    for seed in range(300):
        rng = seeded(seed, "disk-test")
        disk = SimDisk(rng)
        port, fd = disk_with_file(disk, loop)
        synced = rng.randbytes(rng.randint(0, 100))
        port.write(fd, synced)
        port.fdatasync(fd)
        port.pwritev(fd, [rng.randbytes(rng.randint(1, 100))], len(synced))
        disk.power_loss()
        modes.update(note.split(":")[1].split()[0] for note in disk.crash_notes)
        after = port.read_bytes(J)
        assert after[: len(synced)] == synced
        assert disk.unsynced_bytes == 0  # what survived is on disk now
    assert modes == {"drop", "prefix", "torn"}
    loop.close()


def test_an_overwrite_of_synced_zeros_is_not_durable_until_synced() -> None:
    loop = SimLoop(0)
    disk = SimDisk(seeded(1, "disk-test"))
    port, fd = disk_with_file(disk, loop)
    port.posix_fallocate(fd, 0, 64)  # preallocated zeros, then synced
    port.fdatasync(fd)
    port.pwritev(fd, [b"x" * 10], 8)
    for _ in range(20):
        disk.power_loss()
        assert port.read_bytes(J)[:8] == bytes(8)
        port.pwritev(fd, [b"x" * 10], 8)
    loop.close()


def test_without_fsync_the_disk_promises_nothing_and_new_names_need_a_directory_sync() -> None:
    loop = SimLoop(0)
    disk = SimDisk(seeded(0, "disk-test"), fsync_enabled=False)
    port, fd = disk_with_file(disk, loop)
    port.write(fd, b"x" * 100)
    port.fdatasync(fd)
    assert disk.unsynced_bytes == 100
    safe = SimDisk(seeded(0, "disk-test"))
    port = SimDiskPort(safe, Process(loop, "p"))
    port.makedirs(Path("/d"))
    fd = port.open(J, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    port.write(fd, b"y")
    port.fdatasync(fd)
    safe.power_loss()
    assert not port.exists(J)  # created after the last directory sync
    loop.close()


def test_virtual_time_jumps_to_the_next_timer_and_a_killed_process_runs_nothing() -> None:
    loop = SimLoop(0)
    clock = SimClock(loop)
    seen: list[tuple[str, int]] = []
    victim = Process(loop, "victim")

    async def ticking(name: str) -> None:
        for _ in range(3):
            await asyncio.sleep(10)  # ten virtual seconds, no wall time
            seen.append((name, clock.now_ms()))

    victim.start(lambda: ticking("victim"))
    survivor = Process(loop, "survivor")
    survivor.start(lambda: ticking("survivor"))
    loop.call_later(15, victim.kill)
    assert loop.run_until(lambda: len(seen) == 4, 100)
    assert seen == [("victim", 10_000), ("survivor", 10_000), ("survivor", 20_000), ("survivor", 30_000)]
    with pytest.raises(Stalled):
        loop.run_until(lambda: False, 100)
    loop.close()


def test_the_network_keeps_order_within_a_connection_and_resets_peers_of_a_killed_process() -> None:
    loop = SimLoop(3)
    net = SimNetwork(loop, seeded(3, "net"), NetConfig(delay_min_ms=1, delay_max_ms=30))
    got: list[bytes] = []
    lost: list[Exception | None] = []

    class Sink(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            got.append(data)

    class Source(asyncio.Protocol):
        def connection_lost(self, exc: Exception | None) -> None:
            lost.append(exc)

    server, client = Process(loop, "server"), Process(loop, "client")
    server_net, client_net = net.port(server), net.port(client)

    async def serve() -> None:
        await server_net.listen("server", 1, Sink, 1)
        await asyncio.sleep(1000)

    async def send() -> None:
        transport, _ = await client_net.connect("server", 1, Source)
        for i in range(50):
            transport.write(b"%d," % i)

    server.start(serve)
    client.start(send)
    assert loop.run_until(lambda: len(got) == 50, 10)
    assert b"".join(got) == b"".join(b"%d," % i for i in range(50))
    server.kill()
    assert loop.run_until(lambda: bool(lost), 10)
    assert isinstance(lost[0], ConnectionResetError)
    loop.close()


def test_the_real_node_answers_a_fence_once_durable_and_keeps_it_across_a_power_loss() -> None:
    """The real NodeService/NodeServer and NodeConnection over the simulated ports."""
    loop = SimLoop(5)
    clock = SimClock(loop)
    net = SimNetwork(loop, seeded(5, "net"), NetConfig())
    node, client = Process(loop, "n0", (1, 3)), Process(loop, "c")
    disk = SimDisk(seeded(5, "disk"))
    node_net, client_net = net.port(node), net.port(client)
    replies: list[Status] = []

    async def serve() -> None:
        service = NodeService(NodeConfig(Path("/n0")), clock, disk=SimDiskPort(disk, node))
        await service.start()
        await NodeServer(service, lambda: b"{}", idle_timeout_s=0, network=node_net).start("n0", 1)

    async def ask(op: wire.Op, body: bytes) -> None:
        connection = NodeConnection("n0:1", ConnectionConfig(auth_secret=None), clock, client_net)
        status, _ = await connection.request(op, body, 5_000)
        replies.append(status)

    node.start(serve)
    client.start(lambda: ask(wire.Op.FENCE, wire.ledger_body(7)))
    assert loop.run_until(lambda: len(replies) == 1, 10) and replies == [Status.OK]
    node.kill()
    disk.power_loss()
    node.start(serve)
    loop.run_until(lambda: False, loop.time() + 1)  # the node replays its journal and listens
    client.kill()
    client.start(lambda: ask(wire.Op.ADD, wire.add_body(wire.encode_entry(7, 0, -1, b"late"))))
    assert loop.run_until(lambda: len(replies) == 2, 10)
    assert replies[1] is Status.FENCED
    loop.close()
