"""``folio analytics``: command-line entry of the analytics service.

Owns: argument parsing, connecting to etcd and running ``AnalyticsService``
until SIGTERM/SIGINT (exit 0) or a lost lease (exit 75: restart me, as a
gateway does). Prints ``FOLIO-ANALYTICS READY`` once a candidate and
``FOLIO-ANALYTICS LEADER`` once elected with its Spark session up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket

# Spark starts its JVM with fork+exec while etcd's gRPC threads run; gRPC's fork handlers
# then break the child now and then (JAVA_GATEWAY_EXITED): this process needs none of them.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from coordination.etcd_store import connect
from folio_analytics.service import AnalyticsService

EXIT_LEASE_LOST = 75


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="folio analytics", description="Run the Spark statistics service (one is elected; others wait)."
    )
    parser.add_argument("--etcd", default="127.0.0.1:2379", help="etcd endpoints host:port[,host:port]")
    parser.add_argument("--etcd-namespace", default="", help="key prefix (tests)")
    parser.add_argument(
        "--master", default="local[*]", help="Spark master: local[*], local[2], spark://host:7077"
    )
    parser.add_argument("--id", default=None, help="service id (default host-pid)")
    parser.add_argument("--lease-ttl", type=int, default=10)
    parser.add_argument("--log-level", default="warning")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> int:
    store = await connect(args.etcd, namespace=args.etcd_namespace)
    options = {"etcd": args.etcd}
    if args.etcd_namespace:
        options["etcdNamespace"] = args.etcd_namespace
    service = AnalyticsService(
        store,
        args.id or f"{socket.gethostname()}-{os.getpid()}",
        options,
        master=args.master,
        lease_ttl_s=args.lease_ttl,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    work = asyncio.create_task(service.run())
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if work.done():
            work.result()
            return EXIT_LEASE_LOST  # run() returns only when the lease is lost
        return 0
    finally:
        for task in (work, stopping):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await service.close()
        await store.close()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper())
    return asyncio.run(serve(args))
