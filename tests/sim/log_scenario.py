"""Seeded scenarios of the gateway's managed log (gateway/broker/managed_log.py) on the
simulated storage: ledger rolls and owner takeovers over the real node and client.

Owns: one topic's log written by a succession of owners. Each owner opens the log
with ``ManagedLog.open`` under a newer epoch (recovering, fencing and closing the
ledgers of the one before: log_takeover.py) and appends with a window while its
ledgers roll every few entries (log_roll.py); the next owner takes over while the
previous one may still be writing (a zombie) or after it was killed. The storage
faults are those of scenario.py. At the end every node is started again and a last
owner opens the log and reads it from its first ledger on.
Checks (docs/testing.md §3 and §8): every append an owner was told is confirmed is
read back at the position it was given, no position or payload twice, nothing
nobody appended, and each owner's confirmed appends in the order it made them.
Broken rule for the control: ``skip_recovery`` - an owner that takes a log over
without recovering its ledgers (it marks them CLOSED at the LAC the nodes report,
then opens the log as usual, which finds them closed).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any

from coordination import keys
from coordination.errors import CoordinationError
from gateway.broker.log_policy import RolloverPolicy
from gateway.broker.log_state import LogConfig, LogError
from gateway.broker.managed_log import ManagedLog
from storage.errors import StorageError
from storage.formats.log_record import decode_state, encode_state
from storage.formats.positions import Position
from storage.types import LedgerState

from .scenario import SIM_TIME_MAX_S, Scenario, World, close_unrecovered, inject_faults, make_scenario
from .world import Stalled, seeded

TOPIC = "persistent/sim/ns/log"


@dataclass(frozen=True, slots=True)
class LogScenario:
    storage: Scenario  # cluster, network, disks and the storage fault plan
    owners: int
    appends: int  # per owner
    window: int
    entries_per_ledger: int
    takeover_ms: tuple[int, ...]  # when owner k+1 starts, after owner k started
    kill_previous: tuple[bool, ...]  # owner k is killed when k+1 starts (else it lingers)
    skip_recovery: bool = False

    def describe(self) -> str:
        return (
            f"SEED={self.storage.seed} owners={self.owners} appends={self.appends} window={self.window} "
            f"entries_per_ledger={self.entries_per_ledger} takeover_ms={list(self.takeover_ms)} "
            f"kill_previous={list(self.kill_previous)} skip_recovery={self.skip_recovery} | "
            + self.storage.describe()
        )


def make_log_scenario(seed: int, skip_recovery: bool = False) -> LogScenario:
    rng = seeded(seed, "log-scenario")
    storage = make_scenario(seed)
    owners = rng.randint(2, 3)
    storage = replace(storage, ensemble=3, nodes=max(storage.nodes, 3), writer_closes=False)
    return LogScenario(
        storage=storage,
        owners=owners,
        appends=rng.randint(10, 30),
        window=rng.choice((1, 4, 8)),
        entries_per_ledger=rng.choice((3, 5, 12)),
        takeover_ms=tuple(rng.randint(20, 300) for _ in range(owners - 1)),
        kill_previous=tuple(rng.random() < 0.5 for _ in range(owners - 1)),
        skip_recovery=skip_recovery,
    )


@dataclass(slots=True)
class LogOutcome:
    scenario: LogScenario
    violations: list[str]
    stats: dict[str, int] = field(default_factory=dict)


class Owner:
    def __init__(self, world: World, index: int, s: LogScenario, appended: dict[bytes, int]) -> None:
        self.world = world
        self.index = index
        self.s = s
        self.process, self._make = world.client(f"owner{index}", f"owner{index}")
        self._appended = appended  # payload -> owner
        self.acked: list[tuple[bytes, Position]] = []
        self.read: list[tuple[Position, bytes]] = []
        self.opened = False
        self.done = False
        self.error: Exception | None = None

    def start(self, read_back: bool = False) -> None:
        self.process.start(lambda: self._main(read_back))

    async def _open(self, client: Any) -> ManagedLog:
        config = LogConfig(rollover=RolloverPolicy(entries_max=self.s.entries_per_ledger))
        while True:
            try:
                if self.s.skip_recovery:
                    await self._close_without_recovery(client)
                return await ManagedLog.open(
                    TOPIC, self.world.store, client, self.world.clock, config, epoch=self.index + 1
                )
            except (StorageError, CoordinationError, LogError) as exc:
                if "newer" in str(exc) or "epoch" in str(exc):
                    raise
                await asyncio.sleep(0.05)

    async def _close_without_recovery(self, client: Any) -> None:
        """The control's broken rule: mark the log's open ledgers CLOSED at the LAC
        the nodes report, without fencing or recovering them."""
        kv = await self.world.store.get(keys.managed_log(TOPIC))
        ledgers, _, _ = decode_state(kv.value)
        for info in ledgers:
            reader = await client.open(info.ledger_id, recover=False)
            if reader.metadata.state is LedgerState.OPEN:
                lac = reader.last_add_confirmed
                await client.metadata.update(info.ledger_id, lambda cur, lac=lac: close_unrecovered(cur, lac))

    async def _main(self, read_back: bool) -> None:
        client = self._make()
        try:
            log = await self._open(client)
            self.opened = True
            if read_back:
                await self._read_all(log)
            else:
                await self._write(log)
        except (StorageError, CoordinationError, LogError) as exc:
            self.error = exc
        finally:
            self.done = True

    async def _write(self, log: ManagedLog) -> None:
        for i in range(self.s.appends):
            while log.pending_appends >= self.s.window and not log.fenced:
                await asyncio.sleep(0.002)
            if log.fenced or log.closed:
                return
            payload = f"o{self.index}/{i}".encode()
            self._appended[payload] = self.index

            def done(future: asyncio.Future[Position], payload: bytes = payload) -> None:
                if not future.cancelled() and future.exception() is None:
                    self.acked.append((payload, future.result()))

            log.append(payload, on_done=done)
            await asyncio.sleep(0.001)
        while log.pending_appends and not log.fenced:
            await asyncio.sleep(0.005)

    async def _read_all(self, log: ManagedLog) -> None:
        """From the first ledger on; a read stops at its ledger's end, the next goes on."""
        if not log.ledgers:
            return
        position = Position(log.ledgers[0].ledger_id, 0)
        while got := await log.read(position, 100):
            self.read.extend(got)
            position = Position(got[-1][0].ledger_id, got[-1][0].entry_id + 1)


