"""Pure back-off rules: ``folio up``'s restarts and waiting for etcd."""

from __future__ import annotations

from coordination.patience import Backoff
from folio.restarts import RestartPolicy, Restarts


def test_a_child_that_ran_long_is_restarted_at_once_and_quick_exits_back_off() -> None:
    r = Restarts(RestartPolicy(initial_ms=500, max_ms=4_000, stable_ms=60_000), started_ms=0)
    assert r.exited(100_000) == 0 and r.due(100_000)
    r.restarted(100_000)
    pauses = []
    for _ in range(5):  # dies again at once, five times
        now = r.due_ms or r.started_ms
        pauses.append(r.exited(now + 10))
        assert not r.due(now + 10 + pauses[-1] - 1) or pauses[-1] == 0
        r.restarted(now + 10 + pauses[-1])
    assert pauses == [500, 1_000, 2_000, 4_000, 4_000]
    assert r.exited(r.started_ms + 60_000) == 0  # stable again: no pause


def test_backoff_grows_to_its_cap() -> None:
    b = Backoff(initial_s=0.2, max_s=5.0)
    assert [b.delay_s(n) for n in (1, 2, 3, 5, 9)] == [0.2, 0.4, 0.8, 3.2, 5.0]
