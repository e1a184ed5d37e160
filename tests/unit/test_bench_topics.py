"""The topic curve's option, rows, table and ratios, and the plots' series and files."""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
import pytest

from folio.bench_gateway import settings_from, topic_row
from folio.bench_gateway_load import LoadResult
from folio.bench_gateway_report import (
    TOPIC_WORKLOAD,
    Row,
    format_row,
    format_topic_table,
    merge_reps,
    topic_ratios,
    us_per_msg,
)
from folio.bench_plots import (
    LATENCY_PNG,
    ROWS_FILE,
    THROUGHPUT_PNG,
    TOPICS_PNG,
    latency_series,
    throughput_series,
    topic_series,
    write_plots,
)
from folio.bench_topics import parse_topics
from folio.cli import _parser

pytestmark = pytest.mark.unit

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _curve_row(topics: int, rate: float, gw: float, node: float, client: float) -> Row:
    cpu = {"gw": gw, "node": node, "etcd": 1.0, "client": client, "machine": 150.0, "other": 0.0}
    return Row("folio", TOPIC_WORKLOAD, "ws", 100, int(rate * 8), 8.0, rate, rate / 1e4, 2.0, 9.0, cpu,
               topics=topics)  # fmt: skip


def test_parse_topics() -> None:
    assert parse_topics("1,10,100,1000") == (1, 10, 100, 1000)
    assert parse_topics(" 5 ") == (5,)
    assert parse_topics("") == ()
    for bad in ("a,b", "0", "1,-3", "200000"):
        with pytest.raises(SystemExit, match="--topics"):
            parse_topics(bad)


def _args(*argv: str) -> argparse.Namespace:
    return _parser().parse_args(["bench", "gateway", *argv])


def test_topics_option_allows_no_other_workload_only_with_topics() -> None:
    s = settings_from(_args("--topics", "1,1000", "--workloads", ""))
    assert s.topics == (1, 1000) and s.workloads == ()
    assert settings_from(_args()).topics == ()
    with pytest.raises(SystemExit, match="--workloads"):
        settings_from(_args("--workloads", ""))
    assert _args("--plots", "out").plots == "out"


def test_cpu_per_message_is_cpu_percent_over_rate() -> None:
    # half a core (50 %) at 10,000 msg/s = 50 µs of CPU per message
    assert us_per_msg(50.0, 10_000.0) == pytest.approx(50.0)
    assert us_per_msg(None, 10_000.0) is None and us_per_msg(50.0, 0.0) is None
    row = _curve_row(1, 20_000.0, gw=80.0, node=30.0, client=40.0)
    assert row.us_per_msg("gw") == pytest.approx(40.0)
    assert row.us_per_msg("srv") == pytest.approx((80 + 30 + 1) * 1e4 / 20_000)
    assert row.us_per_msg("client") == pytest.approx(20.0)


def test_every_row_prints_server_and_client_cpu_per_message() -> None:
    row = Row(
        "folio", "W1", "ws", 100, 1000, 1.0, 10_000.0, 1.0, cpu={"gw": 50.0, "node": 25.0, "client": 30.0}
    )
    fields = format_row(row).split()
    assert fields[-2:] == ["75.0", "30.0"]  # srv µs = 75 % * 1e4 / 10,000; client µs = 30


def test_topic_rows_keep_apart_in_medians_and_the_table_gives_the_ratio() -> None:
    rows = [_curve_row(1, 20_000.0, 80.0, 30.0, 40.0), _curve_row(1000, 5_000.0, 100.0, 40.0, 20.0)]
    rows.append(_curve_row(1, 22_000.0, 80.0, 30.0, 40.0))
    merged = merge_reps(rows)
    assert [(r.topics, r.reps) for r in merged] == [(1, 2), (1000, 1)]
    ratios = topic_ratios(merged)
    assert ratios["msg/s"] == pytest.approx(5_000 / 21_000)
    assert ratios["gw µs/msg"] == pytest.approx((100 * 1e4 / 5_000) / (80 * 1e4 / 21_000))
    table = format_topic_table(merged)
    assert "1,000 topics ÷ 1: msg/s 0.24x" in table
    assert topic_ratios(merged[:1]) == {}
    failed = Row("folio", TOPIC_WORKLOAD, "ws", 100, 0, 0.0, 0.0, 0.0, errors=1, topics=10_000)
    assert topic_ratios([*merged, failed]) == ratios  # a failed count is not the curve's end


def test_topic_row_from_a_run() -> None:
    res = LoadResult(ok=800, seconds=2.0, latencies_ms=[1.0] * 790 + [9.0] * 10)
    row = topic_row(100, 256, res, {"gw": 40.0}, closed=2)
    assert (row.workload, row.topics, row.msgs_per_s, row.p50_ms, row.p99_ms) == (
        TOPIC_WORKLOAD,
        100,
        400.0,
        1.0,
        9.0,
    )
    assert "256 in flight over 100 topic(s)" in row.note and "2 session(s) closed" in row.note


