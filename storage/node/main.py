"""``folio storage`` / ``python -m storage.node``: run one storage node.

Owns: command-line parsing, process lifecycle (start-up order, READY line,
signals, clean stop) and the node-id cookie check.
Start-up order: check the data dir is writable and the port free (else one
``FATAL ...`` line on stderr, exit 2, no traceback) -> open the data dir
(replay) -> listen -> metrics -> cookie ->
etcd registration (waited for while etcd is missing: coordination.patience)
-> print ``FOLIO-STORAGE READY address=H:P metrics=H:P``.
Stop (SIGTERM/SIGINT, or decommissioned: its drain record turned DRAINED,
docs/decisions/0020): stop listening, finish syncing what was accepted,
checkpoint, revoke the lease, exit 0. Exit 2 = bad arguments, a port in use, a
data dir that cannot be written, belongs to another node id or was written by
an older on-disk format; 70 = fatal
storage error (journal_io.fatal).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path

import uvloop

from coordination.clock import SystemClock, follow_clock_steps
from coordination.etcd_store import EtcdStore, connect
from coordination.patience import patiently
from storage.node.checkpoint import CookieMismatch, UnsupportedDataDir, check_cookie
from storage.node.compaction import (
    COMPACTION_BYTES_PER_ROUND,
    COMPACTION_INTERVAL_S,
    COMPACTION_THRESHOLD,
)
from storage.node.drop_behind import DROP_LAG_BYTES
from storage.node.journal_core import JournalConfig
from storage.node.journal_io import PREALLOC_BYTES
from storage.node.metrics import NodeMetrics
from storage.node.registration import DiskPolicy, Registration
from storage.node.server import IDLE_TIMEOUT_S, MAX_CONNECTIONS, MAX_IN_FLIGHT, MAX_PER_PEER, NodeServer
from storage.node.service import NodeConfig, NodeService
from storage.ports import disk_from_env
from storage.runtime import tune_gc

log = logging.getLogger("folio.storage.main")

EXIT_USAGE = 2
STOP_TIMEOUT_S = 3.0
SWITCH_INTERVAL_S = 0.0005
UNSAFE_ENV = "FOLIO_UNSAFE_TEST_SWITCHES"  # the fault suite's control runs set it; nothing else may


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="folio storage", description="Run a Folio storage node.")
    p.add_argument("--port", type=int, required=True, help="wire-protocol port (0 = any free)")
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--etcd", required=True, help="host:port[,host:port...]")
    p.add_argument("--etcd-namespace", default="", help="key prefix inside etcd (tests, shared etcd)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument(
        "--advertise-host",
        default="",
        help="host other processes reach this node at; part of the node id (default: --host)",
    )
    p.add_argument("--metrics-port", type=int, default=0, help="0 = any free port")
    p.add_argument("--min-free-bytes", type=int, default=0, help="read-only below this free space")
    p.add_argument("--min-free-ratio", type=float, default=0.05, help="read-only below this free share")
    p.add_argument("--lease-ttl", type=int, default=10, help="seconds")
    p.add_argument("--journal-max-wait-ms", type=int, default=2)
    p.add_argument("--journal-rotate-bytes", type=int, default=64 * 1024 * 1024)
    p.add_argument("--journal-queue-bytes", type=int, default=64 * 1024 * 1024)
    p.add_argument(
        "--journal-cache-bytes",
        type=int,
        default=DROP_LAG_BYTES,
        help="the most recent journal bytes kept in the page cache; older pages are dropped "
        "after their fdatasync (-1: keep every page)",
    )
    p.add_argument(
        "--journal-prealloc-bytes",
        type=int,
        default=PREALLOC_BYTES,
        help="journal space allocated ahead of the write offset, so an fdatasync need not "
        "commit a new file size (0: files grow with each write)",
    )
    p.add_argument(
        "--compaction-threshold",
        type=float,
        default=COMPACTION_THRESHOLD,
        help="compact sealed journal files whose live share of bytes is below this (0: never)",
    )
    p.add_argument("--compaction-interval", type=float, default=COMPACTION_INTERVAL_S, help="seconds")
    p.add_argument(
        "--compaction-bytes-per-round",
        type=int,
        default=COMPACTION_BYTES_PER_ROUND,
        help="live bytes one compaction round copies at most (the first file whole)",
    )
    p.add_argument("--checkpoint-interval", type=float, default=1.0, help="seconds")
    p.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS)
    p.add_argument("--max-in-flight", type=int, default=MAX_IN_FLIGHT, help="requests per connection")
    p.add_argument("--max-lac-waiters", type=int, default=10_000)
    p.add_argument(
        "--cluster-secret",
        type=Path,
        default=None,
        help="file with the cluster secret: refuse every connection that does not prove it",
    )
    p.add_argument("--max-connections-per-peer", type=int, default=MAX_PER_PEER, help="from one address")
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=IDLE_TIMEOUT_S,
        help="close a connection idle this long (s; 0: never)",
    )
    p.add_argument(
        "--unsafe-no-fsync",
        action="store_true",
        help=f"CONTROL TESTS ONLY (refused unless {UNSAFE_ENV}=1): ack adds without fdatasync"
        " (acked data can be lost)",
    )
    p.add_argument(
        "--unsafe-no-fencing",
        action="store_true",
        help=f"CONTROL TESTS ONLY (refused unless {UNSAFE_ENV}=1): answer fence requests but keep"
        " accepting the old writer's adds (a zombie writer's acks are lost)",
    )
    p.add_argument(
        "--unsafe-forget-fence-on-delete",
        action="store_true",
        help=f"CONTROL TESTS ONLY (refused unless {UNSAFE_ENV}=1): accept normal adds to a deleted"
        " ledger again (its recovered writer's acks are lost)",
    )
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def node_config(args: argparse.Namespace) -> NodeConfig:
    return NodeConfig(
        data_dir=args.data_dir,
        journal=JournalConfig(
            max_group_wait_ms=args.journal_max_wait_ms,
            flush_when_queue_empty=True,
            max_queued_bytes=args.journal_queue_bytes,
        ),
        journal_rotate_bytes=args.journal_rotate_bytes,
        journal_cache_bytes=None if args.journal_cache_bytes < 0 else args.journal_cache_bytes,
        journal_prealloc_bytes=max(0, args.journal_prealloc_bytes),
        compaction_threshold=min(1.0, max(0.0, args.compaction_threshold)),
        compaction_interval_s=max(0.05, args.compaction_interval),
        compaction_bytes_per_round=max(1, args.compaction_bytes_per_round),
        fsync=not args.unsafe_no_fsync,
        unsafe_no_fencing=args.unsafe_no_fencing,
        unsafe_forget_fence_on_delete=args.unsafe_forget_fence_on_delete,
        checkpoint_interval_s=args.checkpoint_interval,
        max_lac_waiters=args.max_lac_waiters,
    )


def fatal(message: str) -> int:
    """A start-up failure the operator must fix: one line on stderr, no traceback."""
    print(f"FATAL {message}", file=sys.stderr, flush=True)
    return EXIT_USAGE


def check_data_dir(data_dir: Path) -> str | None:
    """Why ``data_dir`` cannot hold a node's files (None if it can): it is created if
    missing and a file is written and removed in it (permission bits do not tell root)."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=data_dir, prefix=".write-check-"):
            pass
    except OSError as exc:
        return f"data dir {data_dir} is not writable: {exc.strerror or exc}"
    return None


