"""``folio bench fanout`` / ``folio bench stuck``: overload runs against a local cluster.

Owns: starting a local cluster (etcd, 3 storage nodes, auditor, 2 gateways
with their default lease TTL, under ``.folio-bench-fanout/``) unless ``--url``
names running gateways, running one workload of ``folio.load_fanout`` and
printing what it measured: gateways alive at the end, messages delivered to
every reading consumer, close codes, the gateways' largest RSS. Asserts
nothing; the load tests run the same workloads at a smaller size.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import uvloop

from folio.bench_gateway import start_cluster
from folio.load_fanout import Watch, alive_of, mib, run_fanout, run_stuck


async def _run(args: argparse.Namespace, urls: list[str], pids: list[int]) -> int:
    watch = Watch(pids, alive_of(pids)).start() if pids else None
    for url, pid in zip(urls, pids, strict=False):
        print(f"gateway {url}: pid {pid}")
    if args.bench == "fanout":
        res = await run_fanout(
            urls, consumers=args.consumers, rate=args.rate, seconds=args.seconds, payload=args.size
        )
        print(
            f"fanout: consumers={res.consumers} rate={args.rate:g}/s seconds={args.seconds:g} "
            f"deliveries/s offered={res.consumers * args.rate:.0f} published={res.published} "
            f"publish_errors={res.publish_errors} delivered={res.deliveries} missing={res.missing} "
            f"complete_consumers={res.complete} closes={dict(res.closes)} elapsed={res.seconds:.1f}s"
        )
    else:
        stuck = await run_stuck(
            urls, stuck=args.consumers, bursts=args.bursts, burst=args.burst, payload=args.size
        )
        print(
            f"stuck: consumers={stuck.stuck} published={stuck.published} closes={dict(stuck.closes)} "
            f"reader_got={stuck.reader_got} reader_close={stuck.reader_close} "
            f"reader_done_after={stuck.seconds:.1f}s"
        )
    if watch is not None:
        await watch.stop()
        for pid in pids:
            state = "DIED" if pid in watch.died else "alive"
            start, top = mib(watch.rss_start[pid]), mib(watch.rss_max[pid])
            print(f"gateway pid {pid}: {state}, RSS start {start} max {top}")
        return 1 if watch.died else 0
    return 0


def run_bench(args: argparse.Namespace) -> int:
    if args.url:
        return uvloop.run(_run(args, args.url.split(","), []))
    root = Path(args.data).resolve()
    cluster = start_cluster(root, ("--sessions-per-role", str(args.consumers + 100)))
    try:
        urls = [g.http_url for g in cluster.gateways]
        pids = [g.pid for g in cluster.gateways]
        return uvloop.run(_run(args, urls, pids))
    finally:
        for gateway in cluster.gateways:
            for line in gateway.log_text().splitlines():
                if "lease" in line.lower() or "FATAL" in line:
                    print(f"gateway {gateway.http_url}: {line.strip()}")
        cluster.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
