"""``folio bench gateway``: the peer workloads W1/W2/W3 through Folio's gateways.

Owns: the benchmark run: a local cluster (etcd, 3 storage nodes, auditor, 2
gateways on free loopback ports under ``.folio-bench-gw/``) unless ``--url``
names a running gateway, the sequence of measured runs, CPU accounting per
process group, the printed table and optionally the peer harness (``--peers``)
and py-spy profiles (``--profile``).

Rules (the same as /work/shared/peers, so the figures compare): every run on a
fresh topic; W1 publishes 100 B and 1 KiB payloads, up to ``--msgs`` messages
or ``--seconds``, ``--window`` messages un-acked in flight, and counts only ok
replies (ok = stored on 2 storage nodes with fsync); W3 drains the backlog
W1-100B of the same mode just left, acking every message (from the owner's
cache of recent entries; with ``--w3-from-storage`` the topic is unloaded first,
so the new owner reads it from the storage nodes); W2 offers
``--w2-rate`` msg/s of 100 B for ``--w2-seconds`` and measures end-to-end
latency with a consumer in another process, plus pub-ack latency (the producer
sleeps at least one 1 ms timer tick between sends; ``--w2-pacing spin`` makes
it spin on sub-tick sleeps as the peer harness's producer does, which costs
the client a core). Each run
opens its connection before the clock starts (the topic is loaded then);
REST sends one unmeasured message first for the same reason. Prints figures;
asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import httpx
import orjson
import uvloop

from folio.bench_cpu import CORES, CpuMonitor, machine_busy
from folio.bench_disk import probe as disk_probe
from folio.bench_gateway_load import (
    CONSUME_MODES,
    PUBLISH_MODES,
    TOPIC_PATH,
    LoadResult,
    consume,
    lookup,
    publish,
)
from folio.bench_gateway_report import (
    TOPIC_WORKLOAD,
    Row,
    format_row,
    format_table,
    format_topic_table,
    latency_columns,
    merge_reps,
    peer_rows,
)
from folio.bench_gateway_tools import Profiler, print_profiles, py_spy, run_peers
from folio.bench_gateway_w2 import W2Pace, W2Result, run_w2
from folio.bench_topics import (
    close_spread,
    messages_per_entry,
    open_spread,
    parse_topics,
    run_spread,
    scrape_nodes,
)
from folio.supervisor import LocalCluster, on_free_ports
from storage.runtime import tune_gc

SCRATCH = ".folio-bench-gw"
QUIET_PCT = 25.0  # machine busy % (of 100 * cores) below which --wait-idle starts
SIZES = (100, 1024)
WORKLOADS = ("W1", "W2", "W3")
IDLE_S = 2.0  # the topic curve: servers' CPU with the N topics open and no load, measured this long


@dataclass(frozen=True)
class Settings:
    seconds: float
    msgs: int
    window: int
    batch: int
    modes: tuple[str, ...]
    workloads: tuple[str, ...]
    reps: int
    w2_seconds: float
    w2_rate: float
    w2_spin: bool
    settle: float
    w3_from_storage: bool = False
    topics: tuple[int, ...] = ()  # the topic curve: the W1 per-frame load over each count


@dataclass
class Target:
    """Where to send load, and the PIDs to charge CPU to (empty with ``--url``)."""

    http_url: str
    groups: dict[str, list[int]]
    gateway_pids: dict[str, int]  # http url -> pid
    node_pids: list[int]
    node_metrics: list[str] = field(default_factory=list)  # the storage nodes' /metrics URLs
    profile_dir: Path | None = None
    spy: str | None = None
    native: bool = False  # py-spy --native (pauses the process per sample)


def _split(text: str, allowed: tuple[str, ...], what: str, empty_ok: bool = False) -> tuple[str, ...]:
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in items if x not in allowed]
    if bad or not (items or empty_ok):
        raise SystemExit(f"--{what}: {', '.join(bad) or 'nothing given'}; choose from {', '.join(allowed)}")
    return items


def w1_row(mode: str, size: int, res: LoadResult, cpu: dict[str, float], seconds: float) -> Row:
    p50, p99 = latency_columns(res.latencies_ms)
    notes = [f"ack latency; capped at {seconds:g} s" if res.capped_by_time else "ack latency"]
    if res.reconnects:
        notes.append(f"{res.reconnects} reconnect(s): the topic moved")
    if res.first_error:
        notes.append(f"first error: {res.first_error}")
    el = max(res.seconds, 1e-9)
    return Row("folio", "W1", mode, size, res.ok, res.seconds, res.ok / el, res.ok * size / el / 1e6,
               p50, p99, cpu, res.errors, "; ".join(notes), res.error_kinds)  # fmt: skip


def w3_row(mode: str, backlog: int, res: LoadResult, cpu: dict[str, float], stored: bool = False) -> Row:
    notes = [f"backlog {backlog:,}" + (" read from the storage nodes" if stored else "")]
    if res.capped_by_time:
        notes.append("time-capped")
    if res.duplicates:
        notes.append(f"{res.duplicates} redelivered")
    if res.reconnects:
        notes.append(f"{res.reconnects} reconnect(s): the topic moved")
    el = max(res.seconds, 1e-9)
    return Row("folio", "W3", mode, 100, res.ok, res.seconds, res.ok / el, res.ok * 100 / el / 1e6,
               cpu=cpu, note=", ".join(notes))  # fmt: skip


def w2_rows(mode: str, rate: float, res: W2Result, cpu: dict[str, float]) -> list[Row]:
    sent_rate = res.sent / max(res.send_seconds, 1e-9)
    note = f"offered {rate:g}/s, received {res.received:,}/{res.expected:,}"
    if res.duplicates:
        note += f", {res.duplicates} redelivered"
    if res.reconnects:
        note += f", {res.reconnects} reconnect(s): the topic moved"
    if res.first_error:
        note += f"; first error: {res.first_error}"
    p50, p99 = latency_columns(res.e2e_ms)
    e2e = Row("folio", "W2 e2e", mode, 100, res.received, res.send_seconds, sent_rate, sent_rate * 100 / 1e6,
              p50, p99, cpu, res.errors, note, res.error_kinds)  # fmt: skip
    a50, a99 = latency_columns(res.ack_ms)
    ack = Row("folio", "W2 ack", mode, 100, len(res.ack_ms), res.send_seconds, sent_rate,
              sent_rate * 100 / 1e6, a50, a99, cpu, 0, "pub-ack latency")  # fmt: skip
    return [e2e, ack]


def _profiler(target: Target, label: str) -> Profiler | None:
    """py-spy on every gateway (the topic may move) and on the first storage node."""
    if target.profile_dir is None or target.spy is None:
        return None
    pids = {f"gateway-{url.rsplit(':', 1)[-1]}": pid for url, pid in target.gateway_pids.items()}
    if target.node_pids:
        pids["node0"] = target.node_pids[0]
    return Profiler(target.spy, pids, target.profile_dir, label, native=target.native) if pids else None


async def _warm_rest(http_base: str, topic: str) -> None:
    """One unmeasured message, so the topic is loaded before the clock starts (as a WS connect does)."""
    _, http_url = await lookup(http_base, topic)
    async with httpx.AsyncClient(timeout=15.0) as http:
        response = await http.post(
            f"{http_url}/topics/{TOPIC_PATH}/{topic}", json={"messages": [{"payload": "w"}]}
        )
        response.raise_for_status()


async def _unload(http_base: str, topic: str) -> None:
    """Unload ``topic`` (its owner closes it; the next use loads it with an empty cache)."""
    async with httpx.AsyncClient(timeout=30.0) as http:
        response = await http.put(f"{http_base}/admin/v2/{TOPIC_PATH}/{topic}/unload")
        response.raise_for_status()


@contextlib.contextmanager
def measured(target: Target, label: str) -> Iterator[dict[str, float]]:
    """CPU accounting (and a py-spy profile with ``--profile``) around one measured run."""
    cpu: dict[str, float] = {}
    profiler = _profiler(target, label)
    monitor = CpuMonitor(target.groups).start()
    try:
        yield cpu
    finally:
        cpu.update(monitor.stop())
        if profiler is not None:
            profiler.stop()


async def w1_w3(s: Settings, target: Target, topic: str, mode: str, size: int, rep: int) -> list[Row]:
    """W1 on a fresh topic; then W3 on its backlog when this is the 100 B run of a consume mode."""
    rows = []
    if mode == "rest-batch":
        await _warm_rest(target.http_url, topic)
    with measured(target, f"W1-{mode}-{size}-r{rep}") as cpu:
        res = await publish(
            mode, target.http_url, topic, os.urandom(size), s.msgs, s.seconds, s.window, s.batch
        )
    if "W1" in s.workloads:
        rows.append(w1_row(mode, size, res, cpu, s.seconds))
    if "W3" in s.workloads and size == 100 and mode in CONSUME_MODES:
        if s.w3_from_storage:
            await _unload(target.http_url, topic)
        await asyncio.sleep(s.settle)
        with measured(target, f"W3-{mode}-r{rep}") as cpu:
            got = await consume(mode, target.http_url, topic, "w3", res.ok, s.seconds, s.window)
        rows.append(w3_row(mode, res.ok, got, cpu, s.w3_from_storage))
    return rows


async def w2(s: Settings, target: Target, topic: str, mode: str, rep: int) -> list[Row]:
    profiler = _profiler(target, f"W2-{mode}-r{rep}")

    def start_cpu(child_pid: int) -> Callable[[], dict[str, float]]:
        groups = {**target.groups, "client": [*target.groups.get("client", []), child_pid]}
        return CpuMonitor(groups).start().stop

    try:
        pace = W2Pace(s.w2_rate, s.w2_seconds, spin=s.w2_spin)
        result, cpu = await run_w2(target.http_url, topic, pace, mode == "ws-batch", start_cpu)
    finally:
        if profiler is not None:
            profiler.stop()
    return w2_rows(mode, s.w2_rate, result, cpu)


def topic_row(
    topics: int,
    window: int,
    res: LoadResult,
    cpu: dict[str, float],
    closed: int,
    per_entry: float | None = None,
    per_sync: float | None = None,
) -> Row:
    """One row of the topic curve; ``per_entry``: messages per stored entry; ``per_sync``:
    entries per journal fdatasync on the storage nodes."""
    p50, p99 = latency_columns(res.latencies_ms)
    note = f"{window} in flight over {topics:,} topic(s), one per frame"
    if per_entry is not None:
        note += f"; {per_entry:.1f} msgs per stored entry"
    if per_sync is not None:
        note += f", {per_sync:.1f} entries per node fdatasync"
    if closed:
        note += f"; {closed} session(s) closed by the gateway"
    if res.first_error:
        note += f"; first error: {res.first_error}"
    el = max(res.seconds, 1e-9)
    return Row("folio", TOPIC_WORKLOAD, "ws", 100, res.ok, res.seconds, res.ok / el, res.ok * 100 / el / 1e6,
               p50, p99, cpu, res.errors, note, res.error_kinds, topics=topics)  # fmt: skip


async def topic_curve(
    s: Settings, target: Target, run_id: str, rep: int, add: Callable[[list[Row]], None]
) -> None:
    """The same per-frame load over each topic count in turn, on fresh topics."""
    for count in s.topics:
        names = [f"gwbench-{run_id}-t{count}-r{rep}-{i}" for i in range(count)]
        try:
            spread = await open_spread(target.http_url, names, s.window, s.seconds)
            try:
                await asyncio.sleep(s.settle)
                idle = CpuMonitor(target.groups).start()  # the N topics open, no load: their upkeep
                await asyncio.sleep(min(IDLE_S, s.seconds))
                idle_cpu = idle.stop()
                before = await scrape_nodes(target.node_metrics)
                with measured(target, f"topics-{count}-r{rep}") as cpu:
                    res = await run_spread(spread)
                after = await scrape_nodes(target.node_metrics)
                closed = spread.closed_sessions  # by the gateway, before we close the rest
            finally:
                await close_spread(spread)
            cpu.update({f"{group} idle": idle_cpu[group] for group in ("gw", "node") if group in idle_cpu})
            per_entry = messages_per_entry(spread.message_ids)
            syncs, adds = after[0] - before[0], after[1] - before[1]
            per_sync = adds / syncs if syncs > 0 else None
            add([topic_row(count, s.window, res, cpu, closed, per_entry, per_sync)])
        except Exception as exc:
            add(
                [
                    replace(row, workload=TOPIC_WORKLOAD, topics=count)
                    for row in failed_rows(["x"], "ws", 100, exc)
                ]
            )
        await asyncio.sleep(s.settle)


def failed_rows(workloads: Sequence[str], mode: str, size: int, exc: BaseException) -> list[Row]:
    note = f"FAILED: {type(exc).__name__}: {exc}"[:300]
    kinds = {note: 1}
    return [Row("folio", w, mode, size, 0, 0.0, 0.0, 0.0, errors=1, note=note, error_kinds=kinds)
            for w in workloads]  # fmt: skip


async def run_workloads(
    s: Settings, target: Target, say: Callable[[str], None], system: str = "folio", reps: range | None = None
) -> list[Row]:
    """Every run in the peers' order; a run that fails becomes a FAILED row and the next one goes on.
    Rows are labelled ``system`` (the persistence policy, when several are compared)."""
    run_id = secrets.token_hex(3)
    rows: list[Row] = []

    def add(new: list[Row]) -> None:
        for made in new:
            row = replace(made, system=system)
            rows.append(row)
            say(format_row(row))

    for rep in reps if reps is not None else range(s.reps):
        for size in SIZES:
            for mode in s.modes:
                wanted = [w for w in ("W1", "W3") if w in s.workloads]
                if size != 100 or mode not in CONSUME_MODES:
                    wanted = [w for w in wanted if w == "W1"]
                if not wanted:
                    continue
                try:
                    add(await w1_w3(s, target, f"gwbench-{run_id}-{mode}-{size}-r{rep}", mode, size, rep))
                except Exception as exc:
                    add(failed_rows(wanted, mode, size, exc))
                await asyncio.sleep(s.settle)
        for mode in (m for m in s.modes if m in CONSUME_MODES and "W2" in s.workloads):
            try:
                add(await w2(s, target, f"gwbench-{run_id}-w2-{mode}-r{rep}", mode, rep))
            except Exception as exc:
                add(failed_rows(["W2 e2e", "W2 ack"], mode, 100, exc))
            await asyncio.sleep(s.settle)
        await topic_curve(s, target, run_id, rep, add)
    return rows


def start_cluster(root: Path, gateway_args: tuple[str, ...] = ()) -> LocalCluster:
    cluster = on_free_ports(root, gateway_args=gateway_args)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def cluster_target(cluster: LocalCluster) -> Target:
    assert cluster.etcd is not None and cluster.etcd.pid is not None and cluster.auditor is not None
    gateways = {g.http_url: g.pid for g in cluster.gateways}
    nodes = [n.pid for n in cluster.nodes]
    groups = {
        "gw": list(gateways.values()),
        "node": nodes,
        "etcd": [cluster.etcd.pid, cluster.auditor.pid],
        "client": [os.getpid()],
    }
    metrics = [f"http://{n.metrics_address}/metrics" for n in cluster.nodes if n.metrics_address]
    return Target(cluster.gateways[0].http_url, groups, gateways, nodes, metrics)


def _drop_data(root: Path) -> None:
    """Delete the cluster's data directories, keep its logs."""
    if root.exists():
        for child in root.iterdir():
            if child.is_dir():
                shutil.rmtree(child, ignore_errors=True)