def check_port(host: str, port: int) -> str | None:
    """Why the node cannot listen on ``host:port`` (None if it can), before any file is
    opened; the real listen below still reports a port taken in between."""
    if not port:
        return None
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None


async def run(args: argparse.Namespace) -> int:
    problem = check_data_dir(args.data_dir) or check_port(args.host, args.port)
    if problem is not None:
        return fatal(problem)
    if args.port:
        try:
            check_cookie(args.data_dir, f"{args.advertise_host or args.host}:{args.port}")
        except CookieMismatch as exc:
            log.error("%s; refusing to start", exc)
            return EXIT_USAGE
    metrics = NodeMetrics()
    service = NodeService(node_config(args), SystemClock(), metrics, disk=disk_from_env())
    try:
        await service.start()
    except UnsupportedDataDir as exc:
        log.error("%s; refusing to start", exc)
        return EXIT_USAGE
    registration: Registration | None = None

    def node_info() -> bytes:
        return registration.node_info().to_json() if registration is not None else b"{}"

    server = NodeServer(
        service,
        node_info,
        args.max_connections,
        args.max_in_flight,
        auth_secret=args.cluster_secret.read_bytes() if args.cluster_secret else None,
        max_per_peer=args.max_connections_per_peer,
        idle_timeout_s=args.idle_timeout,
    )
    try:
        host, port = await server.start(args.host, args.port)
    except OSError as exc:
        await service.stop()
        return fatal(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
    node_id = f"{args.advertise_host or host}:{port}"
    try:
        check_cookie(args.data_dir, node_id)
    except CookieMismatch as exc:
        log.error("%s; refusing to start", exc)
        server.stop_listening()
        await service.stop()
        return EXIT_USAGE
    metrics_address = metrics.serve(args.host, args.metrics_port)
    # etcd may be missing at start (or away): wait for it, as the node does later on
    what = f"storage node {node_id}"
    store = await patiently(what, lambda: connect(args.etcd, namespace=args.etcd_namespace), log)
    policy = DiskPolicy(args.min_free_bytes, args.min_free_ratio)
    registration = Registration(store, service, node_id, metrics_address, policy, args.lease_ttl)
    stop = asyncio.Event()
    registration.on_drained = stop.set  # decommissioned: leave (docs/decisions/0020)
    await patiently(what, registration.register, log)
    registration.start()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, _dump_tasks)  # debugging a stuck node
    clock_steps = follow_clock_steps()  # test builds only: the fault run's clock jumps
    print(f"FOLIO-STORAGE READY address={node_id} metrics={metrics_address}", flush=True)
    await stop.wait()
    if clock_steps is not None:
        clock_steps.cancel()

    log.info("stopping: finishing journal syncs, revoking the lease")
    server.stop_listening()
    await registration.stop_tasks()  # no ledger reclaim while the service shuts down
    await service.stop()  # every accepted add/fence is durable and answered after this
    await server.close_connections()
    await registration.stop()
    await _leave_tasks_behind(store)
    log.info("stopped cleanly")
    return 0


