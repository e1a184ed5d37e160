"""Mergeable summaries of a topic's messages (pure).

Owns: ``LogHistogram`` (sizes and lags: exact below 16, then 8 cells per power
of two, so a percentile is within 12.5 % of the true value; exact min/max),
``Hll`` (HyperLogLog, 2**p one-byte registers over Murmur3-128: p = 12 for a
topic's keys, about 1.6 % standard error; p = 10 for a payload field, 3.3 %)
and ``HeavyHitters`` (Misra-Gries: the keys that may hold more than
1/capacity of the messages, each count low by at most ``error``).
Rule: every summary merges by an associative, commutative fold, so a
statistics run that folds new data into stored totals equals one that reads
everything again - exactly for the histogram and HyperLogLog, and for the
heavy hitters whenever a topic has no more distinct keys than ``capacity``.
(Apache DataSketches' HLL union switches estimators, so a union's estimate
differs from the single sketch's: the incremental-equals-full rule needs this
one.)
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import mmh3

SMALL = 16  # values below are their own cell
SUB = 8  # cells per power of two above
CHART_BINS = 24  # a chart's histogram shows the cells up to this many, else powers of two


def cell_of(value: int) -> int:
    if value < SMALL:
        return max(value, 0)
    exp = value.bit_length() - 1  # >= 4
    return SMALL + (exp - 4) * SUB + ((value >> (exp - 3)) & (SUB - 1))


def cell_bounds(cell: int) -> tuple[int, int]:
    """``[low, high)`` of a cell."""
    if cell < SMALL:
        return cell, cell + 1
    exp = 4 + (cell - SMALL) // SUB
    sub = (cell - SMALL) % SUB
    step = 1 << (exp - 3)
    low = (1 << exp) + sub * step
    return low, low + step


@dataclass(slots=True)
class LogHistogram:
    counts: dict[int, int] = field(default_factory=dict)
    total: int = 0
    low: int | None = None
    high: int | None = None

    def add(self, value: int, count: int = 1) -> None:
        cell = cell_of(value)
        self.counts[cell] = self.counts.get(cell, 0) + count
        self.total += count
        self.low = value if self.low is None else min(self.low, value)
        self.high = value if self.high is None else max(self.high, value)

    def add_counts(self, cells: Mapping[int, int], low: int, high: int) -> None:
        """Fold pre-bucketed values (``cell -> count``) whose min and max are known."""
        for cell, count in cells.items():
            self.counts[cell] = self.counts.get(cell, 0) + count
            self.total += count
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)

    def merge(self, other: LogHistogram) -> None:
        if other.total:
            assert other.low is not None and other.high is not None
            self.add_counts(other.counts, other.low, other.high)

    def percentile(self, q: float) -> int | None:
        """The value at quantile ``q`` (0..1): its cell's middle, kept within min..max (the
        top rank is the exact maximum)."""
        if not self.total:
            return None
        assert self.low is not None and self.high is not None
        rank = max(1, math.ceil(q * self.total))
        if rank >= self.total:
            return self.high
        seen = 0
        for cell in sorted(self.counts):
            seen += self.counts[cell]
            if seen >= rank:
                low, high = cell_bounds(cell)
                return min(max((low + high - 1) // 2, self.low), self.high)
        return self.high

    def chart_bins(self, most: int = CHART_BINS) -> list[tuple[int, int]]:
        """``(lower bound, count)`` per bar of a chart's histogram: the cells themselves
        (exact sizes below 16, eighths of a power of two above) while there are at most
        ``most`` of them, so messages of similar sizes still spread over several bars;
        else one bar per power of two."""
        fine = sorted((cell_bounds(cell)[0], count) for cell, count in self.counts.items())
        if len(fine) <= most:
            return fine
        bins: dict[int, int] = {}
        for low, count in fine:
            floor = 0 if low == 0 else 1 << (low.bit_length() - 1)
            bins[floor] = bins.get(floor, 0) + count
        return sorted(bins.items())

    def to_json(self) -> dict[str, Any]:
        return {"counts": sorted(self.counts.items()), "total": self.total, "min": self.low, "max": self.high}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> LogHistogram:
        return cls({int(c): int(n) for c, n in raw["counts"]}, int(raw["total"]), raw["min"], raw["max"])


HLL_P = 12
HLL_M = 1 << HLL_P


def _alpha(m: int) -> float:
    return 0.7213 / (1 + 1.079 / m)


@dataclass(slots=True)
class Hll:
    registers: bytearray = field(default_factory=lambda: bytearray(HLL_M))

    @classmethod
    def of_precision(cls, p: int) -> Hll:
        return cls(bytearray(1 << p))

    def add(self, item: bytes) -> None:
        p = len(self.registers).bit_length() - 1
        hashed = mmh3.hash64(item, 0, signed=False)[0]
        index = hashed >> (64 - p)
        rest = hashed & ((1 << (64 - p)) - 1)
        rank = (64 - p) - rest.bit_length() + 1
        self.registers[index] = max(self.registers[index], rank)

    def add_all(self, items: Iterable[bytes]) -> None:
        for item in items:
            self.add(item)

    def merge(self, other: Hll) -> None:
        if len(other.registers) != len(self.registers):
            raise ValueError("HyperLogLog sketches of different precision do not merge")
        regs = self.registers
        for i, r in enumerate(other.registers):
            regs[i] = max(regs[i], r)

    def estimate(self) -> int:
        regs = self.registers
        m = len(regs)
        zeros = regs.count(0)
        if zeros == m:
            return 0
        raw = _alpha(m) * m * m / sum(2.0**-r for r in regs)
        if raw <= 2.5 * m and zeros:
            return round(m * math.log(m / zeros))  # linear counting
        return round(raw)

    def to_json(self) -> str:
        return base64.b64encode(bytes(self.registers)).decode()

    @classmethod
    def from_json(cls, raw: str, registers: int = HLL_M) -> Hll:
        regs = bytearray(base64.b64decode(raw))
        if len(regs) != registers:
            raise ValueError(f"HyperLogLog of {len(regs)} registers, expected {registers}")
        return cls(regs)


@dataclass(slots=True)
class HeavyHitters:
    capacity: int
    counts: dict[str, int] = field(default_factory=dict)
    error: int = 0  # every count is at most this much below the truth

    def add_counts(self, counts: Mapping[str, int]) -> None:
        for key, n in counts.items():
            self.counts[key] = self.counts.get(key, 0) + n
        self._trim()

    def merge(self, other: HeavyHitters) -> None:
        self.error += other.error
        self.add_counts(other.counts)

    def _trim(self) -> None:
        if len(self.counts) <= self.capacity:
            return
        cut = sorted(self.counts.values(), reverse=True)[self.capacity]
        self.error += cut
        self.counts = {k: n - cut for k, n in self.counts.items() if n > cut}

    def top(self, n: int) -> list[tuple[str, int]]:
        return sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]

    def to_json(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "error": self.error, "counts": self.top(self.capacity)}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> HeavyHitters:
        return cls(int(raw["capacity"]), {str(k): int(n) for k, n in raw["counts"]}, int(raw["error"]))
