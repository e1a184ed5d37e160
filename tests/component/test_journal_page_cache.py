"""The journal drops its pages from the page cache behind its syncs (drop_behind.py),
with real files: ``fincore`` (util-linux) reports how much of each file is cached."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from storage.node.journal_io import JournalWriter, add_record_head, journal_path, list_journal_ids

pytestmark = pytest.mark.component

MIB = 1024 * 1024


def cached_bytes(path: Path) -> int:
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(out.stdout.strip())


def write_mib(writer: JournalWriter, mib: int) -> None:
    body = os.urandom(256 * 1024 - 64)
    for _ in range(mib * 4):
        writer.write([add_record_head(body), body])
        writer.run_sync(writer.take_sync_job())


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("cache_mib", [8, None])
def test_pages_lag_behind_the_tail_are_dropped_and_sealed_files_closed(
    tmp_path: Path, cache_mib: int | None
) -> None:
    fds_before = open_fds()
    writer = JournalWriter(
        tmp_path,
        first_file_id=1,
        rotate_bytes=16 * MIB,
        cache_bytes=None if cache_mib is None else cache_mib * MIB,
    )
    write_mib(writer, 48)  # three files of 16 MiB, the tail in a fourth
    ids = list_journal_ids(tmp_path)
    assert len(ids) >= 3
    first, last = journal_path(tmp_path, ids[0]), journal_path(tmp_path, ids[-1])
    if cache_mib is None:  # the control: pages stay cached without drop-behind
        assert cached_bytes(first) > 15 * MIB
    else:
        assert cached_bytes(first) < MIB  # wholly behind the lag: dropped
        assert cached_bytes(last) + cached_bytes(journal_path(tmp_path, ids[-2])) >= 4 * MIB  # the tail stays
        assert open_fds() <= fds_before + 3  # sealed files closed once dropped (dir fd, tail, one behind)
    writer.close()
    assert open_fds() == fds_before
