"""Power loss over the journal's sync log (folio/faults/powerloss.py with
storage/node/sync_log.py): the real journal writer writes and syncs, a "power
cut" drops exactly what no fdatasync / directory fsync covered, and replay then
finds the synced records only. Control: with fsync off nothing survives."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from folio.faults import powerloss
from storage.node import journal_io
from storage.node.journal_io import MAGIC, JournalWriter, fence_record, list_journal_ids, replay
from storage.node.sync_log import SyncLog

pytestmark = pytest.mark.unit


def writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool = True) -> tuple[JournalWriter, Path]:
    log = tmp_path / "sync.log"
    monkeypatch.setattr(journal_io, "SYNC_LOG", SyncLog(str(log)))
    # rotate after ~2 records, so a write can create a new file
    return JournalWriter(tmp_path / "journal", 1, rotate_bytes=40, fsync=fsync, cache_bytes=None), log


def sync(w: JournalWriter) -> None:
    w.run_sync(w.take_sync_job())


def fenced_ledgers(directory: Path) -> list[int]:
    return [int.from_bytes(r.body[:8], "big") for r in replay(directory, 1)]


def test_a_power_cut_keeps_what_was_synced_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w, log = writer(tmp_path, monkeypatch)
    w.write([fence_record(1)])
    sync(w)  # durable: file 1 (and its directory entry), record 1
    w.write([fence_record(2)])  # file 1, unsynced; the file then rotates: file 2 created, not in a synced dir
    w.write([fence_record(3)])  # file 2, unsynced
    assert fenced_ledgers(tmp_path / "journal") == [1, 2, 3]  # what a kill -9 alone would leave
    cut = powerloss.apply(log)
    assert cut.delete == [str(tmp_path / "journal" / "0000000002.journal")]
    assert cut.unsynced_bytes == len(fence_record(2))
    assert cut.dropped_bytes == len(fence_record(2)) + len(MAGIC) + len(fence_record(3))
    assert cut.dropped_records == 2
    assert fenced_ledgers(tmp_path / "journal") == [1]
    assert list_journal_ids(tmp_path / "journal") == [1]
    assert log.read_text() == ""  # the next incarnation starts a fresh log


def test_a_synced_new_file_survives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w, log = writer(tmp_path, monkeypatch)
    w.write([fence_record(1)])
    w.write([fence_record(2)])  # rotates: file 2
    w.write([fence_record(3)])
    sync(w)  # both files' data and the directory
    w.write([fence_record(4)])
    powerloss.apply(log)
    assert fenced_ledgers(tmp_path / "journal") == [1, 2, 3]


def test_a_torn_tail_is_cut_by_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for seed in range(8):
        root = tmp_path / str(seed)
        root.mkdir()
        w, log = writer(root, monkeypatch)
        w.write([fence_record(1)])
        sync(w)
        w.write([fence_record(2)])
        cut = powerloss.apply(log, random.Random(seed), torn=True)
        assert fenced_ledgers(root / "journal")[:1] == [1]
        assert cut.dropped_records == 1  # torn or whole, record 2 is gone


def test_control_without_fsync_a_power_cut_loses_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w, log = writer(tmp_path, monkeypatch, fsync=False)
    w.write([fence_record(1)])
    sync(w)  # "synced" as --unsafe-no-fsync syncs: not at all
    powerloss.apply(log)
    assert fenced_ledgers(tmp_path / "journal") == []


def test_records_cut_counts_records_reaching_past_the_cut() -> None:
    records = fence_record(1) + fence_record(2) + fence_record(3)
    size = len(fence_record(1))
    base = len(MAGIC)
    assert powerloss.records_cut(records, base, base) == 3
    assert powerloss.records_cut(records, base, base + size) == 2
    assert powerloss.records_cut(records, base, base + size + 1) == 2  # record 2 torn
    assert powerloss.records_cut(records + bytes(16), base, base + 3 * size) == 0
    assert powerloss.records_cut(MAGIC + records, 0, 0) == 3  # a file's first bytes: the magic is skipped


def test_lag_is_honoured_only_with_the_sync_log(tmp_path: Path) -> None:
    code = "from storage.node.journal_io import Failpoints; print(Failpoints.from_env().fsync_delay_ms)"
    for env, want in (
        ({"FOLIO_TEST_SYNC_LAG_MS": "20"}, "0"),
        ({"FOLIO_TEST_SYNC_LAG_MS": "20", "FOLIO_TEST_SYNC_LOG": str(tmp_path / "s.log")}, "20"),
    ):
        clean = {k: v for k, v in os.environ.items() if not k.startswith("FOLIO_")}
        done = subprocess.run(
            [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True
        )
        assert done.stdout.strip() == want, done.stderr


def test_plan_is_pure_and_ignores_a_line_torn_by_the_kill() -> None:
    lines = ["C /d/1.journal", "W /d/1.journal 0 8", "D /d", "W /d/1.journal 8 20", "S /d/1.journal 28"]
    text = "\n".join([*lines, "W /d/1.journal 28 10", "W /d/1"])
    cut = powerloss.plan(text)
    assert cut.delete == [] and cut.zero == [("/d/1.journal", 28, 38)]
