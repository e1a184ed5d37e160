"""``folio bench ledger``: every phase measured on a real 3-node cluster, with its CPU per entry."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from folio.cli import main

pytestmark = pytest.mark.component


def test_bench_ledger_measures_each_phase_and_its_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the bench's cluster lives under ./.folio-bench
    args = ["bench", "ledger", "--sizes", "100", "--seconds", "0.5", "--inflight", "64"]
    assert main([*args, "--light-rate", "200", "--json"]) == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    phases = [line for line in lines if line["kind"] == "ledger"]
    assert [p["mode"] for p in phases] == ["saturation", "half", "200/s"]
    for phase in phases:
        assert phase["entry_bytes"] == 100 and phase["entries"] > 0
        assert 0 < phase["p50_ms"] <= phase["p99_ms"]
        # CPU per entry of the bench's writer and of the three nodes it started
        assert phase["client_us"] > 0 and phase["nodes_us"] > 0 and phase["idle_nodes_us"] >= 0
    assert phases[1]["entries_per_s"] < phases[0]["entries_per_s"]  # half of saturation is paced
    assert [line["kind"] for line in lines].count("disk") == 1
    assert not (tmp_path / ".folio-bench").exists()  # the cluster's files are gone
