"""``folio bench analytics``: the statistics service's full and incremental runs.

Owns: the benchmark - a local cluster (etcd, 3 storage nodes, 2 gateways and
the analytics service on ``--master``), ``--messages`` messages of
``--size`` bytes with ``--keys`` distinct keys published over REST batches to
``--topics`` topics, then a statistics run over all of it (full), then
``--more`` messages more and a second run (incremental: it reads only what is
new). Prints per run the messages read, the run's own duration and the wall
time from request to finish, msg/s of each, and the service's resident memory
(its process and every descendant: the Spark JVM and Python workers).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import time
from pathlib import Path
from typing import Any

import httpx

from folio.supervisor import on_free_ports

BATCH = 500  # messages per REST request
IN_FLIGHT = 8
RETRIES = 50


def tree_rss_bytes(pid: int) -> int:
    """VmRSS of ``pid`` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo.extend(children.get(current, []))
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


async def publish(urls: list[str], topics: list[str], count: int, size: int, keys: int, start: int) -> float:
    """Publish ``count`` messages spread over ``topics``; seconds taken."""
    payload = "x" * size
    gate = asyncio.Semaphore(IN_FLIGHT)
    began = time.monotonic()
    async with httpx.AsyncClient(timeout=120) as http:

        async def one(i: int, low: int) -> None:
            topic = topics[i % len(topics)]
            n = min(BATCH, start + count - low)
            body = {
                "producerName": "bench",
                "messages": [{"payload": payload, "key": f"key-{(low + j) % keys}"} for j in range(n)],
            }
            for attempt in range(RETRIES):  # a topic moving between gateways answers 503 a moment
                async with gate:
                    url = urls[(i + attempt) % len(urls)]
                    reply = await http.post(f"{url}/topics/persistent/public/default/{topic}", json=body)
                if reply.status_code not in (429, 503):
                    break
                await asyncio.sleep(0.2)
            reply.raise_for_status()

        await asyncio.gather(*(one(i, low) for i, low in enumerate(range(start, start + count, BATCH))))
    return time.monotonic() - began


def run_once(url: str, service_pid: int, timeout_s: float = 3600.0) -> dict[str, Any]:
    """Request a run, wait for it; its figures, wall time and the service's RSS at the end."""
    peak = 0
    with httpx.Client(timeout=30) as http:
        began = time.monotonic()
        target = http.post(f"{url}/admin/v2/analytics/run").json()["runId"] + 1
        while True:
            peak = max(peak, tree_rss_bytes(service_pid))
            record = http.get(f"{url}/admin/v2/analytics/run").json()
            if record["runId"] >= target and record["state"] == "idle":
                break
            if time.monotonic() - began > timeout_s:
                raise RuntimeError(f"run {target} did not finish: {record}")
            time.sleep(0.5)
        wall = time.monotonic() - began
    if record["error"]:
        raise RuntimeError(f"run {target} failed: {record['error']}")
    return {**record["last"], "wallS": wall, "peakRss": peak}


def run_bench(args: argparse.Namespace) -> int:
    root = Path(args.data).resolve()
    cluster = on_free_ports(root, analytics_master=args.master)
    topics = [f"bench-analytics-{i}" for i in range(args.topics)]
    try:
        cluster.start()
        assert cluster.analytics is not None
        urls = [g.http_url for g in cluster.gateways]
        httpx.put(f"{urls[0]}/admin/v2/analytics/settings", json={"intervalSeconds": 0}, timeout=30)
        began = time.monotonic()
        if not cluster.analytics.leader.wait(600):
            raise RuntimeError(f"the analytics service was not elected:\n{cluster.analytics.log_tail()}")
        print(f"analytics service elected, Spark {args.master} up after {time.monotonic() - began:.1f} s")
        seconds = asyncio.run(publish(urls, topics, args.messages, args.size, args.keys, 0))
        print(
            f"published {args.messages:,} messages of {args.size} B to {args.topics} topics"
            f" in {seconds:.1f} s"
        )
        pid = cluster.analytics.pid
        rows = [("full", run_once(urls[0], pid))]
        print(f"full run: {rows[0][1]}", flush=True)
        seconds = asyncio.run(publish(urls, topics, args.more, args.size, args.keys, args.messages))
        print(f"published {args.more:,} more in {seconds:.1f} s")
        rows.append(("incremental", run_once(urls[0], pid)))
        rss = tree_rss_bytes(pid)
        print(
            f"\n{'run':<12} {'read':>10} {'run s':>8} {'msg/s':>10} {'wall s':>8}"
            f" {'wall msg/s':>11} {'peak RSS':>9}"
        )
        for name, r in rows:
            run_s = r["durationMs"] / 1000
            read = r["messagesRead"]
            print(
                f"{name:<12} {read:>10,} {run_s:>8.1f} {read / run_s:>10,.0f} {r['wallS']:>8.1f}"
                f" {read / r['wallS']:>11,.0f} {r['peakRss'] / 2**20:>7,.0f} MiB"
            )
        for name, r in rows:
            print(
                f"{name}: listing {r['listMs']} ms, Spark read + fold {r['readMs']} ms,"
                f" results {r['writeMs']} ms"
            )
        print(
            f"service resident memory after the runs: {rss / 2**20:,.0f} MiB (process + Spark JVM + workers)"
        )
    finally:
        cluster.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0