def settings_from(args: argparse.Namespace) -> Settings:
    topics = parse_topics(args.topics)
    return Settings(
        seconds=args.seconds,
        msgs=args.msgs,
        window=args.window,
        batch=args.batch,
        modes=_split(args.modes, PUBLISH_MODES, "modes"),
        workloads=_split(args.workloads.upper(), WORKLOADS, "workloads", empty_ok=bool(topics)),
        reps=max(1, args.reps),
        w2_seconds=args.w2_seconds,
        w2_rate=args.w2_rate,
        w2_spin=args.w2_pacing == "spin",
        settle=args.settle,
        w3_from_storage=args.w3_from_storage,
        topics=topics,
    )


def peer_settings(s: Settings) -> dict[str, str]:
    return {
        "PEERS_REPS": str(s.reps),
        "W1_MSGS": str(s.msgs),
        "W1_SECS": str(max(1, round(s.seconds))),
        "W3_SECS": str(max(1, round(s.seconds))),
        "W2_SECS": str(max(1, round(s.w2_seconds))),
        "W2_RATES": str(round(s.w2_rate)),
        "WINDOW": str(s.window),
        "WORKLOADS": ",".join(s.workloads),
    }


def wait_idle(max_wait_s: float) -> None:
    """Report how busy the box is before we start; wait up to ``max_wait_s`` for it to calm down."""
    deadline = time.monotonic() + max_wait_s
    busy = machine_busy(1.0)
    while busy > QUIET_PCT and time.monotonic() < deadline:
        print(f"box busy {busy:.0f}% of {100 * CORES}% (not us); waiting for < {QUIET_PCT:.0f}%", flush=True)
        busy = machine_busy(5.0)
    print(f"box busy before start: {busy:.0f}% of {100 * CORES}% (other tenants)", flush=True)


