"""Failed-auth throttle and per-role session counts (pure)."""

from __future__ import annotations

import pytest

from gateway.security.throttle import FailureLimiter, SessionCounts

pytestmark = pytest.mark.unit


def test_failures_block_an_address_for_the_window() -> None:
    limiter = FailureLimiter(max_failures=3, window_s=10)
    for t in (0.0, 1.0, 2.0):
        assert not limiter.blocked("a", t)
        limiter.failed("a", t)
    assert limiter.blocked("a", 2.5) and not limiter.blocked("b", 2.5)
    assert limiter.blocked("a", 9.9)
    assert not limiter.blocked("a", 10.5)  # the first failure left the window


def test_sessions_per_role() -> None:
    counts = SessionCounts(per_role=2)
    assert counts.open("r") and counts.open("r") and not counts.open("r")
    assert counts.open("other")
    counts.close("r")
    assert counts.count("r") == 1 and counts.open("r")
