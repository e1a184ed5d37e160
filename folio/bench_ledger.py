"""``folio bench ledger``: one writer, E=3 Qw=3 Qa=2, three local nodes.

Owns: the ledger benchmark. For each entry size it measures throughput and
add latency at saturation (a window of ``--inflight`` pipelined adds) and at
half that rate (paced, open loop), and the raw append + fdatasync ceiling of
the same disk, and the CPU each phase cost per entry: the bench's own process
(the writer) and the three nodes together, beside what the nodes burn idle over
the same time (their timers and background work), so the per-entry cost is not
mistaken for a fixed one. The paced phases send in ticks of at least one
millisecond (an event loop's timers are no finer), so the bench's sleeps never
turn into a spin that takes the CPU from the nodes it measures. Prints figures;
asserts nothing (speed is measured, not tested).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import os
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import orjson
import uvloop

from coordination.etcd_store import connect
from folio.bench_cpu import CpuMonitor
from folio.bench_disk import DiskCeiling, measure
from folio.bench_stats import percentile
from folio.supervisor import LocalCluster, on_free_ports
from storage.client.api import LedgerClient
from storage.client.writer import LedgerWriter
from storage.runtime import tune_gc

SETTLE_S = 3.0
TICK_S = 0.001  # the paced phases' shortest sleep: one timer tick


@dataclass(frozen=True)
class Phase:
    entry_bytes: int
    mode: str  # "saturation", "half" (of saturation) or a fixed light rate "N/s"
    entries: int
    seconds: float
    entries_per_s: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float
    ensemble_changes: int
    client_us: float = 0.0  # the bench's own CPU per entry
    nodes_us: float = -1.0  # the three nodes' CPU per entry (-1: nodes not started by the bench)
    idle_nodes_us: float = -1.0  # what the nodes burn idle over the phase's time, per entry


def with_cpu(phase: Phase, cpu: CpuMonitor, idle_nodes_per_s: float) -> Phase:
    """``phase`` with the CPU it cost per entry (``cpu`` started with the phase; its
    ``nodes`` group empty when the bench did not start the nodes)."""
    used = cpu.seconds()
    n = max(1, phase.entries)
    known = bool(cpu.groups["nodes"])
    return replace(
        phase,
        client_us=used["client"] / n * 1e6,
        nodes_us=used["nodes"] / n * 1e6 if known else -1.0,
        idle_nodes_us=idle_nodes_per_s * phase.seconds / n * 1e6 if known else -1.0,
    )


async def saturate(writer: LedgerWriter, size: int, seconds: float, inflight: int) -> Phase:
    """Keep ``inflight`` appends outstanding; completions arrive in entry order,
    so the oldest future is the next to finish."""
    payload = os.urandom(size)
    latencies: list[float] = []
    window: collections.deque[tuple[float, asyncio.Future[int]]] = collections.deque()
    start = time.perf_counter()
    while True:
        now = time.perf_counter()
        if now - start >= seconds:
            break
        while len(window) < inflight:
            window.append((now, writer.append_nowait(payload)))
        await window[0][1]
        now = time.perf_counter()
        while window and window[0][1].done():
            sent, future = window.popleft()
            future.result()
            latencies.append((now - sent) * 1000)
    for sent, future in window:
        await future
        latencies.append((time.perf_counter() - sent) * 1000)
    elapsed = time.perf_counter() - start
    done = len(latencies)
    return Phase(
        size,
        "saturation",
        done,
        elapsed,
        done / elapsed,
        done * size / elapsed / 1e6,
        percentile(latencies, 50),
        percentile(latencies, 99),
        writer.ensemble_changes,
    )


async def paced(writer: LedgerWriter, size: int, seconds: float, rate: float) -> Phase:
    payload = os.urandom(size)
    latencies: list[float] = []
    futures: list[asyncio.Future[int]] = []

    def record(started: float, _future: asyncio.Future[int]) -> None:
        latencies.append((time.perf_counter() - started) * 1000)

    start = time.perf_counter()
    sent = 0
    while time.perf_counter() - start < seconds:
        due = int((time.perf_counter() - start) * rate) + 1
        while sent < due:
            started = time.perf_counter()
            future = await writer.submit(payload)
            future.add_done_callback(functools.partial(record, started))
            futures.append(future)
            sent += 1
        await asyncio.sleep(max(TICK_S, start + sent / rate - time.perf_counter()))
    await asyncio.gather(*futures)
    elapsed = time.perf_counter() - start
    return Phase(
        size,
        "half",
        sent,
        elapsed,
        sent / elapsed,
        sent * size / elapsed / 1e6,
        percentile(latencies, 50),
        percentile(latencies, 99),
        writer.ensemble_changes,
    )


async def bench(
    etcd: str, sizes: list[int], seconds: float, inflight: int, light_rate: float, node_pids: list[int]
) -> list[Phase]:
    store = await connect(etcd)
    client = LedgerClient(store)
    cpu = CpuMonitor({"client": [os.getpid()], "nodes": node_pids})
    phases: list[Phase] = []
    try:
        for size in sizes:
            writer = await client.create(3, 3, 2)
            warm = await saturate(writer, size, min(1.0, seconds / 4), inflight)
            del warm
            await asyncio.sleep(SETTLE_S)  # let nodes finish background flushing of the last phase
            cpu.start()
            await asyncio.sleep(SETTLE_S)  # the nodes idle: their fixed cost per second
            idle = cpu.seconds()["nodes"] / SETTLE_S
            cpu.start()
            full = with_cpu(await saturate(writer, size, seconds, inflight), cpu, idle)
            await asyncio.sleep(SETTLE_S)
            cpu.start()
            half = with_cpu(await paced(writer, size, seconds, full.entries_per_s / 2), cpu, idle)
            await asyncio.sleep(SETTLE_S)
            cpu.start()
            light = with_cpu(await paced(writer, size, seconds, light_rate), cpu, idle)
            phases += [full, half, replace(light, mode=f"{light_rate:.0f}/s")]
            await writer.close()
            await client.delete(writer.ledger_id)
    finally:
        await client.close()
        await store.close()
    return phases


def run_bench(args: argparse.Namespace) -> int:
    sizes = [int(s) for s in args.sizes.split(",")]
    root = Path(".folio-bench").resolve()
    cluster: LocalCluster | None = None
    etcd = args.etcd
    if not etcd:
        cluster = on_free_ports(root, gateways=0)
        cluster.start()
        etcd = cluster.etcd.endpoint if cluster.etcd else ""
    try:
        print(
            f"folio bench ledger: E=3 Qw=3 Qa=2, 3 storage nodes, etcd {etcd}, inflight {args.inflight},"
            f" {args.seconds:.0f} s per phase, {os.cpu_count()} CPUs"
        )
        started = time.monotonic()
        tune_gc()  # as every long-running Folio process does (storage/runtime.py)
        node_pids = [node.pid for node in cluster.nodes] if cluster else []
        phases = uvloop.run(bench(etcd, sizes, args.seconds, args.inflight, args.light_rate, node_pids))
        ceilings: list[DiskCeiling] = [measure(root / "ceiling", size) for size in sizes]
    finally:
        if cluster is not None:
            cluster.stop()
            shutil.rmtree(root, ignore_errors=True)
    print(
        f"\n{'entry':>7} {'load':<11} {'entries/s':>10} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'chg':>4}"
        f"  {'CPU us/entry: bench':>19} {'3 nodes':>8} {'nodes idle':>10}"
    )
    for p in phases:
        nodes = f"{p.nodes_us:>8.1f} {p.idle_nodes_us:>10.1f}" if p.nodes_us >= 0 else f"{'-':>8} {'-':>10}"
        print(
            f"{p.entry_bytes:>7} {p.mode:<11} {p.entries_per_s:>10,.0f} {p.mb_per_s:>8.1f} {p.p50_ms:>8.2f}"
            f" {p.p99_ms:>8.2f} {p.ensemble_changes:>4}  {p.client_us:>19.1f} {nodes}"
        )
    print("\ndisk ceiling on the same disk (one writer):")
    print(
        f"{'entry':>7} {'fdatasync/entry: ops/s':>24} {'p50 ms':>7} {'p99 ms':>7} {'256KiB/sync: MB/s':>18}"
        f" {'entries/s':>10}"
    )
    for c in ceilings:
        print(
            f"{c.entry_bytes:>7} {c.syncs_per_s:>24,.0f} {c.sync_p50_ms:>7.2f} {c.sync_p99_ms:>7.2f}"
            f" {c.grouped_mb_per_s:>18.1f} {c.grouped_entries_per_s:>10,.0f}"
        )
    print(f"\n(total {time.monotonic() - started:.0f} s)")
    if args.json:
        for p in phases:
            print(orjson.dumps({"kind": "ledger", **asdict(p)}).decode())
        for c in ceilings:
            print(orjson.dumps({"kind": "disk", **asdict(c)}).decode())
    return 0
