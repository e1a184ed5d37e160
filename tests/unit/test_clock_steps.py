"""A stepped wall clock (coordination/clock.py): the fault run's clock-jump kinds step
one process's wall clock; only wall time moves, never the monotonic clock that
measures leases, timeouts and caches, and only in test builds."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from coordination import clock
from coordination.clock import CLOCK_STEP_ENV, SystemClock, WallClock, follow_clock_steps, wall_ms

pytestmark = pytest.mark.unit


async def _stepped() -> tuple[int, int, int, int]:
    task = follow_clock_steps()
    assert task is not None
    try:
        wall_before, mono_before = wall_ms(), SystemClock().now_ms()
        await asyncio.sleep(3 * clock.CLOCK_STEP_POLL_S)
        return wall_before, wall_ms(), mono_before, SystemClock().now_ms()
    finally:
        task.cancel()
        clock._wall_step_ns = 0


@pytest.mark.parametrize("step_ms", [30_000, -30_000])
async def test_a_step_moves_wall_time_only(
    step_ms: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FOLIO_UNSAFE_TEST_SWITCHES", "1")
    monkeypatch.setenv(CLOCK_STEP_ENV, str(tmp_path / "step"))
    (tmp_path / "step").write_text(str(step_ms))
    wall0, wall1, mono0, mono1 = await _stepped()
    assert abs((wall1 - wall0) - step_ms) < 5_000  # stepped by step_ms, plus the poll
    assert 0 <= mono1 - mono0 < 5_000  # the monotonic clock did not jump
    assert abs(WallClock().now_ms() - wall_ms()) < 1_000


def test_no_step_without_the_test_switch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FOLIO_UNSAFE_TEST_SWITCHES", raising=False)
    monkeypatch.setenv(CLOCK_STEP_ENV, str(tmp_path / "step"))
    assert follow_clock_steps() is None  # a production process never follows the file


async def test_a_step_back_does_not_stretch_the_tenant_admin_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Revoked tenant admin rights end when the cache's age says so, on the monotonic
    clock: a wall clock stepped back an hour must not keep the old admins cached."""
    from gateway.security import guard as guard_module

    admins = ["alice"]

    class Tenants:
        async def get_tenant(self, tenant: str) -> SimpleNamespace:
            return SimpleNamespace(admin_roles=list(admins))

    wall = [1_000_000.0]
    mono = [50.0]
    monkeypatch.setattr(guard_module.time, "monotonic", lambda: mono[0])
    config = guard_module.SecurityConfig()
    guard = guard_module.Guard(config, lambda: cast(Any, Tenants()), clock=lambda: wall[0])
    assert await guard._tenant_admins("acme") == ("alice",)
    admins[:] = []  # alice's rights revoked
    wall[0] -= 3_600  # the wall clock steps back an hour
    mono[0] += guard_module.TENANT_CACHE_S + 0.1  # the cache's age has run out
    assert await guard._tenant_admins("acme") == ()
