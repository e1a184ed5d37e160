"""``folio gateway``: run one gateway process (FastAPI on uvicorn, uvloop + httptools).

Owns: command-line parsing, connecting to etcd, and the uvicorn server's
lifecycle. Prints ``FOLIO-GATEWAY READY http=http://H:P`` once it serves, so
supervisors and tests know when to start. SIGTERM/SIGINT shut down cleanly:
topics are closed (ledgers closed, cursors persisted), bundles released,
sockets closed. A gateway whose etcd lease is lost does not exit: it steps down
(its topics dropped, clients told to reconnect), waits for etcd and rejoins
(gateway.api.tenure). A gateway started while etcd is missing, or losing it
halfway through starting, waits for it (coordination.patience) before it serves.
At start the soft open-file limit is raised to the hard one and the connection
limit is capped below it (gateway.security.file_budget); both are logged and
shown on /metrics.
Test hook (the fault suite's gray failure): with ``FOLIO_TEST_LOOP_BLOCK_FILE`` set,
SIGUSR2 blocks the event loop for the seconds written in that file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import resource
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import prometheus_client
import uvicorn

from coordination.clock import follow_clock_steps
from coordination.etcd_store import connect
from coordination.patience import patiently
from coordination.session_thread import ThreadLeaseSession
from gateway.api.app import create_app
from gateway.api.heap_trim import trim_heap_after_bursts
from gateway.api.webhooks import CONNECTIONS_MAX, WEBHOOKS_MAX
from gateway.api.ws_server import GatewayWebSocketProtocol
from gateway.broker.cache_budget import CACHE_BUDGET_BYTES, CacheBudget
from gateway.broker.log_state import LogConfig
from gateway.broker.pending_rules import BUDGET_BYTES, PAUSE_BYTES, PendingLimits
from gateway.process import Gateway, GatewayConfig
from gateway.security import file_budget, http_limits, settings
from storage.runtime import tune_gc

# A dead gateway's bundles move once its lease expires: 3 s keeps takeover of its
# topics under 5 s. Renewed every second on a thread of its own (session_thread),
# lost locally 2.7 s after the last renewal that succeeded (lease.KeepalivePolicy).
DEFAULT_LEASE_TTL_S = 3
DEFAULT_LOAD_MANAGER_INTERVAL_S = 5.0

log = logging.getLogger("folio.gateway")


def connection_cap(requested: int) -> int:
    """Raise the soft open-file limit to the hard one, and the connections to hold:
    ``requested``, capped below that limit (file_budget), logged and on /metrics."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = file_budget.soft_limit_target(soft, hard, resource.RLIM_INFINITY)
    if target != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("open-file limit stays %d (raising it to %d failed: %s)", soft, target, exc)
    cap = file_budget.connection_cap(requested or soft, soft)
    kept = file_budget.reserve(soft)
    if requested and cap < requested:
        log.warning(
            "connections: at most %d, not %d: the open-file limit is %d and %d are kept",
            cap,
            requested,
            soft,
            kept,
        )
    print(f"connections: at most {cap} (open-file limit {soft}, {kept} kept)", file=sys.stderr, flush=True)
    http_limits.CONNECTIONS_LIMIT.set(cap)
    http_limits.OPEN_FILES_LIMIT.set(soft)
    return cap


LOOP_BLOCK_ENV = "FOLIO_TEST_LOOP_BLOCK_FILE"
UNSAFE_ENV = "FOLIO_UNSAFE_TEST_SWITCHES"  # the fault suite's control runs set it; nothing else may


