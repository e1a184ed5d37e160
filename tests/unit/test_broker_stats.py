"""Pure stats cores: the rate meter, Pulsar's stats builders, partitioned aggregation,
and the stats-history ring."""

from __future__ import annotations

import pytest

from gateway.broker import stats
from gateway.broker.stats import RateMeter, iso_ms
from gateway.broker.stats_history import StatsHistory, StatsSample, merge

pytestmark = pytest.mark.unit


def test_rate_meter_is_zero_until_a_sample_is_old_enough() -> None:
    meter = RateMeter(window_ms=10_000)
    assert meter.rates(1_000, (5, 50)) == (0.0, 0.0)
    meter.sample(1_000, (0, 0))
    assert meter.rates(1_200, (10, 100)) == (0.0, 0.0)  # span below MIN_SPAN_MS
    assert meter.rates(3_000, (10, 100)) == (5.0, 50.0)  # 10 messages in 2 s


def test_rate_meter_window_forgets_old_samples() -> None:
    meter = RateMeter(window_ms=5_000)
    for second in range(0, 21):  # 100 msg/s for 10 s, then idle
        meter.sample(second * 1000, (min(second, 10) * 100,))
    assert meter.rates(20_000, (1000,)) == (0.0,)  # idle for the whole window
    busy = RateMeter(window_ms=5_000)
    for second in range(0, 11):
        busy.sample(second * 1000, (second * 100,))
    (rate,) = busy.rates(10_000, (1000,))
    assert rate == pytest.approx(100.0)


def test_rate_meter_ignores_samples_out_of_order() -> None:
    meter = RateMeter()
    meter.sample(5_000, (10,))
    meter.sample(4_000, (0,))
    assert meter.rates(7_000, (30,)) == (10.0,)


