"""CPU accounting for benchmarks: CPU % per named group of PIDs, from ``/proc``.

Owns: reading ``/proc/<pid>/stat`` (utime+stime of a process, all its threads)
and ``/proc/stat`` (whole machine) at the start and end of a measured interval.
Rule (as /work/shared/peers/common.py, so figures compare with the peers'):
percentages are of ONE core (100 = one full core), ``machine`` is the busy %
of the whole box (0..100*cores), ``other`` = machine busy minus everything in
the groups (other tenants, plus kernel work not charged to our PIDs).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1


def stat_ticks(pid: int) -> tuple[int, int]:
    """(utime + stime of ``pid`` including its threads, cutime + cstime: its exited and
    waited-for descendants); (0, 0) if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return 0, 0
    fields = data[data.rindex(")") + 2 :].split()  # fields 14 to 17 of stat(5) are [11:15]
    return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def process_ticks(pid: int) -> int:
    """utime + stime of ``pid`` including its threads; 0 if it is gone."""
    return stat_ticks(pid)[0]


def machine_ticks() -> tuple[int, int]:
    """(busy, total) ticks of the whole machine since boot."""
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal
    return total - idle, total


def cpu_percentages(
    ticks: Mapping[str, int], busy: int, total: int, seconds: float, clock_ticks: int, cores: int
) -> dict[str, float]:
    """Pure: tick deltas per group over ``seconds`` -> {group: %, "machine": %, "other": %}."""
    out: dict[str, float] = {}
    tracked = 0.0
    for name, delta in ticks.items():
        value = 100.0 * delta / clock_ticks / seconds if seconds > 0 else 0.0
        out[name] = round(value, 1)
        tracked += value
    machine = 100.0 * cores * busy / total if total else 0.0
    out["machine"] = round(machine, 1)
    out["other"] = round(max(0.0, machine - tracked), 1)
    return out


class CpuMonitor:
    """CPU used by each group of PIDs between ``start()`` and ``stop()``."""

    def __init__(self, groups: Mapping[str, Sequence[int]]) -> None:
        self.groups = {name: list(pids) for name, pids in groups.items()}
        self._t0 = 0.0
        self._ticks0: dict[str, int] = {}
        self._machine0 = (0, 0)

    def _group_ticks(self) -> dict[str, int]:
        return {name: sum(process_ticks(p) for p in pids) for name, pids in self.groups.items()}

    def start(self) -> CpuMonitor:
        self._t0 = time.monotonic()
        self._ticks0 = self._group_ticks()
        self._machine0 = machine_ticks()
        return self

    def seconds(self) -> dict[str, float]:
        """CPU seconds each group has used since ``start()`` (the monitor keeps running)."""
        now = self._group_ticks()
        return {name: (now[name] - self._ticks0[name]) / CLOCK_TICKS for name in self.groups}

    def stop(self) -> dict[str, float]:
        """CPU % of one core per group since ``start()``, with ``machine`` and ``other``."""
        seconds = time.monotonic() - self._t0
        busy, total = machine_ticks()
        now = self._group_ticks()
        deltas = {name: now[name] - self._ticks0[name] for name in self.groups}
        return cpu_percentages(
            deltas, busy - self._machine0[0], total - self._machine0[1], seconds, CLOCK_TICKS, CORES
        )


def machine_busy(seconds: float = 1.0) -> float:
    """Busy % of the whole box (0..100*cores) over the next ``seconds``."""
    busy0, total0 = machine_ticks()
    time.sleep(seconds)
    busy1, total1 = machine_ticks()
    return 100.0 * CORES * (busy1 - busy0) / (total1 - total0) if total1 > total0 else 0.0
