"""``folio bench spark``: the connector against the gateways' WebSocket paths.

Owns: one run on a local cluster (etcd, 3 storage nodes, auditor, 2 gateways on
free loopback ports under ``.folio-bench-spark/``, no analytics service):
``--msgs`` messages of ``--size`` bytes published with the batched WebSocket
publisher to a ``--partitions``-partition topic; then, on that backlog, the
connector's read in ``local[2]``, a WebSocket reader per partition one message
per frame (``ws``) and with batched delivery (``ws-batch``); then ``df.write``
of ``--msgs`` rows to a fresh topic against the batched WebSocket publisher's
figure. The read is a full read of every column into Spark rows written to
Spark's ``noop`` sink (its tool for measuring a source: every row is
materialised, nothing is stored), one stage, with ``observe`` counting the rows
and summing the value lengths on the way (checked against what was published).
Read and write are each measured after a warm-up of the same kind
(``WARM_READS`` reads of the topic; a write of ``WARM_ROWS`` rows to a topic of
their own), so Spark's Python worker processes are up and the JVM has compiled
its row conversion, as in a long-lived session such as the analytics service's
(successive reads in one session run faster until the JIT is done: 1.39, 1.23,
0.98 s in one quiet run); each warm-up's time is printed too.
The read then runs ``READ_PASSES`` times, each pass printed; the median pass
is the read's figure (one pass on a shared box can be disturbed; the passes
show the spread).
A WebSocket reader stops after ``--ws-seconds`` (its rate is what it read by then). Reports msg/s,
the Spark session's start time and CPU per process group (storage nodes,
gateways, the Spark JVM, its Python workers). Rules: every figure is
``messages / seconds`` of one pass after the session is up; the machine's own
load before the run is printed beside them. Asserts nothing but that the reads
and writes handled every message.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from folio.bench_cpu import CLOCK_TICKS, CpuMonitor, machine_busy, stat_ticks
from folio.bench_gateway_load import consume, publish
from folio.supervisor import LocalCluster, on_free_ports

TOPIC = "spark-bench"
WARM_ROWS = 10
WARM_READS = 3  # the JVM compiles Spark's Arrow-to-row conversion over the first reads
READ_PASSES = 3  # on a shared box one pass can be disturbed: the median, and every pass printed


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` now (from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    data = f.read()
                parents[int(entry)] = int(data[data.rindex(")") + 2 :].split()[1])
            except (FileNotFoundError, ProcessLookupError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        current = frontier.pop()
        kids = [child for child, parent in parents.items() if parent == current]
        found += kids
        frontier += kids
    return found


def _ticks(pid: int, children: bool) -> int:
    """utime + stime of ``pid`` (with ``children``: plus those of its exited, waited-for
    descendants - short-lived Python workers - and of the descendants alive now)."""
    own, waited = stat_ticks(pid)
    if not children:
        return own
    return own + waited + sum(_ticks(child, False) for child in _children(pid))


def _timed(
    label: str, count: int, run: Callable[[], Any], groups: dict[str, list[int]], jvm: int | None = None
) -> dict[str, Any]:
    """Run ``run`` once; it returns how many messages it handled (None: ``count``).
    With ``jvm``, CPU of the Spark JVM and of its Python workers is added."""
    monitor = CpuMonitor(groups).start()
    jvm0 = (_ticks(jvm, False), _ticks(jvm, True)) if jvm else (0, 0)
    start = time.perf_counter()
    handled = run()
    seconds = time.perf_counter() - start
    count = count if handled is None else handled
    cpu = monitor.stop()
    if jvm:
        own, tree = _ticks(jvm, False) - jvm0[0], _ticks(jvm, True) - jvm0[1]
        cpu["spark-jvm"] = own / CLOCK_TICKS / seconds * 100
        cpu["spark-py"] = (tree - own) / CLOCK_TICKS / seconds * 100
    row = {"run": label, "messages": count, "seconds": round(seconds, 2), "msg/s": round(count / seconds)}
    row["cpu %"] = {name: round(value) for name, value in cpu.items()}
    print(
        f"{label:<34} {count:>9} msgs {seconds:8.2f} s {count / seconds:>10,.0f} msg/s   cpu {row['cpu %']}"
    )
    return row


def _session() -> tuple[Any, float]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    started = time.perf_counter()
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("folio-bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.range(1).count()
    return spark, time.perf_counter() - started


def run_bench(args: argparse.Namespace) -> int:
    root = Path(args.data)
    cluster = on_free_ports(root)
    print(f"machine busy before the run: {machine_busy():.0f}% of {os.cpu_count()} cores (100 = one core)")
    cluster.start()
    try:
        return _run(cluster, args)
    finally:
        cluster.stop()


def _run(cluster: LocalCluster, args: argparse.Namespace) -> int:
    assert cluster.etcd is not None
    http = cluster.gateways[0].http_url
    n, parts = args.msgs, args.partitions
    per_partition = n // parts
    groups: dict[str, list[int]] = {
        "node": [node.pid for node in cluster.nodes],
        "gw": [g.pid for g in cluster.gateways],
        "bench": [os.getpid()],
    }
    payload = os.urandom(args.size)
    for name in (TOPIC, f"{TOPIC}-written", f"{TOPIC}-warm"):
        reply = httpx.put(
            f"{http}/admin/v2/persistent/public/default/{name}/partitions", json=parts, timeout=30
        )
        reply.raise_for_status()

    def publish_all() -> None:
        async def go() -> None:
            results = await asyncio.gather(
                *(
                    publish(
                        "ws-batch", http, f"{TOPIC}-partition-{p}", payload, per_partition, 600, 4000, 500
                    )
                    for p in range(parts)
                )
            )
            assert sum(r.ok for r in results) == per_partition * parts, [r.ok for r in results]

        asyncio.run(go())

    rows = [_timed("publish, batched WebSocket", per_partition * parts, publish_all, groups)]
    spark, session_s = _session()
    print(f"Spark session local[2] started in {session_s:.1f} s")
    jvm = spark.sparkContext._gateway.proc.pid
    options = {"etcd": cluster.etcd.endpoint, "topic": f"persistent://public/default/{TOPIC}"}

    def spark_read() -> None:
        from pyspark.sql import Observation
        from pyspark.sql import functions as f

        seen = Observation("read")
        df = spark.read.format("folio").options(**options).load()
        counted = df.observe(seen, f.count(f.lit(1)).alias("n"), f.sum(f.length("value")).alias("b"))
        counted.write.format("noop").mode("overwrite").save()
        total = seen.get
        assert total == {"n": per_partition * parts, "b": per_partition * parts * args.size}, total

    for i in range(WARM_READS):  # warm: Python workers started, the JVM's row conversion compiled
        _timed(f"read warm-up {i + 1}", per_partition * parts, spark_read, groups, jvm)
    label = "read, Spark connector local[2]"
    passes = [
        _timed(f"{label} pass {i + 1}", per_partition * parts, spark_read, groups, jvm)
        for i in range(READ_PASSES)
    ]
    median = sorted(passes, key=lambda r: r["msg/s"])[READ_PASSES // 2]
    rows.append({**median, "run": label})
    print(f"{label}: median of {READ_PASSES} passes {median['msg/s']:,} msg/s")

    cap = args.ws_seconds  # a WebSocket reader's rate is what it read in at most this long
    for mode, label in (("ws", "read, WebSocket one msg per frame"), ("ws-batch", "read, WebSocket batched")):

        def ws_read(mode: str = mode) -> int:
            async def go() -> int:
                results = await asyncio.gather(
                    *(
                        consume(
                            mode, http, f"{TOPIC}-partition-{p}", f"bench-{mode}", per_partition, cap, 1000
                        )
                        for p in range(parts)
                    )
                )
                return sum(r.ok for r in results)

            return asyncio.run(go())

        rows.append(_timed(label, per_partition * parts, ws_read, groups, jvm))

    def spark_write(count: int = per_partition * parts, topic: str = f"{TOPIC}-written") -> None:
        from pyspark.sql import functions as f

        df = spark.range(count, numPartitions=2).select(f.lit(payload).alias("value"))
        df.write.format("folio").options(etcd=options["etcd"]).option(
            "topic", f"persistent://public/default/{topic}"
        ).mode("append").save()

    warm = f"{TOPIC}-warm"
    _timed(f"write warm-up, {WARM_ROWS} rows", WARM_ROWS, lambda: spark_write(WARM_ROWS, warm), groups)
    rows.append(_timed("write, Spark df.write local[2]", per_partition * parts, spark_write, groups, jvm))
    spark.stop()
    by = {r["run"]: r["msg/s"] for r in rows}
    read = by["read, Spark connector local[2]"]
    print(
        f"Spark read / WebSocket per frame: {read / by['read, WebSocket one msg per frame']:.1f}x; "
        f"/ WebSocket batched: {read / by['read, WebSocket batched']:.1f}x; "
        f"df.write / batched WebSocket publish: "
        f"{by['write, Spark df.write local[2]'] / by['publish, batched WebSocket']:.2f}x"
    )
    print(f"machine busy after the run: {machine_busy():.0f}%")
    return 0