async def _leave_tasks_behind(store: EtcdStore) -> None:
    """Close the etcd client and cancel leftovers, bounded: a task stuck in aetcd
    must not keep a stopped node alive (asyncio.run would wait for it forever)."""
    closing = asyncio.ensure_future(store.close())
    await asyncio.wait({closing}, timeout=STOP_TIMEOUT_S)
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    if others:
        _, stuck = await asyncio.wait(others, timeout=STOP_TIMEOUT_S)
        if stuck:
            log.warning("%d task(s) did not stop; exiting anyway", len(stuck))
            logging.shutdown()
            os._exit(0)


def _dump_tasks() -> None:
    """SIGUSR1: print every task's stack to stderr (finding a stuck node)."""
    for task in asyncio.all_tasks():
        try:
            task.print_stack(file=sys.stderr)
        except Exception as exc:  # a frame linecache cannot render must not stop the dump
            sys.stderr.write(f"({task!r}: stack unavailable: {exc!r})\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    switches = ("unsafe_no_fsync", "unsafe_no_fencing", "unsafe_forget_fence_on_delete")
    unsafe = [name for name in switches if getattr(args, name)]
    if unsafe and os.environ.get(UNSAFE_ENV) != "1":
        print(f"folio storage: {unsafe[0]} is for control tests only (needs {UNSAFE_ENV}=1)", file=sys.stderr)
        return EXIT_USAGE
    tune_gc()
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.unsafe_no_fsync:
        log.warning("!!! --unsafe-no-fsync: this node acks adds WITHOUT fdatasync; control tests only !!!")
    for name in unsafe:
        if name != "unsafe_no_fsync":
            log.warning("!!! --%s: this node accepts adds it must refuse; control tests only !!!", name)
    # the sync thread must get the GIL back quickly after fdatasync returns:
    # the default 5 ms switch interval would add up to 5 ms to every group commit
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    return uvloop.run(run(args))
