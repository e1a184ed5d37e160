"""The disk's raw ceiling for the ledger benchmark: append + fdatasync.

Owns: measuring, on the directory the storage nodes use, (a) one fdatasync per
entry-sized append, the rate a journal without group commit would reach, and
(b) appends grouped into 256 KiB per fdatasync, the bandwidth a journal with
group commit can hope for; and ``probe``, a short (b) that says how fast the
disk is right now (a VM disk that throttles after sustained writes shows it).
Bounded by a time budget per phase. Also ``sync_floor`` (``folio bench fsync``):
the latency of the fdatasync that N storage nodes on this disk do at once for
one entry at light load - the floor under any ack, whatever the code above it.
"""

from __future__ import annotations

import argparse
import multiprocessing
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


@dataclass(frozen=True)
class SyncFloor:
    writers: int
    entry_bytes: int
    syncs: int  # measured, over all writers
    p50_ms: float
    p99_ms: float


def sync_floor(directory: Path, writers: int, entry_bytes: int, count: int, gap_s: float) -> SyncFloor:
    """The fdatasync an ack must wait for, at light load: ``writers`` processes at once
    (as many storage nodes fsync each entry), each writing ``count`` entry-sized
    records into its own preallocated file (as the journal does), ``gap_s`` apart."""
    directory.mkdir(parents=True, exist_ok=True)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(writers) as pool:
        jobs = [
            (directory / f"floor-{os.getpid()}-{i}.bin", entry_bytes, count, gap_s) for i in range(writers)
        ]
        latencies = [ms for part in pool.starmap(_sync_writer, jobs) for ms in part]
    return SyncFloor(
        writers, entry_bytes, len(latencies), percentile(latencies, 50), percentile(latencies, 99)
    )


def _sync_writer(path: Path, entry_bytes: int, count: int, gap_s: float) -> list[float]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.posix_fallocate(fd, 0, entry_bytes * count + 4096)
        os.fsync(fd)
        record = os.urandom(entry_bytes)
        latencies: list[float] = []
        for i in range(count):
            os.pwrite(fd, record, i * entry_bytes)
            t0 = time.perf_counter()
            os.fdatasync(fd)
            latencies.append((time.perf_counter() - t0) * 1000)
            time.sleep(gap_s)
        return latencies
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def run_sync_floor(args: argparse.Namespace) -> int:
    """``folio bench fsync``: the sync floor for 1..N writers, one table."""
    directory = Path(args.dir).resolve()
    print(f"folio bench fsync: {args.size} B records + fdatasync into preallocated files under {directory},")
    print(f"{args.count} per writer, {args.gap_ms:g} ms apart (light load); writers sync at the same time")
    print(f"\n  {'writers':>7} {'syncs':>7} {'p50 ms':>7} {'p99 ms':>7}")
    for writers in range(1, args.writers + 1):
        floor = sync_floor(directory, writers, args.size, args.count, args.gap_ms / 1000)
        print(f"  {floor.writers:>7} {floor.syncs:>7,} {floor.p50_ms:>7.3f} {floor.p99_ms:>7.3f}", flush=True)
    return 0
