"""Seeded scenarios: one ledger, a pipelining writer, faults, recovery, read-back.

Owns: turning a seed into a ``Scenario`` (cluster shape, workload, fault plan,
timing) and running it in a fresh world with the checkers wired to every step.
Phases of a run (docs/compatibility.md §6.2-6.5):
1. nodes boot and register; the ledger is created OPEN on an ensemble chosen by
   the real ``placement``; the writer appends ``entries`` with up to ``window``
   adds in flight (ensemble changes follow from crashes, resets and time-outs);
2. until ``faults_end_ms``: single crashes at seeded instants (at most
   ``max_down`` nodes down at a time), sometimes a correlated outage (several
   nodes lose power at once), clogged writer<->node connections, slow disks and
   fsync stalls; a crash loses only what was not fsynced (dropped, a prefix
   kept, or torn);
3. at ``recovery_at_ms`` - while the writer is still writing in many seeds - a
   recovering client (sometimes two) fences and closes the ledger; a tailing
   reader may run throughout;
4. after the faults every node is restarted, and a fresh reader reads the
   closed ledger back; the checker then compares it with what the writer did.
A quarter of the seeds use the ``takeover`` family instead (see ``takeover``).
Mutations for control runs: ``fsync=False`` (the node acks before its bytes are
durable) and ``fencing=False`` (nodes ignore the fenced flag for normal adds).
Why any number of simultaneous crashes is fair game: an acked entry was fsynced
on Qa nodes and a crash loses only un-fsynced bytes, so the model never needs
to limit crashes for safety - only permanent disk loss would (not simulated).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field, replace
from functools import partial

from coordination import keys
from coordination.memory_store import MemoryStore
from storage.client import placement
from storage.client.write_effects import WriterConfig
from storage.node.journal_core import JournalConfig
from storage.types import LedgerMetadata, LedgerState, NodeInfo, Segment

from .checkers import Checker
from .sim_client import WriterShell
from .sim_node import SimNode
from .sim_readers import ReaderShell, RecoveryShell
from .world import MetaService, NetConfig, Scheduler, SimClock, SimNetwork, run_now, seeded

LEDGER_ID = 42
SIM_TIME_MAX_MS = 30_000  # a scenario that has not finished by then is a liveness failure
ENTRIES_MAX = 64  # per seed: between half of this and this many appends


@dataclass(frozen=True, slots=True)
class Crash:
    at_ms: int
    node: int
    down_ms: int


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
    crashes: tuple[Crash, ...]
    max_down: int
    outage: tuple[Crash, ...]  # correlated power loss: these nodes crash at the same instant
    clogs: tuple[Clog, ...]
    faults_end_ms: int
    recovery_at_ms: int
    second_recovery_at_ms: int | None  # a concurrent recoverer (they converge through the CAS)
    tailing_reader_at_ms: int | None
    add_timeout_ms: int
    journal: JournalConfig
    net: NetConfig
    fsync_ms: tuple[int, int]
    slow_disks: tuple[int, ...]  # nodes whose fsync takes 5-20x longer (a slow or busy disk)
    fsync_stall: float  # chance that any one fsync stalls for 20-300 ms
    fsync: bool = True
    fencing: bool = True
    family: str = "random"  # or "takeover" (see takeover())

    def describe(self) -> str:
        return (
            f"SEED={self.seed} family={self.family} E={self.ensemble} Qw={self.write_quorum} "
            f"Qa={self.ack_quorum} nodes={self.nodes} entries={self.entries} window={self.window} "
            f"crashes={len(self.crashes)} max_down={self.max_down} outage={[c.node for c in self.outage]} "
            f"clogs={len(self.clogs)} slow_disks={list(self.slow_disks)} recovery_at={self.recovery_at_ms}ms "
            f"fsync={self.fsync} fencing={self.fencing}"
        )


def make_scenario(
    seed: int, entries_max: int = ENTRIES_MAX, fsync: bool = True, fencing: bool = True
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
    fsync_ms = rng.choice(((1, 2), (1, 4), (2, 12)))
    # about how long the writing takes: think time or one round trip per window
    round_trip = net.delay_max_ms + 1 + journal.max_group_wait_ms + sum(fsync_ms) // 2
    horizon = entries * max(think_ms_max // 2 + 1, round_trip // window + 1) + 20
    crashes = tuple(
        Crash(
            rng.randint(0, horizon * 3 // 2),
            rng.randrange(nodes),
            rng.choice((rng.randint(1, 30), rng.randint(30, 400))),
        )
        for _ in range(rng.choice((0, 1, 2, 3, 4, 6, 8)))
    )
    outage_at = rng.randint(horizon // 4, horizon * 3 // 2)
    outage_down = rng.randint(1, 200)
    victims = rng.sample(range(nodes), rng.randint(2, nodes)) if rng.random() < 0.4 else []
    outage = tuple(Crash(outage_at, victim, outage_down) for victim in sorted(victims))
    clogs = [
        Clog(rng.randint(0, horizon), rng.randrange(nodes), rng.random() < 0.5, rng.randint(20, 600))
        for _ in range(rng.choice((0, 0, 1, 2)))
    ]
    slow_disks = {n for n in range(nodes) if rng.random() < 0.25}
    during = rng.random() < 0.6  # recovery while the writer is still writing
    recovery_at = rng.randint(horizon // 5, horizon) if during else rng.randint(horizon, horizon * 2)
    base = Scenario(
        seed=seed,
        ensemble=ensemble,
        write_quorum=3,
        ack_quorum=2,
        nodes=nodes,
        entries=entries,
        window=window,
        think_ms_max=think_ms_max,
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
        net=net,
        fsync_ms=fsync_ms,
        slow_disks=tuple(sorted(slow_disks)),
        fsync_stall=rng.choice((0.0, 0.0, 0.05, 0.2)),
    )
    if rng.random() < 0.25:
        base = takeover(base, rng)
    return replace(base, fsync=fsync, fencing=fencing)


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
        entries=rng.randint(40, 64),
        window=rng.choice((4, 8, 16)),
        think_ms_max=1,
        crashes=(),
        outage=(),
        clogs=(Clog(recovery_at - rng.randint(5, 60), cut_off, True, 2000),),
        slow_disks=(slow,),
        fsync_stall=0.0,
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


def inject_faults(s: Scenario, sched: Scheduler, net: SimNetwork, nodes: list[SimNode]) -> None:
    """Schedule the crashes, the correlated outage, the clogs and the final restart."""
    clock = sched.clock

    def restart_later(node: SimNode, down_ms: int) -> None:
        sched.after(down_ms, lambda: None if node.up else node.restart())

    def crash(plan: Crash) -> None:
        node = nodes[plan.node]
        down = sum(1 for n in nodes if not n.up)
        if node.up and down < s.max_down and clock.now_ms() < s.faults_end_ms:
            node.crash()
            restart_later(node, plan.down_ms)

    def outage() -> None:
        for plan in s.outage:
            node = nodes[plan.node]
            if node.up:
                node.crash()
                restart_later(node, plan.down_ms)

    def clog(src: str, dst: str, ms: int) -> None:
        net.clog(src, dst, clock.now_ms() + ms)

    def restart_all() -> None:
        for node in nodes:
            if not node.up:
                node.restart()

    for plan in s.crashes:
        sched.at(plan.at_ms, partial(crash, plan))
    if s.outage:
        sched.at(s.outage[0].at_ms, outage)
    for c in s.clogs:
        path = ("writer", nodes[c.node].name) if c.to_node else (nodes[c.node].name, "writer")
        sched.at(c.at_ms, partial(clog, *path, c.ms))
    sched.at(s.faults_end_ms, restart_all)


def run(scenario: Scenario) -> Outcome:
    s = scenario
    clock = SimClock()
    sched = Scheduler(clock)
    store = MemoryStore(clock)
    checker = Checker(LEDGER_ID, clock.now_ms)
    net = SimNetwork(sched, seeded(s.seed, "net"), s.net)
    nodes = [
        SimNode(
            f"n{i}",
            sched,
            net,
            store,
            checker,
            s.journal,
            seeded(s.seed, f"node{i}"),
            fsync_enabled=s.fsync,
            fsync_ms=(s.fsync_ms[0] * 5, s.fsync_ms[1] * 20) if i in s.slow_disks else s.fsync_ms,
            fencing=s.fencing,
            fsync_stall=s.fsync_stall,
        )
        for i in range(s.nodes)
    ]
    for node in nodes:
        net.register(node)
    meta = MetaService(sched, seeded(s.seed, "meta"))

    infos = [NodeInfo.from_json(kv.value) for kv in run_now(store.list_prefix(keys.NODES))]
    ensemble = placement.choose_ensemble(infos, s.ensemble, seeded(s.seed, "placement"))
    md = LedgerMetadata(
        LEDGER_ID, s.ensemble, s.write_quorum, s.ack_quorum, LedgerState.OPEN, (Segment(0, ensemble),)
    )
    run_now(store.put(keys.ledger(LEDGER_ID), md.to_json()))

    writer = WriterShell(
        "writer", sched, net, meta, store, checker, md,
        WriterConfig(add_timeout_ms=s.add_timeout_ms, ensemble_retry_ms=50),
        seeded(s.seed, "writer"), s.entries, s.window, s.think_ms_max,
    )  # fmt: skip
    recoverers = [
        RecoveryShell("recoverer", sched, net, meta, store, LEDGER_ID, read_window=8, attempts_max=100)
    ]
    sched.at(s.recovery_at_ms, recoverers[0].start)
    if s.second_recovery_at_ms is not None:
        recoverers.append(RecoveryShell("recoverer2", sched, net, meta, store, LEDGER_ID, read_window=3))
        sched.at(s.second_recovery_at_ms, recoverers[1].start)
    tailing = ReaderShell("tailer", sched, net, meta, store, checker, LEDGER_ID, poll_ms=10)
    final = ReaderShell("final-reader", sched, net, meta, store, checker, LEDGER_ID, poll_ms=20)
    writer.start()
    if s.tailing_reader_at_ms is not None:
        sched.at(s.tailing_reader_at_ms, tailing.start)

    inject_faults(s, sched, net, nodes)

    key = keys.ledger(LEDGER_ID)
    cached: list[tuple[int, LedgerMetadata | None]] = [(-1, None)]

    def current_metadata() -> LedgerMetadata | None:
        kv = run_now(store.get(key))
        if kv is None:
            return None
        if kv.mod_revision != cached[0][0]:
            cached[0] = (kv.mod_revision, LedgerMetadata.from_json(kv.value))
        return cached[0][1]

    writer_lac = [writer.core.lac]

    def after_step() -> None:
        checker.node_lacs((n.name, n.lac(LEDGER_ID)) for n in nodes if n.up)
        if writer.core.lac < writer_lac[0]:
            checker.fail(f"writer core LAC went back from {writer_lac[0]} to {writer.core.lac}")
        writer_lac[0] = writer.core.lac
        checker.metadata(current_metadata())

    def all_done() -> bool:
        return all(r.done for r in recoverers) and clock.now_ms() >= s.faults_end_ms

    if not sched.run(all_done, SIM_TIME_MAX_MS, after_step):
        checker.fail(f"liveness: recovery not done by {clock.now_ms()}ms")
    for r in recoverers:
        if r.stuck:
            checker.fail(f"liveness: {r.name}: {r.stuck}")
        elif r.gave_up:
            checker.fail(f"liveness: {r.name} gave up after {r.attempt} attempts: {r.failures[-1]!r}")
    tailing.stop()
    final.start()
    if any(r.closed for r in recoverers) and not sched.run(
        lambda: final.done, clock.now_ms() + 10_000, after_step
    ):
        checker.fail(f"liveness: final read-back not done by {clock.now_ms()}ms")
    checker.final(current_metadata(), final.read, final.complete)
    checker.replicated(
        current_metadata(), {n.name: {e for lid, e in n.entries if lid == LEDGER_ID} for n in nodes}
    )

    closed = current_metadata()
    stats = {
        "events": sched.steps,
        "sim_ms": clock.now_ms(),
        "appended": writer.appended,
        "confirmed": writer.confirmed + 1,
        "closed_entries": closed.last_entry_id + 1 if closed else -1,
        "recovered_unconfirmed": max(0, closed.last_entry_id - writer.confirmed) if closed else 0,
        "ensemble_changes": writer.core.ensemble_changes,
        "writer_failed": int(writer.error is not None),
        "crashes": sum(n.stats.crashes for n in nodes),
        "torn_or_lost_tails": sum(len(n.stats.crash_notes) for n in nodes),
        "recovery_attempts": sum(r.attempt for r in recoverers),
        "fenced_refusals": sum(n.stats.fenced_refusals for n in nodes),
        "journal_rejects": sum(n.stats.rejected for n in nodes),
        "tailer_entries": len(tailing.read),
        "messages": net.sent,
        "lost_messages": net.lost,
    }
    digest = hashlib.sha256(repr((sorted(stats.items()), checker.violations)).encode())
    digest.update(closed.to_json() if closed else b"")
    for node in nodes:
        for name, f in node.disk.files.items():
            digest.update(f"{node.name}/{name}:{f.durable}".encode() + bytes(f.data))
    return Outcome(scenario, checker.violations, stats, digest.hexdigest())
