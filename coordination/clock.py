"""Time as a port: every core takes ``now_ms``; shells read it from a Clock.

Owns: the ``Clock`` protocol, ``SystemClock`` (monotonic) and ``ManualClock``
(tests and simulation advance it explicitly).
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class WallClock:
    """Milliseconds since the epoch: for times stored or compared across machines
    (publish times, delayed delivery, TTL), never for measuring intervals."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> None:
        assert ms >= 0
        self._now += ms

    def set(self, now_ms: int) -> None:
        assert now_ms >= self._now
        self._now = now_ms
