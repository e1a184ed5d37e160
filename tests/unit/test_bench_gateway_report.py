"""Pure parts of ``folio bench gateway``: CPU %, medians over reps, peer rows, profile summary."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest

from folio.bench_cpu import cpu_percentages
from folio.bench_gateway_report import Row, format_row, merge_reps, peer_rows, profile_top, server_cpu
from folio.bench_gateway_w2 import PACE_TICK_S, W2Pace

pytestmark = pytest.mark.unit


def test_cpu_percentages_are_of_one_core_and_other_is_the_rest() -> None:
    cpu = cpu_percentages(
        {"gw": 100, "client": 50}, busy=300, total=400, seconds=1.0, clock_ticks=100, cores=2
    )
    assert cpu == {"gw": 100.0, "client": 50.0, "machine": 150.0, "other": 0.0}
    cpu = cpu_percentages({"gw": 10}, busy=200, total=400, seconds=2.0, clock_ticks=100, cores=2)
    assert cpu["gw"] == 5.0 and cpu["machine"] == 100.0 and cpu["other"] == 95.0


def _row(rate: float, note: str = "", errors: int = 0) -> Row:
    cpu = {"gw": rate / 100}
    return Row("folio", "W1", "ws", 100, int(rate), 1.0, rate, rate / 1e4, 1.0, rate / 100, cpu, errors, note)


def test_merge_reps_takes_medians_sums_errors_and_keeps_order() -> None:
    other = Row("folio", "W3", "ws", 100, 5, 1.0, 5.0, 0.0)
    merged = merge_reps([_row(100, "a"), other, _row(300, "b", 2), _row(200, "a")])
    assert [r.workload for r in merged] == ["W1", "W3"]
    first = merged[0]
    assert first.msgs_per_s == 200 and first.p99_ms == 2.0 and first.cpu == {"gw": 2.0}
    assert first.errors == 2 and first.reps == 3 and first.note == "a (2 of 3 reps); b (1 of 3 reps)"
    assert merged[1] is other


def test_merge_reps_sums_each_error_kind() -> None:
    """A row with errors says what they were; over reps each kind's count is summed."""
    closed = "session closed (4503 topic unloaded; reconnect); 128 in flight, fate unknown"
    rows = [
        replace(_row(100, errors=129), error_kinds={closed: 128, "ledger fenced": 1}),
        _row(100),
        replace(_row(100, errors=2), error_kinds={"ledger fenced": 2}),
    ]
    merged = merge_reps(rows)[0]
    assert merged.errors == 131 and merged.error_kinds == {closed: 128, "ledger fenced": 3}
    assert "error_kinds" in asdict(merged)  # the JSON row carries them


def test_merge_reps_names_a_note_part_once() -> None:
    rows = [_row(100, "ack latency"), _row(100, "ack latency; capped at 8 s"), _row(100, "ack latency")]
    assert merge_reps(rows)[0].note == "ack latency; capped at 8 s (1 of 3 reps)"


def test_server_cpu_sums_our_groups_or_takes_the_peers_figure() -> None:
    assert server_cpu({"gw": 50.0, "node": 30.0, "etcd": 5.0, "client": 90.0}) == 85.0
    assert server_cpu({"server": 40.0, "client": 80.0}) == 40.0
    assert server_cpu({"client": 80.0}) is None
    assert " - " in format_row(Row("folio", "W1", "ws", 100, 1, 1.0, 1.0, 0.0, cpu={"client": 3.0}))


def test_peer_rows_from_harness_records() -> None:
    records = [
        {"system": "redis-streams", "config": "fsync_always", "workload": "W1", "payload": 1024, "msgs": 9,
         "secs": 1.0, "msgs_per_s": 9, "MBps": 0.01, "cpu_server_pct": 20.0, "cpu_client_pct": 99.0,
         "other_pct": 3.0, "capped_by_time": True, "errors": 0},
        {"system": "nats-jetstream", "config": "default", "workload": "W2", "offered_rate": 2000,
         "achieved_send_rate": 2000, "msgs": 20000, "received": 20000, "e2e_p50_ms": 3.5, "e2e_p99_ms": 9.9,
         "puback_p50_ms": 3.1, "puback_p99_ms": 11.4, "cpu_server_pct": 100.0, "cpu_client_pct": 66.0,
         "other_pct": 0.4},
    ]  # fmt: skip
    rows = peer_rows(records)
    assert [(r.system, r.workload, r.size) for r in rows] == [
        ("redis:fsync_always", "W1", 1024),
        ("nats:default", "W2 e2e", 100),
        ("nats:default", "W2 ack", 100),
    ]
    assert rows[0].note == "time-capped" and rows[0].cpu["server"] == 20.0
    assert (rows[1].p50_ms, rows[1].p99_ms, rows[2].p50_ms, rows[2].p99_ms) == (3.5, 9.9, 3.1, 11.4)


def test_profile_top_counts_self_and_total_per_function() -> None:
    collapsed = "\n".join(
        [
            "<module> (/x/gateway/main.py:7);serve (/x/gateway/main.py:40);parse (/x/proto/frames.py:12) 6",
            "<module> (/x/gateway/main.py:7);serve (/x/gateway/main.py:41) 3",
            "<module> (/x/gateway/main.py:7);parse (/x/proto/frames.py:13) 1",
            "garbage line",
        ]
    )
    samples, ranked = profile_top(collapsed, top=2)
    assert samples == 10
    assert ranked == [("parse (proto/frames.py)", 70.0, 70.0), ("serve (gateway/main.py)", 30.0, 90.0)]
    assert profile_top("") == (0, [])


def test_w2_tick_pacing_never_sleeps_below_a_timer_tick_and_spin_pacing_does() -> None:
    # uvloop rounds timers to whole ms: a 0.4 ms sleep returns at once, so the
    # producer would spin a core. Tick pacing sleeps a tick and sends what is due then.
    tick = W2Pace(2000.0, 10.0)
    spin = W2Pace(2000.0, 10.0, spin=True)
    assert tick.expected == spin.expected == 20_000
    assert tick.sleep_s(start=0.0, sent=1, now=0.0001) == PACE_TICK_S
    assert spin.sleep_s(start=0.0, sent=1, now=0.0001) == pytest.approx(0.0004)
    assert spin.sleep_s(start=0.0, sent=1, now=0.001) == 0.0
    assert tick.sleep_s(start=0.0, sent=10, now=0.001) == pytest.approx(0.004)  # ahead: the due time


def test_persistence_option_is_pulsars_policy_body() -> None:
    from folio.bench_gateway import persistence_body

    assert persistence_body("") is None
    assert persistence_body("3,2,2") == {
        "bookkeeperEnsemble": 3,
        "bookkeeperWriteQuorum": 2,
        "bookkeeperAckQuorum": 2,
    }
    for bad in ("3,2", "3,2,2,1", "a,b,c"):
        with pytest.raises(SystemExit, match="E,QW,QA"):
            persistence_body(bad)


def test_persistence_label() -> None:
    from folio.bench_gateway import persistence_body, persistence_label

    assert persistence_label(persistence_body("3,2,2"), several=True) == "folio 3/2/2"
    assert persistence_label(persistence_body("3,2,2"), several=False) == "folio"
    assert persistence_label(None, several=True) == "folio"
