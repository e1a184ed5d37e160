"""Keepalive policy (coordination/lease.py): refresh cadence, retries, local loss deadline."""

from __future__ import annotations

import pytest

from coordination import lease as lp
from coordination.lease import KeepalivePolicy, Lost, SendKeepalive, Sleep

pytestmark = pytest.mark.unit

P = KeepalivePolicy.for_ttl(9)  # ttl 9000 ms, interval 3000, retry 900, margin 900


def test_defaults_scale_with_the_ttl() -> None:
    assert (P.ttl_ms, P.interval_ms, P.retry_ms, P.margin_ms) == (9000, 3000, 900, 900)
    one = KeepalivePolicy.for_ttl(1)
    assert (one.interval_ms, one.retry_ms, one.margin_ms) == (333, 100, 100)
    with pytest.raises(ValueError):
        KeepalivePolicy.for_ttl(0)
    with pytest.raises(ValueError):
        KeepalivePolicy(ttl_ms=1000, interval_ms=950, retry_ms=10, margin_ms=100)  # refresh after loss


def test_sleeps_until_the_next_refresh_then_sends_with_the_loss_deadline() -> None:
    s = lp.started(10_000)
    assert lp.decide(P, s, 10_000) == Sleep(until_ms=13_000)
    assert lp.decide(P, s, 12_999) == Sleep(until_ms=13_000)
    assert lp.decide(P, s, 13_000) == SendKeepalive(deadline_ms=10_000 + 9000 - 900)


def test_success_is_counted_from_the_send_time_not_the_answer() -> None:
    s = lp.on_refreshed(lp.started(0), sent_at_ms=3_000)
    assert s.confirmed_at_ms == 3_000
    assert lp.lost_at_ms(P, s) == 3_000 + 8_100
    assert lp.decide(P, s, 3_500) == Sleep(until_ms=6_000)
    # a late answer to an older refresh does not move the deadline backwards
    assert lp.on_refreshed(s, sent_at_ms=1_000) == s


def test_failures_retry_quickly_and_the_lease_is_lost_before_etcd_could_expire_it() -> None:
    s = lp.started(0)
    s = lp.on_failed(s, 3_000)
    assert lp.decide(P, s, 3_000) == Sleep(until_ms=3_900)
    assert isinstance(lp.decide(P, s, 3_900), SendKeepalive)
    s = lp.on_failed(s, 7_900)
    assert lp.decide(P, s, 7_900) == Sleep(until_ms=8_100)  # capped by the loss deadline
    assert lp.decide(P, s, 8_099) == Sleep(until_ms=8_100)  # next retry (8_800) is too late
    lost = lp.decide(P, s, 8_100)
    assert isinstance(lost, Lost) and "ttl - margin" in lost.reason
    assert lp.is_lost(P, s, 8_100) and not lp.is_lost(P, s, 8_099)


def test_a_success_after_failures_resets_the_schedule() -> None:
    s = lp.on_failed(lp.started(0), 3_000)
    s = lp.on_refreshed(s, sent_at_ms=3_900)
    assert s.failed_at_ms is None
    assert lp.decide(P, s, 4_000) == Sleep(until_ms=6_900)


def test_gone_is_lost_at_once_and_force_sends_early() -> None:
    s = lp.started(0)
    assert lp.decide(P, s, 1, force=True) == SendKeepalive(deadline_ms=8_100)
    gone = lp.on_gone(s)
    assert isinstance(lp.decide(P, gone, 1), Lost)
    assert isinstance(lp.decide(P, gone, 1, force=True), Lost)
    assert lp.is_lost(P, gone, 0)


def test_a_holder_that_refreshes_on_schedule_never_loses_its_lease() -> None:
    """Walk the policy through 100 ttls with a 200 ms answer latency."""
    s = lp.started(0)
    now = 0
    sends = 0
    while now < 100 * P.ttl_ms:
        action = lp.decide(P, s, now)
        assert not isinstance(action, Lost)
        if isinstance(action, Sleep):
            now = action.until_ms
        else:
            s = lp.on_refreshed(s, sent_at_ms=now)
            sends += 1
            now += 200
    assert 290 <= sends <= 300
