"""The simulation harness itself: disk durability model, node replay, network order, timers.

If these broke, the ledger simulation could pass for the wrong reason (a disk
that never loses anything, a node that forgets nothing, a network that never
reorders), so the harness is tested like any other code.
"""

from __future__ import annotations

from typing import Any

import pytest

from coordination.memory_store import MemoryStore
from storage import wire
from storage.errors import Status
from storage.node import journal_io
from storage.node.journal_core import JournalConfig

from .checkers import Checker
from .sim_client import SimClient
from .sim_node import Reply, SimNode
from .world import NetConfig, Scheduler, SimClock, SimDisk, SimNetwork, Timer, seeded

pytestmark = pytest.mark.sim


def test_a_crash_never_touches_synced_bytes_and_sometimes_tears_the_rest() -> None:
    modes = set()
    for seed in range(300):
        rng = seeded(seed, "disk-test")
        disk = SimDisk(rng)
        disk.create("j")
        synced = rng.randbytes(rng.randint(0, 100))
        disk.append("j", synced)
        disk.sync("j", len(synced))
        disk.append("j", rng.randbytes(rng.randint(1, 100)))
        modes.update(note.split(":")[1].split()[0] for note in disk.crash())
        after = disk.read("j")
        assert after[: len(synced)] == synced
        assert disk.files["j"].durable == len(after)  # what survived is on disk now
    assert modes == {"drop", "prefix", "torn"}


def test_without_fsync_the_disk_promises_nothing() -> None:
    disk = SimDisk(seeded(0, "disk-test"), fsync_enabled=False)
    disk.create("j")
    disk.append("j", b"x" * 100)
    disk.sync("j", 100)
    assert disk.files["j"].durable == 0 and disk.unsynced_bytes == 100


class World:
    def __init__(self, seed: int = 1) -> None:
        self.clock = SimClock()
        self.sched = Scheduler(self.clock)
        self.checker = Checker(7, self.clock.now_ms)
        self.net = SimNetwork(self.sched, seeded(seed, "net"), NetConfig())
        store = MemoryStore(self.clock)
        config = JournalConfig(max_group_wait_ms=1)
        self.node = SimNode("n0", self.sched, self.net, store, self.checker, config, seeded(seed, "n"), True)
        self.net.register(self.node)
        self.client = SimClient("c", self.sched, self.net)
        self.replies: list[Reply] = []

    def call(self, op: wire.Op, body: bytes = b"", entry_id: int = -1) -> Reply:
        self.client.request("n0", op, 7, self.replies.append, entry_id, body)
        assert self.sched.run(lambda: bool(self.replies), self.clock.now_ms() + 1000, lambda: None)
        return self.replies.pop()


def entry(entry_id: int, lac: int) -> bytes:
    return wire.encode_entry(7, entry_id, lac, f"payload {entry_id}".encode())


def test_a_node_restarts_from_its_durable_journal_and_ignores_a_torn_record() -> None:
    w = World()
    for e in range(5):
        w.checker.writer_appended(e, entry(e, e - 1))
        assert w.call(wire.Op.ADD, wire.add_body(entry(e, e - 1))).status is Status.OK
    torn = entry(5, 4)
    w.node.disk.append(w.node._file, journal_io.add_record_head(torn) + torn[:-3])  # written, not synced
    w.node.crash()
    w.node.restart()
    assert sorted(e for _, e in w.node.entries) == [0, 1, 2, 3, 4]
    assert w.node.lac(7) == 3
    assert w.call(wire.Op.READ, entry_id=4).data == entry(4, 3)
    assert w.call(wire.Op.READ, entry_id=5).status is Status.NO_SUCH_ENTRY
    assert not w.checker.violations


def test_a_fence_is_answered_only_once_durable_and_survives_a_restart() -> None:
    w = World()
    w.checker.writer_appended(0, entry(0, -1))
    reply = w.call(wire.Op.FENCE)
    assert reply.status is Status.OK and w.node.disk.unsynced_bytes == 0
    w.node.crash()
    w.node.restart()
    assert w.call(wire.Op.ADD, wire.add_body(entry(0, -1))).status is Status.FENCED
    assert w.call(wire.Op.ADD, wire.add_body(entry(0, -1), recovery=True)).status is Status.OK


class Recorder:
    def __init__(self, name: str) -> None:
        self.name = name
        self.up = True
        self.incarnation = 0
        self.got: list[Any] = []

    def receive(self, message: Any, src: str) -> None:
        self.got.append((src, message))

    def on_disconnect(self, peer: str, incarnation: int) -> None:
        self.got.append((peer, f"reset {incarnation}"))


def test_the_network_keeps_order_within_a_connection_but_not_across() -> None:
    reordered = False
    for seed in range(20):
        sched = Scheduler(SimClock())
        net = SimNetwork(sched, seeded(seed, "net"), NetConfig(delay_max_ms=10))
        got = Recorder("dst").got
        for name in ("a", "b", "dst"):
            recorder = Recorder(name)
            recorder.got = got
            net.register(recorder)
        for i in range(50):
            net.send("a", "dst", i)
            net.send("b", "dst", i)
        sched.run(lambda: False, 10_000, lambda: None)
        for src in ("a", "b"):
            assert [m for s, m in got if s == src] == list(range(50))
        reordered |= [s for s, _ in got] != ["a", "b"] * 50
    assert reordered


def test_a_message_to_a_crashed_process_is_lost_and_the_sender_hears_a_reset() -> None:
    sched = Scheduler(SimClock())
    net = SimNetwork(sched, seeded(0, "net"), NetConfig())
    a, b = Recorder("a"), Recorder("b")
    net.register(a)
    net.register(b)
    net.send("a", "b", "in flight")
    b.incarnation += 1  # b crashed before the message arrived
    b.up = False
    net.send("a", "b", "refused")
    sched.run(lambda: False, 1000, lambda: None)
    assert b.got == [] and a.got == [("b", "reset 1")] and net.lost == 2


def test_a_timer_that_never_moves_its_deadline_is_reported_as_a_busy_loop() -> None:
    sched = Scheduler(SimClock())
    spins: list[str] = []
    timer = Timer(sched, lambda: timer.arm(sched.clock.now_ms()), spins.append)
    timer.arm(5)
    sched.run(lambda: False, 100, lambda: None)
    assert len(spins) == 1 and "busy loop" in spins[0]
    assert Timer.SPINS_MAX <= sched.steps <= Timer.SPINS_MAX + 1  # then it stays disarmed
