"""``folio auditor``: campaign for the auditor role and audit while leading.

Owns: the process — etcd connection, lease session, election, signals, and
its /metrics port (recovery progress, storage/auditor/metrics.py; the READY
line names it: ``FOLIO-AUDITOR READY id=… metrics=host:port``).
Rule: etcd being away is waited out (coordination.patience): at start before
the READY line, and at any time after - a lost lease or a failed election
ends the round, and a new session is opened with back-off until etcd answers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
from pathlib import Path

from coordination.election import Election
from coordination.errors import CoordinationError
from coordination.etcd_store import connect
from coordination.patience import Backoff, Outage, patiently
from coordination.session import LeaseSession
from coordination.store import MetadataStore
from storage.auditor.audit_core import DEFAULT_GRACE_MS
from storage.auditor.auditor import CHECK_INTERVAL_MS, Auditor
from storage.auditor.metrics import AuditorCollector
from storage.auditor.metrics import serve as serve_metrics
from storage.drain import DEFAULT_FENCE_GRACE_MS
from storage.runtime import tune_gc

log = logging.getLogger("folio.auditor")
READY_LINE = "FOLIO-AUDITOR READY"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="folio auditor", description="auto-recovery auditor")
    parser.add_argument("--etcd", required=True, help="host:port[,host:port...]")
    parser.add_argument("--etcd-namespace", default="", help="key prefix inside etcd (tests, shared etcd)")
    parser.add_argument("--id", default=f"{socket.gethostname()}-{os.getpid()}")
    parser.add_argument("--grace-ms", type=int, default=DEFAULT_GRACE_MS, help="how long a node may be gone")
    parser.add_argument("--check-interval-ms", type=int, default=CHECK_INTERVAL_MS)
    parser.add_argument(
        "--drain-fence-grace-ms",
        type=int,
        default=DEFAULT_FENCE_GRACE_MS,
        help="how long an idle writer's open ledger may stay on a draining node before it is fenced",
    )
    parser.add_argument("--lease-ttl", type=int, default=5)
    parser.add_argument("--cluster-secret", default=None, help="file with the storage nodes' cluster secret")
    parser.add_argument("--metrics-host", default="127.0.0.1", help="address /metrics listens on")
    parser.add_argument("--metrics-port", type=int, default=0, help="/metrics port (0 = any free, -1 = off)")
    return parser


async def _serve(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    what = f"auditor {args.id}"
    store = await patiently(what, lambda: connect(args.etcd, namespace=args.etcd_namespace), log)
    collector = AuditorCollector()
    metrics = "off"
    if args.metrics_port >= 0:
        metrics = serve_metrics(collector, args.metrics_host, args.metrics_port)
    print(f"{READY_LINE} id={args.id} metrics={metrics}", flush=True)
    outage = Outage(log, what)
    backoff = Backoff()
    try:
        while not stop.is_set():
            session: LeaseSession | None = None
            try:
                session = await LeaseSession(store, args.lease_ttl).start()
                outage.answered()
                await _lead_while_elected(args, store, session, collector, stop)
            except CoordinationError as exc:  # etcd away: wait for it (a new session after)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff.delay_s(outage.failed(exc)))
            finally:
                collector.progress = None
                if session is not None:
                    await session.close()
    finally:
        await store.close()
    return 0


async def _lead_while_elected(
    args: argparse.Namespace,
    store: MetadataStore,
    session: LeaseSession,
    collector: AuditorCollector,
    stop: asyncio.Event,
) -> None:
    """Campaign under ``session``; audit while leading, until the lease is lost or ``stop``."""
    election = Election(store, "auditor", args.id, session)
    campaign = asyncio.ensure_future(election.campaign())
    stopper = asyncio.ensure_future(stop.wait())
    lost = asyncio.ensure_future(session.lost.wait())
    try:
        await asyncio.wait([campaign, stopper, lost], return_when=asyncio.FIRST_COMPLETED)
        if not campaign.done():
            campaign.cancel()
            with contextlib.suppress(asyncio.CancelledError, CoordinationError):
                await campaign
            return
        await campaign
        log.info("auditor %s leads", args.id)
        secret = (
            await asyncio.to_thread(Path(args.cluster_secret).read_bytes) if args.cluster_secret else None
        )
        auditor = Auditor(
            store,
            args.id,
            args.grace_ms,
            args.check_interval_ms,
            cluster_secret=secret,
            drain_fence_grace_ms=args.drain_fence_grace_ms,
        )
        collector.progress = auditor.progress
        leading = asyncio.Event()
        audit = asyncio.ensure_future(auditor.run_as_leader(leading))
        await asyncio.wait([lost, audit, stopper], return_when=asyncio.FIRST_COMPLETED)
        leading.set()
        await audit
        if session.lost.is_set():
            log.warning("auditor %s: lease lost (%s); campaigning again", args.id, session.lost_reason)
    finally:
        for task in (stopper, lost):
            task.cancel()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    tune_gc()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import uvloop

        return uvloop.run(_serve(args))
    except ImportError:
        return asyncio.run(_serve(args))
