"""``folio faults``: one seeded fault run from the command line.

Owns: turning the arguments into a ``RunConfig``, printing the result lines
and the exit status (0 when every safety check holds, 1 when one fails).
``--check DIR`` runs only the checkers, on the ``history.jsonl`` a run left in
DIR (finished or killed), and prints the same lines with the same status.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from folio.faults import checkers
from folio.faults.history import load
from folio.faults.nemesis import FaultKind
from folio.faults.run import DEDUP_TOPICS, RunConfig, run

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    text = text.strip()
    if not text:
        return 0.0
    if text[-1] in UNITS:
        return float(text[:-1]) * UNITS[text[-1]]
    return float(text)


def run_from_args(args: argparse.Namespace) -> int:
    if args.check:
        return check_dir(Path(args.check))
    low, _, high = args.interval.partition(":")
    kinds = tuple(FaultKind(k.strip()) for k in args.kinds.split(",") if k.strip()) or tuple(FaultKind)
    root = Path(args.dir or f".folio-faults/seed-{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    config = RunConfig(
        root=root,
        seed=args.seed,
        faults=args.faults,
        duration_s=parse_duration(args.duration),
        interval=(float(low), float(high or low)),
        kinds=kinds,
        hold_scale=args.hold_scale,
        rate=args.rate,
        lease_ttl_s=args.lease_ttl,
        sync_lag_ms=args.sync_lag_ms,
    )
    print(f"folio faults: seed {args.seed}, run directory {root}", flush=True)
    try:
        result = asyncio.run(run(config))
    except asyncio.CancelledError:  # SIGINT/SIGTERM: every process it started is stopped
        print(f"interrupted; history so far in {root / 'history.jsonl'}")
        return 130
    return report(result)


def check_dir(root: Path) -> int:
    """The checkers on an existing run directory's history, without running anything."""
    path = root / "history.jsonl"
    if not path.is_file():
        print(f"folio faults --check: no history at {path}")
        return 2
    print(f"folio faults: checking {path}", flush=True)
    ops = load(path)
    if not any(op.get("f") == "read" for op in ops):
        print("no final read in this history (the run did not finish): every ack counts as lost")
    return report(checkers.check(ops, dedup_topics=DEDUP_TOPICS))


def report(result: checkers.Result) -> int:
    print(result.line())
    print(result.unavailability_line())
    print(result.unavailability_own_line())
    details = result.details()
    if details:
        print(details)
    return 0 if result.safe else 1