def test_plot_series() -> None:
    w1 = Row("folio", "W1", "ws", 100, 10, 1.0, 10.0, 0.0, 1.0, 3.0)
    peer = Row("redis:always", "W1", "-", 100, 10, 1.0, 30.0, 0.0)
    w2 = Row("folio", "W2 e2e", "ws", 100, 10, 1.0, 10.0, 0.0, 0.5, 2.5)
    curve = [_curve_row(1000, 5_000.0, 100.0, 40.0, 20.0), _curve_row(1, 20_000.0, 80.0, 30.0, 40.0)]
    assert throughput_series([w1, peer, w2]) == {"W1 100 B": {"folio ws": 10.0, "redis:always": 30.0}}
    assert latency_series([w1, peer, w2, *curve]) == [
        ("folio: W1 ws 100 B", 1.0, 3.0),
        ("folio: W2 e2e ws 100 B", 0.5, 2.5),
    ]
    series = topic_series(curve)
    assert series["topics"] == [1.0, 1000.0] and series["msg/s"] == [20_000.0, 5_000.0]
    assert series["gw µs"] == [pytest.approx(40.0), pytest.approx(200.0)]


def test_write_plots_writes_pngs_and_the_rows(tmp_path: Path) -> None:
    w1 = Row("folio", "W1", "ws", 100, 10, 1.0, 10.0, 0.0, 1.0, 3.0, {"gw": 5.0})
    curve = [_curve_row(1, 20_000.0, 80.0, 30.0, 40.0), _curve_row(10, 9_000.0, 90.0, 35.0, 30.0)]
    peer = Row("nats:default", "W1", "-", 100, 10, 1.0, 20.0, 0.0)
    written = write_plots(tmp_path / "plots", [w1, *curve], [peer], "test run")
    names = {p.name for p in written}
    assert names == {ROWS_FILE, THROUGHPUT_PNG, LATENCY_PNG, TOPICS_PNG}
    for path in written:
        if path.suffix == ".png":
            assert path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 5_000
    lines = [orjson.loads(x) for x in (tmp_path / "plots" / ROWS_FILE).read_text().splitlines()]
    assert [(x["system"], x["topics"]) for x in lines] == [
        ("folio", 1),
        ("folio", 1),
        ("folio", 10),
        ("nats:default", 1),
    ]
    only_curve = write_plots(tmp_path / "curve", curve, [], "t")
    assert {p.name for p in only_curve} == {ROWS_FILE, TOPICS_PNG}  # no workload rows: no latency figure


def test_messages_per_entry_counts_distinct_entries_of_the_acked_ids() -> None:
    from folio.bench_topics import messages_per_entry
    from storage.formats.message_id import MessageId

    ids = [MessageId(7, 0, -1, i, 3).to_base64() for i in range(3)]  # one entry of 3 messages
    ids += [MessageId(7, 1).to_base64(), MessageId(9, 0).to_base64()]  # two entries of one
    assert messages_per_entry(ids) == pytest.approx(5 / 3)
    assert messages_per_entry([]) is None
    assert messages_per_entry(["not an id"]) is None


def test_node_counters_read_syncs_and_adds_from_the_metrics_text() -> None:
    from prometheus_client import generate_latest

    from folio.bench_topics import node_counters
    from storage.node.metrics import NodeMetrics

    metrics = NodeMetrics()
    metrics.adds.inc(12)
    for _ in range(4):
        metrics.sync_seconds.observe(0.001)
    assert node_counters(generate_latest(metrics.registry).decode()) == (4.0, 12.0)
    assert node_counters("") == (0.0, 0.0)


async def test_retrying_tries_again_then_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from folio import bench_topics

    monkeypatch.setattr(bench_topics, "CONNECT_RETRY_S", 0.0)
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OSError("408 Request Timeout")
        return "ok"

    assert await bench_topics.retrying(flaky) == "ok" and len(calls) == 3
    calls.clear()

    async def refused() -> str:
        calls.append(1)
        raise OSError("refused")

    with pytest.raises(OSError, match="refused"):
        await bench_topics.retrying(refused)
    assert len(calls) == bench_topics.CONNECT_TRIES


class FakeSession:
    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.is_open = True

    def send(self, data: bytes) -> None:
        self.sent.append(data)


async def test_spread_keeps_the_window_full_round_robin_and_stops_when_no_session_is_open() -> None:
    from typing import cast

    from folio.bench_topics import Spread
    from folio.bench_ws_client import FrameSession

    spread = Spread(topics=3, window=4, seconds=60.0)
    fakes = [FakeSession() for _ in range(3)]
    spread.sessions = cast(list[FrameSession], fakes)
    spread.start()
    assert [len(f.sent) for f in fakes] == [2, 1, 1] and spread.total_inflight == 4
    ok = b'{"result":"ok","messageId":"CAcQAA==","context":"0"}'
    spread.reply(0, ok)  # one answered: the next topic in turn gets the next message
    assert [len(f.sent) for f in fakes] == [2, 2, 1] and spread.total_inflight == 4
    assert spread.result.ok == 1 and spread.message_ids == ["CAcQAA=="]
    for fake in fakes:
        fake.is_open = False  # every session gone before its close was counted: no endless refill
    spread.reply(1, ok.replace(b'"0"', b'"1"'))
    assert spread.total_inflight == 3 and sum(len(f.sent) for f in fakes) == 5
