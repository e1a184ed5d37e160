"""The disk's raw ceiling for the ledger benchmark: append + fdatasync.

Owns: measuring, on the directory the storage nodes use, (a) one fdatasync per
entry-sized append, the rate a journal without group commit would reach, and
(b) appends grouped into 256 KiB per fdatasync, the bandwidth a journal with
group commit can hope for; and ``probe``, a short (b) that says how fast the
disk is right now (a VM disk that throttles after sustained writes shows it).
Bounded by a time budget per phase.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from folio.bench_stats import percentile

GROUP_BYTES = 256 * 1024  # appended per fdatasync in the grouped phase and the probe


@dataclass(frozen=True)
class DiskCeiling:
    entry_bytes: int
    syncs_per_s: float  # one fdatasync per entry
    sync_p50_ms: float
    sync_p99_ms: float
    grouped_mb_per_s: float  # 256 KiB per fdatasync
    grouped_entries_per_s: float


def measure(directory: Path, entry_bytes: int, seconds: float = 2.0) -> DiskCeiling:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"ceiling-{os.getpid()}.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    chunk = os.urandom(entry_bytes)
    try:
        latencies: list[float] = []
        start = time.perf_counter()
        while time.perf_counter() - start < seconds and len(latencies) < 200_000:
            t0 = time.perf_counter()
            os.write(fd, chunk)
            os.fdatasync(fd)
            latencies.append((time.perf_counter() - t0) * 1000)
        elapsed = time.perf_counter() - start
        syncs = len(latencies) / elapsed
        written, grouped_elapsed = _grouped(fd, chunk * max(1, GROUP_BYTES // entry_bytes), seconds)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return DiskCeiling(
        entry_bytes=entry_bytes,
        syncs_per_s=syncs,
        sync_p50_ms=percentile(latencies, 50),
        sync_p99_ms=percentile(latencies, 99),
        grouped_mb_per_s=written / grouped_elapsed / 1e6,
        grouped_entries_per_s=written / entry_bytes / grouped_elapsed,
    )


def probe(directory: Path, seconds: float = 0.5) -> float:
    """MB/s of 256 KiB appends with an fdatasync each, for ``seconds`` (then deleted)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"probe-{os.getpid()}.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        written, elapsed = _grouped(fd, os.urandom(GROUP_BYTES), seconds)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return written / elapsed / 1e6


def _grouped(fd: int, block: bytes, seconds: float) -> tuple[int, float]:
    """Append ``block`` + fdatasync for ``seconds`` (at most 8 GiB): (bytes, seconds)."""
    written = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds and written < (8 << 30):
        os.write(fd, block)
        os.fdatasync(fd)
        written += len(block)
    return written, time.perf_counter() - start
