"""``folio faults``: one seeded fault run from the command line.

Owns: turning the arguments into a ``RunConfig``, printing the result lines
and the exit status (0 when every safety check holds, 1 when one fails).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from folio.faults.nemesis import FaultKind
from folio.faults.run import RunConfig, run

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    text = text.strip()
    if not text:
        return 0.0
    if text[-1] in UNITS:
        return float(text[:-1]) * UNITS[text[-1]]
    return float(text)


def run_from_args(args: argparse.Namespace) -> int:
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
    print(result.line())
    print(result.unavailability_line())
    details = result.details()
    if details:
        print(details)
    return 0 if result.safe else 1
