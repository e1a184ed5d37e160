"""``folio bench ledger``: every phase measured on a real 3-node cluster, with its CPU per entry.

The bench runs as its own process, as users run it: it tunes its garbage collector
and names its cluster's secret in its environment, neither of which may stay in
the test run's process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytestmark = pytest.mark.component

REPO = Path(__file__).resolve().parents[2]


def test_bench_ledger_measures_each_phase_and_its_cpu(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "folio", "bench", "ledger", "--sizes", "100", "--seconds", "0.5"]
    cmd += ["--inflight", "64", "--light-rate", "200", "--json"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [orjson.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    phases = [line for line in lines if line["kind"] == "ledger"]
    assert [p["mode"] for p in phases] == ["saturation", "half", "200/s"], done.stdout
    for phase in phases:
        assert phase["entry_bytes"] == 100 and phase["entries"] > 0
        assert 0 < phase["p50_ms"] <= phase["p99_ms"]
        # CPU per entry of the bench's writer and of the three nodes it started
        assert phase["client_us"] > 0 and phase["nodes_us"] > 0 and phase["idle_nodes_us"] >= 0
    assert phases[1]["entries_per_s"] < phases[0]["entries_per_s"]  # half of saturation is paced
    assert [line["kind"] for line in lines].count("disk") == 1
    assert not (tmp_path / ".folio-bench").exists()  # the cluster's files are gone
