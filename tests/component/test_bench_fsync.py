"""``folio bench fsync``: the fdatasync floor under an ack, on a real disk with real processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from folio.bench_disk import sync_floor
from folio.cli import main

pytestmark = pytest.mark.component


def test_sync_floor_measures_every_writer_and_cleans_up(tmp_path: Path) -> None:
    floor = sync_floor(tmp_path, writers=2, entry_bytes=100, count=20, gap_s=0.0)
    assert floor.writers == 2 and floor.syncs == 40
    assert 0 < floor.p50_ms <= floor.p99_ms
    assert list(tmp_path.iterdir()) == []  # the writers' files are gone


def test_bench_fsync_prints_a_row_per_writer_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["bench", "fsync", "--writers", "2", "--count", "10", "--gap-ms", "0", "--dir", str(tmp_path)])
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines if line.startswith("  ") and line.split()[0].isdigit()]
    assert [row[0] for row in rows] == ["1", "2"] and [row[1] for row in rows] == ["10", "20"]