def persistence_body(text: str) -> dict[str, int] | None:
    """``--persistence E,QW,QA`` as Pulsar's persistence policy body (None if not given)."""
    if not text:
        return None
    try:
        ensemble, write, ack = (int(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"--persistence: expected E,QW,QA (e.g. 3,2,2), got {text!r}") from None
    return {"bookkeeperEnsemble": ensemble, "bookkeeperWriteQuorum": write, "bookkeeperAckQuorum": ack}


def persistence_label(body: dict[str, int] | None, several: bool) -> str:
    """The rows' system name: "folio", or "folio E/Qw/Qa" when several policies are compared."""
    return f"folio {'/'.join(str(v) for v in body.values())}" if several and body else "folio"


def set_persistence(http_url: str, body: dict[str, int]) -> None:
    """Set the bench namespace's persistence policy (new ledgers, so every run's fresh topic, use it)."""
    namespace = TOPIC_PATH.split("/", 1)[1]
    response = httpx.post(f"{http_url}/admin/v2/namespaces/{namespace}/persistence", json=body, timeout=15.0)
    if response.status_code >= 300:
        raise SystemExit(f"--persistence refused: {response.status_code} {response.text[:300]}")


def say_disk(scratch: Path, when: str) -> None:
    """The disk's speed now: figures that write a lot (W1 1 KiB) follow it."""
    rate = disk_probe(scratch)
    print(f"disk {when}: {rate:.0f} MB/s of 256 KiB appends + fdatasync (0.5 s probe)", flush=True)


def run_title(s: Settings) -> str:
    """What the plots say about the run (pure)."""
    return (
        f"folio bench gateway: window {s.window}, batch {s.batch}, {s.seconds:g} s runs,"
        f" {s.reps} rep(s), {os.cpu_count()} CPUs"
    )


def run_bench(args: argparse.Namespace) -> int:
    s = settings_from(args)
    policies = [persistence_body(text) for text in args.persistence or [""]]
    wait_idle(args.wait_idle)
    scratch = Path(SCRATCH).resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    cluster: LocalCluster | None = None
    if args.url:
        target = Target(args.url.rstrip("/"), {"client": [os.getpid()]}, {}, [])
    else:
        print(f"starting a local cluster under {scratch / 'cluster'} ...", flush=True)
        cluster = start_cluster(scratch / "cluster")
        target = cluster_target(cluster)
    if args.profile or args.profile_native:
        target.spy = py_spy()
        target.native = args.profile_native
        target.profile_dir = scratch / "profile"
        shutil.rmtree(target.profile_dir, ignore_errors=True)
        if target.spy is None or not target.gateway_pids:
            print(
                "--profile: "
                + ("py-spy not found" if target.spy is None else "needs the bench's own cluster")
            )
            target.profile_dir = None
    profiled = " (PROFILED: py-spy running)" if target.profile_dir else ""
    ledgers = ", ".join("/".join(str(v) for v in q.values()) if q else "cluster default" for q in policies)
    print(
        f"folio bench gateway: {target.http_url}, modes {','.join(s.modes)}, window {s.window},"
        f" batch {s.batch}, W1 <= {s.msgs:,} msgs / {s.seconds:g} s, W2 {s.w2_rate:g} msg/s x"
        f" {s.w2_seconds:g} s ({'spin' if s.w2_spin else 'tick'} pacing), {s.reps} rep(s),"
        f" {os.cpu_count()} CPUs, ledgers E/Qw/Qa {ledgers}{profiled}",
        flush=True,
    )
    say_disk(scratch, "before the runs")
    try:
        tune_gc()
        rows: list[Row] = []
        for rep in range(s.reps):  # policies alternate within each rep: a drifting disk hits them alike
            for policy in policies:
                if policy is not None:
                    set_persistence(target.http_url, policy)
                system = persistence_label(policy, len(policies) > 1)
                say = lambda line: print(line, flush=True)  # noqa: E731
                rows += uvloop.run(run_workloads(s, target, say, system, range(rep, rep + 1)))
    finally:
        if cluster is not None:
            cluster.stop()
            _drop_data(scratch / "cluster")
    where = (
        "srv = gw+node+etcd+auditor" if cluster is not None else "--url: server CPU unknown, it is in oth%"
    )
    print(f"\n== Folio (median of {s.reps} rep(s); CPU in % of one core; {where})")
    merged = merge_reps(rows)
    curve = [r for r in merged if r.workload == TOPIC_WORKLOAD]
    if len(curve) < len(merged):
        print(format_table([r for r in merged if r.workload != TOPIC_WORKLOAD]))
    if curve:
        print(f"\n== the topic curve: W1 100 B one per frame, {s.window} in flight over N topics"
              " (µs = CPU microseconds per acked message)")  # fmt: skip
        print(format_topic_table(curve))
    peer_rows_: list[Row] = []
    if args.peers:
        print("\n== peers (same settings; /work/shared/peers harness)", flush=True)
        say_disk(scratch, "before the peers")
        per_cfg = (3 * s.seconds + s.w2_seconds + 60) * s.reps
        run = run_peers(
            Path(args.peers_dir),
            args.peer_systems.split(","),
            scratch / "peers",
            peer_settings(s),
            2 * per_cfg + 60,
        )
        for problem in run.problems:
            print(f"peers: {problem}")
        peer_rows_ = merge_reps(peer_rows(run.records))
        if peer_rows_:
            print(format_table(peer_rows_))
    if target.profile_dir is not None:
        print_profiles(target.profile_dir)
    if args.json:
        for row in [*merged, *peer_rows_]:
            print(orjson.dumps({"kind": "gateway-bench", **asdict(row)}).decode())
    if args.plots:
        from folio.bench_plots import write_plots

        for path in write_plots(Path(args.plots), merged, peer_rows_, run_title(s)):
            print(f"plot: {path}")
    print(f"\n(total {time.monotonic() - started:.0f} s)")
    return 0
