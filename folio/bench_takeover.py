"""``folio bench takeover``: how fast a dead gateway's topics are served again.

Owns: a local cluster for the run (etcd, 3 storage nodes, the auditor, 2
gateways with their default lease, no analytics service, under
``.folio-bench-takeover/``), creating ``--topics`` topics through the first
gateway, then ``folio.takeover.measure_takeover``: publishing to each through
the second, kill -9 of the first, and the printed breakdown. Asserts nothing.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import uvloop

from folio.supervisor import on_free_ports
from folio.takeover import create_topics, measure_takeover, topic_path


def run_bench(args: argparse.Namespace) -> int:
    root = Path(args.data).resolve()
    cluster = on_free_ports(root)
    try:
        cluster.start()
        assert cluster.etcd is not None
        owner, survivor = cluster.gateways
        paths = [topic_path("bench-takeover", i) for i in range(args.topics)]

        async def run() -> None:
            await create_topics(owner.http_url, paths)
            result = await measure_takeover(
                paths,
                owner_id=owner.address,
                survivor_url=survivor.http_url,
                survivor_id=survivor.address,
                kill=owner.kill9,
                etcd=cluster.etcd.endpoint if cluster.etcd else "",
                pace_s=args.pace_ms / 1000,
            )
            print("\n".join(result.lines()), flush=True)

        uvloop.run(run())
    finally:
        cluster.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0
