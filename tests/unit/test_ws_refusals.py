"""RefusalLog: refused handshakes are logged once per client per interval, in bounded state."""

from __future__ import annotations

from gateway.api.ws_refusals import RefusalLog


def test_once_per_client_per_interval_with_the_count_of_the_quiet_ones() -> None:
    refusals = RefusalLog(interval_ms=1000, max_clients=10)
    assert refusals.admit("10.0.0.1", 0) == 0
    assert refusals.admit("10.0.0.1", 10) is None
    assert refusals.admit("10.0.0.1", 999) is None
    assert refusals.admit("10.0.0.2", 999) == 0  # another client is not held back
    assert refusals.admit("10.0.0.1", 1000) == 2  # logged again, saying 2 were not
    assert refusals.admit("10.0.0.1", 1500) is None


def test_remembers_at_most_max_clients() -> None:
    refusals = RefusalLog(interval_ms=60_000, max_clients=3)
    for i in range(100):
        assert refusals.admit(f"10.0.0.{i}", i) == 0
    assert len(refusals) == 3
    assert refusals.admit("10.0.0.99", 200) is None  # the newest are the ones kept