def _metrics_target(address: str | None) -> str:
    """The host:port the ``--metrics-address`` listener takes (its host defaults to loopback)."""
    if not address:
        return ""
    host, _, port = address.rpartition(":")
    return f"{host or '127.0.0.1'}:{port}"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="folio gateway", description="Run a Folio gateway.")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--advertise-host", default=None, help="host other gateways and clients use")
    parser.add_argument("--etcd", default="127.0.0.1:2379", help="etcd endpoint host:port")
    parser.add_argument("--etcd-namespace", default="", help="key prefix (tests)")
    parser.add_argument("--id", default=None, help="gateway id (default host:port)")
    parser.add_argument(
        "--lease-ttl",
        type=int,
        default=DEFAULT_LEASE_TTL_S,
        help="etcd lease TTL, s: a dead gateway's topics move to another after about this long",
    )
    parser.add_argument("--load-manager-interval", type=float, default=DEFAULT_LOAD_MANAGER_INTERVAL_S)
    parser.add_argument(
        "--cache-mb",
        type=int,
        default=CACHE_BUDGET_BYTES >> 20,
        help="bound on all cached entries of this gateway, MiB (Pulsar's managedLedgerCacheSizeMB)",
    )
    parser.add_argument(
        "--webhook-hosts",
        default="",
        help="comma-separated hosts (or host:port) webhooks may POST to; without it, any public"
        " address, and loopback in open mode (no token key). Refused always, when a webhook is set"
        " (400) and at every connection: the cluster's own ports (etcd's client and peer ports, storage"
        " nodes' wire and metrics, gateways, this gateway's --metrics-address)"
        " and link-local addresses such as 169.254.169.254; with tokens on, also"
        " loopback, private, reserved and unspecified addresses unless listed here",
    )
    parser.add_argument(
        "--webhooks-max", type=int, default=WEBHOOKS_MAX, help="webhooks in the cluster (refused beyond)"
    )
    parser.add_argument(
        "--webhook-connections",
        type=int,
        default=CONNECTIONS_MAX,
        help="open connections of this gateway's webhook pushers (POSTs beyond wait their turn)",
    )
    parser.add_argument(
        "--consumer-pending-bytes",
        type=int,
        default=PAUSE_BYTES,
        help="bytes delivered to one WebSocket consumer and not yet written to its socket:"
        " its deliveries pause here, and it is closed as slow (4429) at 4 times this",
    )
    parser.add_argument(
        "--delivery-budget-mb",
        type=int,
        default=BUDGET_BYTES >> 20,
        help="all consumers of this gateway together, MiB: beyond it the largest holders are closed (4429)",
    )
    parser.add_argument("--log-level", default="warning")
    settings.add_arguments(parser)
    tls = parser.add_argument_group("TLS")
    tls.add_argument("--tls-cert", default=None, help="certificate chain (PEM): serve HTTPS and WSS")
    tls.add_argument("--tls-key", default=None, help="private key of --tls-cert (PEM)")
    tls.add_argument(
        "--tls-ca",
        default=None,
        help="CA bundle (PEM) the gateway trusts when it calls other gateways (default: the system's)",
    )
    parser.add_argument(
        "--metrics-address",
        default=None,
        help="host:port of a separate plain-HTTP /metrics listener (e.g. on an internal network)",
    )
    quotas = parser.add_argument_group("quotas (0: none)")
    quotas.add_argument("--max-tenants", type=int, default=1_000, help="tenants in the cluster (412 beyond)")
    quotas.add_argument("--max-namespaces-per-tenant", type=int, default=1_000, help="412 beyond")
    quotas.add_argument(
        "--max-subscriptions-per-topic", type=int, default=10_000, help="durable subscriptions (429 beyond)"
    )
    quotas.add_argument(
        "--max-topics-per-namespace", type=int, default=0, help="topics, partitions counted (412 beyond)"
    )
    limits = parser.add_argument_group("request limits")
    defaults = http_limits.HeadLimits()
    limits.add_argument("--max-request-line-bytes", type=int, default=defaults.line_bytes, help="414 beyond")
    limits.add_argument(
        "--max-header-bytes", type=int, default=defaults.head_bytes, help="request head; 431 beyond"
    )
    limits.add_argument("--max-headers", type=int, default=defaults.header_count, help="431 beyond")
    limits.add_argument(
        "--header-timeout",
        type=float,
        default=defaults.head_timeout_s,
        help="s to send a request head; 408 after",
    )
    limits.add_argument(
        "--max-connections",
        type=int,
        default=0,
        help="open connections at once (0: the open-file limit less a reserve; never more; printed at "
        "start); past it a connection still sending its head is pushed out, else the new one gets 503",
    )
    parser.add_argument(
        "--unsafe-keep-lease-on-loss",
        action="store_true",
        help=f"CONTROL TESTS ONLY (refused unless {UNSAFE_ENV}=1): never step down when the etcd lease"
        " is lost (a zombie owner; the fault suite's dual-ack control)",
    )
    return parser.parse_args(argv)


class GatewayServer(uvicorn.Server):
    """uvicorn's server that, as a stop begins (SIGTERM/SIGINT), first ends the HTTP
    consumers' long-polls and event streams: uvicorn waits for open responses
    (up to ``timeout_graceful_shutdown``) before the app's own shutdown runs."""

    def __init__(self, on_stop: Callable[[], None], config: uvicorn.Config) -> None:
        super().__init__(config)
        self._on_stop = on_stop

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        with contextlib.suppress(RuntimeError):  # no running loop: nothing to end
            asyncio.get_running_loop().call_soon_threadsafe(self._on_stop)
        super().handle_exit(sig, frame)