def test_iso_ms() -> None:
    """Java's ISO_OFFSET_DATE_TIME, as Pulsar prints times: no fraction when zero, else
    as few digits as needed."""
    assert iso_ms(0) == "1970-01-01T00:00:00Z"
    assert iso_ms(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
    assert iso_ms(1_662_513_303_260) == "2022-09-07T01:15:03.26Z"


def _consumer(name: str, unacked: int) -> dict[str, object]:
    return stats.consumer_stats(
        name=name,
        rates=(1.0, 10.0, 0.0, 1.0),
        msg_out=4,
        bytes_out=40,
        available_permits=996,
        unacked=unacked,
        blocked=False,
        connected_since_ms=0,
        hash_ranges=[(0, 32767)],
    )


def _sub(backlog: int, consumers: list[dict[str, object]]) -> dict[str, object]:
    return stats.subscription_stats(
        sub_type="Shared",
        durable=True,
        rates=(1.0, 10.0, 0.0, 1.0, 0.0),
        msg_out=4,
        bytes_out=40,
        backlog=backlog,
        backlog_bytes=backlog * 10,
        delayed=0,
        consumers=consumers,  # type: ignore[arg-type]
        active_consumer=None,
        total_expired=0,
        last_expire_ms=0,
        last_acked_ms=7,
        last_consumed_ms=8,
        ack_holes=1,
    )


def _topic(msg_in: int, subs: dict[str, dict[str, object]]) -> dict[str, object]:
    publisher = stats.publisher_stats(
        producer_id=1, name="p", rates=(2.0, 20.0), msg_in=msg_in, bytes_in=msg_in * 10, connected_since_ms=0
    )
    return stats.topic_stats(
        rates_in=(2.0, 20.0),
        msg_in=msg_in,
        bytes_in=msg_in * 10,
        storage_size=1000,
        backlog_size=60,
        publishers=[publisher],
        subscriptions=subs,  # type: ignore[arg-type]
        deduplication=False,
    )


def test_builders_use_pulsars_field_names() -> None:
    consumer = _consumer("c1", 3)
    assert consumer["keyHashRanges"] == ["[0, 32767]"]
    assert {"consumerName", "availablePermits", "unackedMessages", "msgOutCounter", "connectedSince"} <= set(
        consumer
    )
    sub = _sub(6, [consumer, _consumer("c2", 2)])
    assert sub["unackedMessages"] == 5 and sub["msgBacklog"] == 6 and sub["type"] == "Shared"
    topic = _topic(10, {"s": sub})
    assert topic["msgInCounter"] == 10 and topic["averageMsgSize"] == 10.0
    assert topic["msgOutCounter"] == 4 and topic["msgRateOut"] == 1.0
    assert topic["publishers"][0]["producerName"] == "p"  # type: ignore[index]
    assert topic["deduplicationStatus"] == "Disabled"
    for field in (
        "msgRateIn",
        "msgThroughputIn",
        "bytesInCounter",
        "storageSize",
        "backlogSize",
        "waitingPublishers",
    ):
        assert field in topic


def test_aggregate_sums_partitions_and_merges_subscriptions() -> None:
    a = _topic(10, {"s": _sub(6, [_consumer("c1", 3)])})
    b = _topic(5, {"s": _sub(1, [_consumer("c2", 1)]), "only-b": _sub(2, [])})
    out = stats.aggregate({"t-partition-0": a, "t-partition-1": b}, per_partition=True)
    assert out["msgInCounter"] == 15 and out["bytesInCounter"] == 150
    assert out["storageSize"] == 2000 and out["msgRateIn"] == 4.0
    assert len(out["publishers"]) == 2
    assert out["subscriptions"]["s"]["msgBacklog"] == 7
    assert out["subscriptions"]["s"]["unackedMessages"] == 4
    assert [c["consumerName"] for c in out["subscriptions"]["s"]["consumers"]] == ["c1", "c2"]
    assert out["subscriptions"]["only-b"]["msgBacklog"] == 2
    assert out["metadata"] == {"partitions": 2}
    assert set(out["partitions"]) == {"t-partition-0", "t-partition-1"}
    assert a["subscriptions"]["s"]["msgBacklog"] == 6  # type: ignore[index]  # inputs untouched
    assert stats.aggregate({"x": a}, per_partition=False)["partitions"] == {}


def _sample(t: int, backlog: int = 0) -> StatsSample:
    return StatsSample(t, 1.0, 2.0, 10.0, 20.0, backlog, 100)


def test_history_keeps_one_sample_per_interval_and_is_bounded() -> None:
    history = StatsHistory(interval_ms=5000, capacity=3)
    assert history.offer(_sample(0))
    assert not history.offer(_sample(1000))  # same interval
    for t in (5000, 10_000, 15_000, 20_000):
        assert history.offer(_sample(t, t))
    data = history.to_json()
    assert data["intervalMs"] == 5000
    assert [s["t"] for s in data["samples"]] == [10_000, 15_000, 20_000]
    assert data["samples"][-1] == {
        "t": 20_000,
        "msgRateIn": 1.0,
        "msgRateOut": 2.0,
        "msgThroughputIn": 10.0,
        "msgThroughputOut": 20.0,
        "msgBacklog": 20_000,
        "storageSize": 100,
    }


def test_history_merge_sums_partitions_per_slot() -> None:
    one = StatsHistory()
    two = StatsHistory()
    one.offer(_sample(5_000, 3))
    two.offer(_sample(6_000, 4))
    two.offer(_sample(11_000, 1))
    merged = merge([one.to_json(), two.to_json()])
    assert [s["t"] for s in merged["samples"]] == [5_000, 10_000]
    assert merged["samples"][0]["msgBacklog"] == 7 and merged["samples"][0]["msgRateIn"] == 2.0


def test_rate_meter_started_at_zero_counts_from_its_start() -> None:
    meter = RateMeter(1_000, 2)
    assert meter.rates(3_000, (10, 100)) == (5.0, 50.0)
