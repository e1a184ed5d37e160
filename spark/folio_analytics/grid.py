"""A mergeable series over an integer axis with power-of-two cells (pure).

Owns: ``GridSeries`` - counts, bytes and the oldest publish time per cell of
``base * 2**level`` units on one integer axis (milliseconds for a topic's rate
over its history, entry ids for a ledger's message index). Rule: at most
``max_cells`` cells; when a fold would need more, the level rises until it
fits. Cells are aligned to multiples of their width, so the cells (and the
level) after folding any split of the data, in any order, equal those of
folding it all at once: incremental statistics equal a full recomputation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

NO_TIME = -1  # a cell whose messages carry no publish time (never for real data)


@dataclass(slots=True)
class GridSeries:
    base: int
    max_cells: int
    level: int = 0
    cells: dict[int, list[int]] = field(default_factory=dict)  # cell start -> [messages, bytes, oldest_ms]

    @property
    def width(self) -> int:
        return self.base << self.level

    def add(self, at: int, messages: int, size: int, oldest_ms: int = NO_TIME) -> None:
        """Fold ``messages`` messages of ``size`` bytes at position ``at``."""
        self._put(at - at % self.width, messages, size, oldest_ms)
        self._fit()

    def add_many(self, points: Iterable[tuple[int, int, int, int]]) -> None:
        """Fold ``(at, messages, bytes, oldest_ms)`` points."""
        for at, messages, size, oldest in points:
            self._put(at - at % self.width, messages, size, oldest)
            if len(self.cells) > 2 * self.max_cells:
                self._fit()
        self._fit()

    def merge(self, other: GridSeries) -> None:
        assert other.base == self.base, (other.base, self.base)
        if other.level > self.level:
            self._coarsen(other.level)
        for start, (messages, size, oldest) in other.cells.items():
            self._put(start - start % self.width, messages, size, oldest)
        self._fit()

    def _put(self, start: int, messages: int, size: int, oldest_ms: int) -> None:
        cell = self.cells.get(start)
        if cell is None:
            self.cells[start] = [messages, size, oldest_ms]
            return
        cell[0] += messages
        cell[1] += size
        if oldest_ms != NO_TIME and (cell[2] == NO_TIME or oldest_ms < cell[2]):
            cell[2] = oldest_ms

    def _fit(self) -> None:
        level = self.level
        while len({s - s % (self.base << level) for s in self.cells}) > self.max_cells:
            level += 1
        if level != self.level:
            self._coarsen(level)

    def _coarsen(self, level: int) -> None:
        old = self.cells
        self.level = level
        self.cells = {}
        for start, (messages, size, oldest) in old.items():
            self._put(start - start % self.width, messages, size, oldest)

    def sorted_cells(self) -> list[tuple[int, int, int, int]]:
        """``(start, messages, bytes, oldest_ms)`` by start."""
        return [(s, c[0], c[1], c[2]) for s, c in sorted(self.cells.items())]

    def total_after(self, position: int) -> tuple[float, float, int]:
        """Messages and bytes at positions ``> position`` (pro rata inside the
        cell holding ``position``) and the oldest publish time among them
        (that cell's oldest when it is partly after; ``NO_TIME`` if none)."""
        messages = size = 0.0
        oldest = NO_TIME
        width = self.width
        for start, (m, b, o) in self.cells.items():
            end = start + width - 1
            if end <= position:
                continue
            share = 1.0 if start > position else (end - position) / width
            messages += m * share
            size += b * share
            if o != NO_TIME and (oldest == NO_TIME or o < oldest):
                oldest = o
        return messages, size, oldest

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "level": self.level, "cells": [list(c) for c in self.sorted_cells()]}

    @classmethod
    def from_json(cls, raw: dict[str, Any], max_cells: int) -> GridSeries:
        series = cls(int(raw["base"]), max_cells, int(raw["level"]))
        for start, messages, size, oldest in raw["cells"]:
            series.cells[int(start)] = [int(messages), int(size), int(oldest)]
        series._fit()
        return series
