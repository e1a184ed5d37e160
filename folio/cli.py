"""``folio`` command line: up, storage, status, faults, bench.

Owns: argument parsing and dispatch only; every command lives in its own module.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="folio", description="Folio messaging system")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start etcd, 3 storage nodes and 2 gateways on loopback")
    up.add_argument("--data", default=".folio", help="data root (default ./.folio)")
    up.add_argument("--etcd-port", type=int, default=2379, help="etcd client port (peer port = +1)")
    up.add_argument("--node-port", type=int, default=3181, help="first storage-node port (3 consecutive)")
    up.add_argument("--metrics-port", type=int, default=8001, help="first node metrics port (3 consecutive)")
    up.add_argument("--auditor-grace-ms", type=int, default=30_000)
    up.add_argument("--gateway-port", type=int, default=8080, help="first gateway port (2 consecutive)")
    up.add_argument(
        "--secure",
        action="store_true",
        help="bearer tokens on the gateways (keys and an admin token in <data>/security)",
    )
    up.add_argument("--spark-master", default="local[*]", help="Spark master of the analytics service")
    up.add_argument("--no-analytics", action="store_true", help="do not start the analytics service")

    sub.add_parser("storage", help="run one storage node (see `folio storage --help`)", add_help=False)
    sub.add_parser("auditor", help="run the auto-recovery auditor", add_help=False)
    sub.add_parser("gateway", help="run one gateway (see `folio gateway --help`)", add_help=False)
    sub.add_parser(
        "analytics", help="run the Spark statistics service (see `folio analytics --help`)", add_help=False
    )

    status = sub.add_parser("status", help="members, ledgers, under-replicated counts")
    status.add_argument("--etcd", default="127.0.0.1:2379")
    status.add_argument("--etcd-namespace", default="", help="key prefix of the cluster in etcd")
    status.add_argument("--ledgers", type=int, default=20, help="how many ledgers to list (newest first)")

    from folio.tokens import add_parser as add_token_parser

    add_token_parser(sub)

    from folio.node_admin import add_parser as add_node_parser

    add_node_parser(sub)

    faults = sub.add_parser("faults", help="the fault suite: a workload under seeded process faults")
    faults.add_argument("--seed", type=int, default=1)
    faults.add_argument("--duration", default="", help="run the nemesis this long (e.g. 1h, 300s)")
    faults.add_argument("--faults", type=int, default=50, help="number of faults when no --duration")
    faults.add_argument("--interval", default="3:7", help="seconds between fault starts, MIN:MAX")
    faults.add_argument("--kinds", default="", help="comma-separated fault kinds (default: all)")
    faults.add_argument("--hold-scale", type=float, default=1.0, help="multiplies how long each fault lasts")
    faults.add_argument("--rate", type=float, default=5.0, help="messages/s per producer")
    faults.add_argument("--lease-ttl", type=int, default=5, help="gateway lease TTL, seconds")
    faults.add_argument(
        "--sync-lag-ms",
        type=int,
        default=20,
        help="storage nodes delay each fdatasync this long (power loss)",
    )
    faults.add_argument("--dir", default="", help="run directory (default .folio-faults/seed-N-<time>)")
    faults.add_argument(
        "--check", default="", metavar="DIR", help="only check the history an earlier run left in DIR"
    )

    bench = sub.add_parser("bench", help="benchmarks")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    ledger = bench_sub.add_parser("ledger", help="ledger append throughput/latency, E=3 Qw=3 Qa=2")
    ledger.add_argument("--etcd", default="", help="use a running cluster (else start a temporary one)")
    ledger.add_argument("--sizes", default="100,1024,65536")
    ledger.add_argument("--seconds", type=float, default=5.0, help="duration of each measured phase")
    ledger.add_argument("--inflight", type=int, default=512)
    ledger.add_argument("--light-rate", type=float, default=1000.0, help="entries/s of the light-load phase")
    ledger.add_argument("--json", action="store_true", help="also print one JSON line per result")
    floor = bench_sub.add_parser("fsync", help="the fdatasync floor under an ack: 1..N writers at once")
    floor.add_argument("--writers", type=int, default=3, help="up to this many writers (one row each)")
    floor.add_argument("--size", type=int, default=400, help="bytes per record")
    floor.add_argument("--count", type=int, default=3000, help="records per writer")
    floor.add_argument("--gap-ms", type=float, default=0.4, help="pause between a writer's records")
    floor.add_argument("--dir", default=".folio-bench-fsync", help="where the files go (the data disk)")
    gw = bench_sub.add_parser("gateway", help="W1/W2/W3 (publish, latency, consume) through the gateways")
    gw.add_argument("--url", default="", help="a running gateway (else start a local cluster)")
    gw.add_argument("--seconds", type=float, default=8.0, help="cap of each W1 and W3 run")
    gw.add_argument("--msgs", type=int, default=200_000, help="cap of messages per W1 run")
    gw.add_argument("--window", type=int, default=256, help="messages in flight")
    gw.add_argument("--batch", type=int, default=128, help="messages per batch frame / REST request")
    gw.add_argument("--modes", default="ws,ws-batch,rest-batch", help="publish modes (W3/W2: ws, ws-batch)")
    gw.add_argument("--workloads", default="W1,W2,W3")
    gw.add_argument("--reps", type=int, default=1, help="repetitions (the table shows medians)")
    gw.add_argument("--w2-seconds", type=float, default=10.0)
    gw.add_argument("--w2-rate", type=float, default=2000.0, help="W2 offered msg/s")
    gw.add_argument(
        "--w2-pacing",
        choices=("tick", "spin"),
        default="tick",
        help="W2 producer: sleep at least one timer tick (1 ms), or spin as the peer harness does",
    )
    gw.add_argument(
        "--persistence",
        action="append",
        default=[],
        metavar="E,QW,QA",
        help="ledger quorums for the bench namespace (its persistence policy), e.g. 3,2,2:"
        " each entry on Qw of E storage nodes, acked once Qa fsynced it (default: the cluster's 3,3,2);"
        " given more than once, every policy runs in each rep and the rows are named by policy",
    )
    gw.add_argument(
        "--w3-from-storage",
        action="store_true",
        help="unload each W3 topic first, so its new owner reads the backlog from the storage"
        " nodes (a consumer catching up after the topic moved) instead of its cache of recent entries",
    )
    gw.add_argument("--settle", type=float, default=1.0, help="pause between runs (s)")
    gw.add_argument("--wait-idle", type=float, default=0.0, help="wait up to N s for a quiet box first")
    gw.add_argument("--peers", action="store_true", help="also run the NATS/Redis peer harness")
    gw.add_argument("--peers-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "peers"))
    gw.add_argument("--peer-systems", default="nats,redis")
    gw.add_argument("--profile", action="store_true", help="py-spy the owner gateway and one node")
    gw.add_argument(
        "--profile-native",
        action="store_true",
        help="like --profile, but py-spy pauses each process per sample and names C frames and"
        " syscalls (exact attribution; the measured figures are lower)",
    )
    gw.add_argument("--json", action="store_true", help="also print one JSON line per row")
    gw.add_argument(
        "--topics",
        default="",
        metavar="N,N,...",
        help="also run the topic curve: the W1 per-frame load (--window in flight, 100 B) spread over"
        " each count of fresh topics, e.g. 1,10,100,1000; with it, --workloads may be empty",
    )
    gw.add_argument(
        "--plots",
        default="",
        metavar="DIR",
        help="write PNG plots (throughput, latency, the topic curve) and the rows as JSON lines to DIR",
    )
    stats = bench_sub.add_parser(
        "analytics", help="statistics runs: full over N messages on T topics, then incremental after M more"
    )
    stats.add_argument("--messages", type=int, default=1_000_000)
    stats.add_argument("--topics", type=int, default=4)
    stats.add_argument("--more", type=int, default=10_000, help="messages published before the second run")
    stats.add_argument("--size", type=int, default=100, help="payload bytes")
    stats.add_argument("--keys", type=int, default=1000, help="distinct keys")
    stats.add_argument("--master", default="local[*]", help="Spark master of the analytics service")
    stats.add_argument("--data", default=".folio-bench-analytics", help="the local cluster's directory")
    stats.add_argument("--keep", action="store_true", help="keep the local cluster's logs and data")
    takeover = bench_sub.add_parser(
        "takeover", help="kill -9 the gateway owning N topics: seconds until each is served again"
    )
    takeover.add_argument("--topics", type=int, default=100)
    takeover.add_argument(
        "--pace-ms", type=float, default=200.0, help="each topic's producer retries this often"
    )
    takeover.add_argument("--data", default=".folio-bench-takeover", help="the local cluster's directory")
    takeover.add_argument("--keep", action="store_true", help="keep the local cluster's logs and data")
    spark_bench = bench_sub.add_parser(
        "spark", help="the Spark connector vs WebSocket readers and publishers"
    )
    spark_bench.add_argument("--msgs", type=int, default=1_000_000, help="messages published and read")
    spark_bench.add_argument("--size", type=int, default=100, help="payload bytes")
    spark_bench.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    spark_bench.add_argument("--data", default=".folio-bench-spark", help="the local cluster's directory")
    spark_bench.add_argument(
        "--ws-seconds", type=float, default=120.0, help="a WebSocket reader stops after this long"
    )
    for name, text in (
        ("fanout", "N reading consumers relayed through the non-owner gateway: both gateways stay up?"),
        ("stuck", "N consumers that never read under REST bursts: owner RSS, 4429 closes"),
    ):
        load = bench_sub.add_parser(name, help=text)
        load.add_argument(
            "--url", default="", help="running gateways, comma-separated (else a local cluster)"
        )
        load.add_argument("--data", default=".folio-bench-fanout", help="the local cluster's directory")
        load.add_argument("--keep", action="store_true", help="keep the local cluster's logs and data")
        load.add_argument("--consumers", type=int, default=1000)
        load.add_argument("--size", type=int, default=100 if name == "fanout" else 1024, help="payload bytes")
        load.add_argument("--rate", type=float, default=10.0, help="fanout: published msg/s")
        load.add_argument("--seconds", type=float, default=60.0, help="fanout: how long to publish")
        load.add_argument("--bursts", type=int, default=5, help="stuck: REST batches, 1 s apart")
        load.add_argument("--burst", type=int, default=300, help="stuck: messages per batch")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "storage":
        from storage.node.main import main as storage_main

        return storage_main(argv[1:])
    if argv and argv[0] == "auditor":
        from storage.auditor.main import main as auditor_main

        return auditor_main(argv[1:])
    if argv and argv[0] == "gateway":
        from gateway.main import main as gateway_main

        return gateway_main(argv[1:])
    if argv and argv[0] == "analytics":
        from folio_analytics.main import main as analytics_main

        return analytics_main(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "up":
        from folio.supervisor import LocalCluster, run_until_signalled

        cluster = LocalCluster(
            node_ports=tuple(range(args.node_port, args.node_port + 3)),
            metrics_ports=tuple(range(args.metrics_port, args.metrics_port + 3)),
            auditor_grace_ms=args.auditor_grace_ms,
            root=Path(args.data).resolve(),
            etcd_client_port=args.etcd_port,
            etcd_peer_port=args.etcd_port + 1,
            gateway_ports=(args.gateway_port, args.gateway_port + 1),
            secure=args.secure,
            analytics_master=None if args.no_analytics else args.spark_master,
        )
        return run_until_signalled(cluster)
    if args.command == "token":
        from folio.tokens import run as run_token

        return run_token(args)
    if args.command == "node":
        from folio.node_admin import run as run_node

        return run_node(args)
    if args.command == "status":
        from folio.status import status

        return asyncio.run(status(args.etcd, args.ledgers, args.etcd_namespace))
    if args.command == "faults":
        from folio.faults.main import run_from_args

        return run_from_args(args)
    if args.command == "bench" and args.bench == "ledger":
        from folio.bench_ledger import run_bench

        return run_bench(args)
    if args.command == "bench" and args.bench == "fsync":
        from folio.bench_disk import run_sync_floor

        return run_sync_floor(args)
    if args.command == "bench" and args.bench == "gateway":
        from folio.bench_gateway import run_bench as run_gateway_bench

        return run_gateway_bench(args)
    if args.command == "bench" and args.bench == "analytics":
        from folio.bench_analytics import run_bench as run_analytics_bench

        return run_analytics_bench(args)
    if args.command == "bench" and args.bench == "takeover":
        from folio.bench_takeover import run_bench as run_takeover_bench

        return run_takeover_bench(args)
    if args.command == "bench" and args.bench == "spark":
        from folio.bench_spark import run_bench as run_spark_bench

        return run_spark_bench(args)
    if args.command == "bench" and args.bench in ("fanout", "stuck"):
        from folio.bench_fanout import run_bench as run_load_bench

        return run_load_bench(args)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
