"""The load report's per-bundle rates: ``LoadReport`` JSON (gateway/ownership/key_records.py)
and how ``Gateway.load_report`` (gateway/process.py) computes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import metadata
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from gateway.api.throughput import ThroughputRing
from gateway.names import NamespaceName, TopicName
from gateway.ownership.bundles import NamespaceBundle, bundle_ranges
from gateway.ownership.key_records import BUNDLE_RATES_MAX, GatewayInfo, LoadReport, smoothed
from gateway.process import Gateway, folio_version, resident_bytes

pytestmark = pytest.mark.unit

NS = NamespaceName("public", "default")
BUNDLES = [NamespaceBundle(NS, r) for r in bundle_ranges(4)]
P0, P1 = BUNDLES[0].path, BUNDLES[1].path


def test_bundle_rates_round_trip_in_the_gateway_registration() -> None:
    report = LoadReport(3, 4, 5.5, 0.25, bundle_rates=((P1, 2.5), (P0, 7.0)))
    assert report == LoadReport(3, 4, 5.5, 0.25, bundle_rates=((P0, 7.0), (P1, 2.5)))  # order-free
    assert hash(report) == hash(LoadReport(3, 4, 5.5, 0.25, bundle_rates=((P0, 7.0), (P1, 2.5))))
    assert report.to_json()["bundleRates"] == {P0: 7.0, P1: 2.5}
    info = GatewayInfo("gw-1", "http://gw-1", report, 1234)
    assert GatewayInfo.decode(info.encode()) == info


def test_process_figures_and_version_round_trip_and_older_records_decode() -> None:
    report = LoadReport(1, 2, 3.0, cpu_used=0.125, rss_bytes=96 << 20)
    info = GatewayInfo("gw-1", "http://gw-1", report, 1234, version="0.1.0")
    assert orjson.loads(info.encode())["load"]["rssBytes"] == 96 << 20
    assert GatewayInfo.decode(info.encode()) == info
    older = GatewayInfo.decode(b'{"id":"g","load":{"topics":2}}')
    assert older is not None and (older.version, older.load.cpu_used, older.load.rss_bytes) == ("", 0.0, 0)


def test_the_gateway_reports_its_resident_memory_and_release() -> None:
    assert resident_bytes() > 10 << 20  # a Python process with the gateway's imports
    assert folio_version() == metadata.version("folio")


def test_reports_without_bundle_rates_still_decode() -> None:
    info = GatewayInfo.decode(b'{"id":"g","load":{"topics":2,"msgRateIn":10.0,"cpu":0.5}}')
    assert info is not None and info.load == LoadReport(topics=2, msg_rate_in=10.0, cpu=0.5)
    assert info.load.bundle_rates == ()
    for junk in (b"[1, 2]", b'"x"', b"null", b"3"):  # not an object: the field is ignored
        info = GatewayInfo.decode(b'{"id":"g","load":{"topics":2,"bundleRates":' + junk + b"}}")
        assert info is not None and info.load == LoadReport(topics=2)


def test_bundle_rates_are_bounded_and_only_finite_non_negative_numbers() -> None:
    values: dict[Any, Any] = {
        P0: 1.5,
        P1: 3,  # an int is fine
        "nan": float("nan"),
        "inf": float("inf"),
        "negative": -1.0,
        "bool": True,
        "text": "12",
        "none": None,
        "list": [1.0],
        7: 1.0,  # not a path
        "": 1.0,
        "x" * 600: 1.0,  # longer than any bundle path
    }
    assert LoadReport.from_json({"bundleRates": values}).bundle_rates == ((P0, 1.5), (P1, 3.0))
    info = GatewayInfo.decode(b'{"id":"g","load":{"bundleRates":{"a/b/c":null,"a/b/d":-2,"a/b/e":0}}}')
    assert info is not None and info.load.bundle_rates == (("a/b/e", 0.0),)

    many = {f"t/ns/{i:05d}": float(i) for i in range(BUNDLE_RATES_MAX + 50)}
    rates = LoadReport.from_json({"bundleRates": many}).bundle_rates
    assert len(rates) == BUNDLE_RATES_MAX  # the first BUNDLE_RATES_MAX entries, the rest ignored
    assert rates[-1] == (f"t/ns/{BUNDLE_RATES_MAX - 1:05d}", float(BUNDLE_RATES_MAX - 1))


# ---------------------------------------------------------------- Gateway.load_report


@dataclass
class FakeSubscription:
    msg_out: int = 0


@dataclass
class FakeTopic:
    msg_in: int = 0
    subscriptions: dict[str, FakeSubscription] = field(default_factory=dict)
    readers: dict[str, FakeSubscription] = field(default_factory=dict)


def topic_in(bundle: NamespaceBundle, skip: int = 0) -> TopicName:
    """A topic name of ``NS`` that hashes into ``bundle`` (the ``skip``-th such name)."""
    found = (TopicName.parse(f"persistent://public/default/t{i}") for i in range(10_000))
    return [name for name in found if bundle.contains(name)][skip]


def test_load_report_rates_per_owned_bundle_since_the_previous_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hot, also_hot, elsewhere = topic_in(BUNDLES[0]), topic_in(BUNDLES[0], 1), topic_in(BUNDLES[2])
    topics: dict[TopicName, FakeTopic] = {
        hot: FakeTopic(
            100, {"s1": FakeSubscription(50), "s2": FakeSubscription(30)}, {"r": FakeSubscription(20)}
        ),
        also_hot: FakeTopic(40),
        elsewhere: FakeTopic(10),  # its bundle is not owned (any more): counted in msgRateIn only
    }
    owned = {BUNDLES[0], BUNDLES[1]}
    gateway: Any = SimpleNamespace(
        service=SimpleNamespace(topics=topics),
        ownership=SimpleNamespace(
            owned_bundles=lambda: owned,
            owned_bundle_of=lambda topic: next((b for b in owned if b.contains(topic)), None),
        ),
        sessions=3,
        _load_at=100.0,
        _cpu_at=10.0,
        _load_counts={},
        _bundle_rates={},
        throughput=ThroughputRing(),
        clock=SimpleNamespace(now_ms=lambda: 5_000),
    )
    clock = iter([102.0, 104.0])
    monkeypatch.setattr("gateway.process.time.monotonic", lambda: next(clock))
    cpu_seconds = iter([11.0, 11.5])  # 1 s of CPU in the first 2 s, then 0.5 s
    monkeypatch.setattr("gateway.process.time.process_time", lambda: next(cpu_seconds))
    monkeypatch.setattr("gateway.process.os.cpu_count", lambda: 2)
    monkeypatch.setattr("gateway.process.resident_bytes", lambda: 80 << 20)

    first = Gateway.load_report(gateway)
    assert first == LoadReport(
        topics=3,
        sessions=3,
        msg_rate_in=75.0,
        bundle_rates=((P0, 12.0), (P1, 0.0)),
        cpu_used=0.25,  # 1 CPU second of the machine's 2 x 2
        rss_bytes=80 << 20,
    )  # (100 + 40 + 10) / 2 s in; (100 + 40 in, 50 + 30 + 20 out) / 2 s = 120 on bundle 0, 0.1 of it

    topics[hot].msg_in = 300  # +200
    del topics[hot].subscriptions["s2"]  # its count goes with it: out is 70 (was 100) -> 0, not negative
    topics[also_hot] = FakeTopic(6)  # reloaded since: all its counts are new
    second = Gateway.load_report(gateway)
    assert second.msg_rate_in == pytest.approx((200 + 6 + 0) / 2)
    assert second.bundle_rates == ((P0, 21.1), (P1, 0.0))  # 0.9 x 12 + 0.1 x 103 (smoothed)
    assert second.cpu_used == 0.125
    assert len(gateway.throughput) == 2  # each report is a sample of the dashboard's history


def test_smoothed_rates_see_lasting_load_and_barely_a_burst() -> None:
    rate = 0.0
    rate = smoothed(rate, 30_000.0)  # one 5 s report of a burst
    assert rate == 3_000.0
    for _ in range(3):
        rate = smoothed(rate, 0.0)
    assert rate < 2_200.0  # the burst fades
    for _ in range(60):  # five minutes of lasting load
        rate = smoothed(rate, 10_000.0)
    assert 9_900.0 < rate <= 10_000.0