async def serve(args: argparse.Namespace) -> int:
    if args.unsafe_keep_lease_on_loss:
        if os.environ.get(UNSAFE_ENV) != "1":
            print(
                f"FATAL --unsafe-keep-lease-on-loss is for control tests only (needs {UNSAFE_ENV}=1)",
                file=sys.stderr,
            )
            return 2
        ThreadLeaseSession.unsafe_ignore_loss = True
    advertise = args.advertise_host or args.host
    try:
        security = settings.config_from(args, advertise)
    except settings.SettingsError as exc:
        print(f"FATAL {exc}", file=sys.stderr, flush=True)
        return 2
    print(settings.banner(security, args.host), file=sys.stderr, flush=True)
    what = f"gateway {args.id or f'{advertise}:{args.port}'}"
    store = await patiently(what, lambda: connect(args.etcd, namespace=args.etcd_namespace), log)
    if bool(args.tls_cert) != bool(args.tls_key):
        print("FATAL give --tls-cert and --tls-key together", file=sys.stderr, flush=True)
        return 2
    if args.tls_ca:  # forwards and relays to other gateways verify their certificates with it
        os.environ["SSL_CERT_FILE"] = args.tls_ca
    http_url = f"{'https' if args.tls_cert else 'http'}://{advertise}:{args.port}"
    config = GatewayConfig(
        gateway_id=args.id or f"{advertise}:{args.port}",
        http_url=http_url,
        lease_ttl_s=args.lease_ttl,
        load_manager_interval_s=args.load_manager_interval,
        log=LogConfig(cache_budget=CacheBudget(max(1, args.cache_mb) << 20)),
        webhook_hosts=tuple(h.strip().lower() for h in args.webhook_hosts.split(",") if h.strip()),
        etcd_endpoints=tuple(e.strip().removeprefix("http://") for e in args.etcd.split(",") if e.strip()),
        metrics_address=_metrics_target(args.metrics_address),
        webhooks_max=max(1, args.webhooks_max),
        webhook_connections=max(1, args.webhook_connections),
        security=security,
        max_tenants=max(0, args.max_tenants),
        max_namespaces_per_tenant=max(0, args.max_namespaces_per_tenant),
        max_subscriptions_per_topic=max(0, args.max_subscriptions_per_topic),
        max_topics_per_namespace=max(0, args.max_topics_per_namespace),
        pending=PendingLimits(max(1, args.consumer_pending_bytes), max(1, args.delivery_budget_mb) << 20),
    )
    gateway = Gateway(store, config)
    app = create_app(gateway)
    if args.metrics_address:
        metrics_host, _, metrics_port = args.metrics_address.rpartition(":")
        prometheus_client.start_http_server(
            int(metrics_port), metrics_host or "127.0.0.1", registry=app.state.metrics_registry
        )
    server = GatewayServer(
        app.state.http_consumers.end_all,
        uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            loop="none",
            http=http_limits.protocol_class(
                http_limits.HeadLimits(
                    line_bytes=args.max_request_line_bytes,
                    head_bytes=args.max_header_bytes,
                    header_count=args.max_headers,
                    head_timeout_s=args.header_timeout,
                    connections=connection_cap(args.max_connections),
                )
            ),
            ssl_certfile=args.tls_cert,
            ssl_keyfile=args.tls_key,
            ws=GatewayWebSocketProtocol,
            lifespan="on",
            log_level=args.log_level,
            access_log=False,
            ws_max_size=16 * 1024 * 1024,
            ws_per_message_deflate=False,  # compression costs more CPU than loopback bandwidth
            ws_ping_interval=20.0,
            ws_ping_timeout=20.0,
            timeout_graceful_shutdown=5,
        ),
    )

    async def announce() -> None:
        while not server.started:
            await asyncio.sleep(0.02)
        print(f"FOLIO-GATEWAY READY http={http_url} id={config.gateway_id}", flush=True)

    # uvicorn handles SIGTERM/SIGINT (graceful shutdown), then re-raises the signal to the
    # handler that was installed before it: make that one a no-op so a clean stop exits 0
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _signum, _frame: None)
    _install_loop_block(os.environ.get(LOOP_BLOCK_ENV, ""))
    clock_steps = follow_clock_steps()  # test builds only: the fault run's clock jumps
    announcer = asyncio.get_running_loop().create_task(announce())
    trimmer = asyncio.get_running_loop().create_task(
        trim_heap_after_bursts(lambda: gateway.deliveries.rounds)
    )
    try:
        await server.serve()
    finally:
        announcer.cancel()
        trimmer.cancel()
        if clock_steps is not None:
            clock_steps.cancel()
        await store.close()
    return 0


def _install_loop_block(path: str) -> None:
    """Tests only: SIGUSR2 blocks the event loop (a gateway alive but stuck, not paused)."""
    if not path:
        return

    def block() -> None:
        with contextlib.suppress(OSError, ValueError):
            time.sleep(float(Path(path).read_text() or 0))

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, block)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    with socket.socket() as probe:  # fail fast with a clear message when the port is taken
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((args.host, args.port))
        except OSError as exc:
            print(f"FATAL cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr, flush=True)
            return 2
        if args.port == 0:  # any free port (tests); the id and URL name the port it got
            args.port = probe.getsockname()[1]
    tune_gc()
    import uvloop

    return uvloop.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
