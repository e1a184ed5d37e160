"""Time as a port: every core takes ``now_ms``; shells read it from a Clock.

Owns: the ``Clock`` protocol, ``SystemClock`` (monotonic), ``WallClock`` (the
process's one reading of wall time) and ``ManualClock`` (tests and simulation
advance it explicitly). Rule: intervals (leases, timeouts, retries) are measured on
the monotonic clock, so a wall clock that is stepped (NTP, an operator) moves only
what is stored or compared as wall time (publish times, TTL, auth proofs). The fault
run steps one process's wall clock to show it (``follow_clock_steps``: test builds
only, docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Protocol

CLOCK_STEP_ENV = "FOLIO_TEST_CLOCK_STEP_FILE"  # milliseconds added to this process's wall clock
CLOCK_STEP_POLL_S = 0.1
_wall_step_ns = 0  # set only by follow_clock_steps


class Clock(Protocol):
    def now_ms(self) -> int: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class WallClock:
    """Milliseconds since the epoch: for times stored or compared across machines
    (publish times, delayed delivery, TTL), never for measuring intervals."""

    def now_ms(self) -> int:
        return wall_ms()


def wall_ms() -> int:
    """Milliseconds since the epoch, as this process's wall clock reads them."""
    return (time.time_ns() + _wall_step_ns) // 1_000_000


def follow_clock_steps() -> asyncio.Task[None] | None:
    """Test builds only (``FOLIO_UNSAFE_TEST_SWITCHES=1`` and ``CLOCK_STEP_ENV`` set):
    a task that steps this process's wall clock to the offset in that file, as an NTP
    step or an operator's ``date -s`` would. None (and nothing runs) otherwise."""
    path = os.environ.get(CLOCK_STEP_ENV, "")
    if not path or os.environ.get("FOLIO_UNSAFE_TEST_SWITCHES") != "1":
        return None

    def read_step() -> None:
        global _wall_step_ns
        with contextlib.suppress(OSError, ValueError):
            _wall_step_ns = int(Path(path).read_text() or 0) * 1_000_000

    async def follow() -> None:
        while True:
            read_step()
            await asyncio.sleep(CLOCK_STEP_POLL_S)

    return asyncio.get_running_loop().create_task(follow())


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