def run_log(s: LogScenario) -> LogOutcome:
    world = World(s.storage)
    try:
        return _run_log(world, s)
    except Stalled as exc:
        return LogOutcome(s, [f"liveness: the world stalled: {exc}", *world.loop.errors])
    finally:
        world.loop.close()


def _run_log(world: World, s: LogScenario) -> LogOutcome:
    loop, nodes = world.loop, world.nodes
    violations: list[str] = []
    for node in nodes:
        node.start()
    loop.run_until(lambda: all(node.ready for node in nodes), 10.0)
    world.memory._state.put(keys.managed_log(TOPIC), encode_state([], 0, {}), 0)
    appended: dict[bytes, int] = {}
    owners = [Owner(world, k, s, appended) for k in range(s.owners)]
    owners[0].start()
    at = loop.time()
    for k in range(1, s.owners):
        at += s.takeover_ms[k - 1] / 1000

        def take_over(k: int = k) -> None:
            if s.kill_previous[k - 1]:
                owners[k - 1].process.kill()
            owners[k].start()

        loop.call_at(at, take_over)
    inject_faults(world)
    end_ms = max(s.storage.faults_end_ms, int(at * 1000) + 50)
    if not loop.run_until(lambda: world.clock.now_ms() >= end_ms and owners[-1].done, SIM_TIME_MAX_S):
        violations.append(f"liveness: the last writing owner not done by {world.clock.now_ms()}ms")
    for node in nodes:
        if not node.up:
            node.start()
    last = Owner(world, s.owners, s, appended)
    last.start(read_back=True)
    if not loop.run_until(lambda: last.done and all(n.ready for n in nodes), loop.time() + 60):
        violations.append(f"liveness: the read-back not done by {world.clock.now_ms()}ms")
    if last.error is not None:
        violations.append(f"the read-back owner failed: {last.error!r}")
    violations += check(owners, last.read, appended)
    violations += [f"unexpected error: {error}" for error in loop.errors]
    stats = {
        "acked": sum(len(o.acked) for o in owners),
        "appended": len(appended),
        "read": len(last.read),
        "ledgers": len({p.ledger_id for p, _ in last.read}),
        "kills": sum(n.process.kills for n in nodes),
        "sim_ms": world.clock.now_ms(),
    }
    return LogOutcome(s, violations, stats)


def check(owners: list[Owner], read: list[tuple[Position, bytes]], appended: dict[bytes, int]) -> list[str]:
    problems: list[str] = []
    where: dict[bytes, Position] = {}
    for i, (position, payload) in enumerate(read):
        if i and position <= read[i - 1][0]:
            problems.append(f"read-back out of order: {position} after {read[i - 1][0]}")
        if payload in where:
            problems.append(f"{payload!r} read twice: at {where[payload]} and {position}")
        if payload not in appended:
            problems.append(f"{payload!r} at {position}: nobody appended it")
        where[payload] = position
    for owner in owners:
        last = Position(-1, -1)
        for payload, position in sorted(owner.acked, key=lambda acked: int(acked[0].split(b"/")[1])):
            found = where.get(payload)
            if found is None:
                problems.append(f"LOSS: {payload!r}, confirmed at {position}, is not in the log")
            elif found != position:
                problems.append(f"{payload!r} confirmed at {position} but read at {found}")
            elif position <= last:
                problems.append(f"owner{owner.index}: {payload!r} at {position} not after {last}")
            last = max(last, position)
    return problems[:50]
