"""The statistics core on plain Python data (spark/folio_analytics: no Spark here)."""

from __future__ import annotations

import random

import orjson
import pytest
from folio_analytics.backlog import subscription_lag
from folio_analytics.grid import GridSeries
from folio_analytics.keyshare import predict, skew_warnings
from folio_analytics.profile import Bounds, Message, Profile, fold_messages, key_bytes
from folio_analytics.results import RESULT_BYTES, STATE_BYTES, cluster_summary, topic_results
from folio_analytics.sketches import CHART_BINS, HeavyHitters, Hll, LogHistogram, cell_bounds, cell_of

from storage.formats.key_hash import key_slot

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000


def messages(n: int, seed: int, keys: int = 50, ledgers: int = 3) -> list[Message]:
    rng = random.Random(seed)
    out = []
    per_ledger = n // ledgers + 1
    for i in range(n):
        key = None if rng.random() < 0.05 else f"k{min(int(rng.expovariate(0.15)), keys - 1)}"
        out.append(
            Message(
                ledger_id=10 + i // per_ledger,
                entry_id=(i % per_ledger) // 4,  # 4 messages per entry (a batch)
                size=int(rng.lognormvariate(5, 1)),
                publish_ms=T0 + i * 700,
                key=key,
                producer=f"p{rng.randrange(4)}",
                event_ms=T0 + i * 700 - rng.randrange(0, 5000) if i % 3 else None,
            )
        )
    return out


def exact_percentile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[max(1, -(-int(q * 1000) * len(ordered) // 1000)) - 1]


def test_cells_cover_every_value_once() -> None:
    for value in [*range(0, 300), 1023, 1024, 5_000_000, 2**40 + 3]:
        low, high = cell_bounds(cell_of(value))
        assert low <= value < high, value
        assert (high - low) <= max(1, low // 8)  # 12.5 % relative width


def test_chart_bins_spread_similar_sizes_and_fall_back_to_powers_of_two() -> None:
    similar = LogHistogram()
    for size in range(8, 40):  # within two powers of two: once one "at least 8 B" bar
        similar.add(size)
    bins = similar.chart_bins()
    assert 4 < len(bins) <= CHART_BINS and sum(n for _, n in bins) == 32
    assert [low for low, _ in bins][:3] == [8, 9, 10]  # exact sizes below 16
    spread = LogHistogram()
    for size in (2**e + 1 for e in range(4, 30)):  # 26 powers of two: more cells than bars
        spread.add(size)
    assert spread.chart_bins() == [(1 << e, 1) for e in range(4, 30)]


def test_percentiles_within_a_cell_of_the_exact_value() -> None:
    rng = random.Random(1)
    values = [int(rng.lognormvariate(6, 1.5)) for _ in range(20_000)]
    hist = LogHistogram()
    for v in values:
        hist.add(v)
    for q in (0.5, 0.9, 0.99, 0.999):
        exact = exact_percentile(values, q)
        assert abs(hist.percentile(q) - exact) <= max(1, exact * 0.125), (q, exact, hist.percentile(q))
    assert hist.percentile(1.0) == max(values) and hist.low == min(values)
    small = LogHistogram()
    for v in [3, 3, 7, 9]:
        small.add(v)
    assert [small.percentile(q) for q in (0.25, 0.5, 0.75, 1.0)] == [3, 3, 7, 9]  # exact below 16


def test_top_keys_exact_within_capacity_and_bounded_beyond() -> None:
    rng = random.Random(2)
    stream = [f"k{int(rng.expovariate(0.01))}" for _ in range(50_000)]
    true: dict[str, int] = {}
    for k in stream:
        true[k] = true.get(k, 0) + 1
    hh = HeavyHitters(64)
    for chunk in range(0, len(stream), 1000):  # folded 1000 at a time, as a run folds batches
        part: dict[str, int] = {}
        for k in stream[chunk : chunk + 1000]:
            part[k] = part.get(k, 0) + 1
        hh.add_counts(part)
    assert len(true) > 64
    assert hh.error <= len(stream) / 65 * 50  # summed trims stay a small fraction of the stream
    for key in sorted(true, key=lambda k: -true[k])[:5]:
        assert true[key] - hh.error <= hh.counts[key] <= true[key], key
    exact = HeavyHitters(1000)
    exact.add_counts(true)
    assert exact.error == 0 and dict(exact.top(3)) == dict(sorted(true.items(), key=lambda kv: -kv[1])[:3])


def test_distinct_keys_estimate_and_merge_equals_one_sketch() -> None:
    whole, left, right = Hll(), Hll(), Hll()
    for i in range(30_000):
        whole.add(f"key-{i}".encode())
        (left if i % 2 else right).add(f"key-{i}".encode())
    left.merge(right)
    assert left.registers == whole.registers and left.estimate() == whole.estimate()
    assert abs(whole.estimate() - 30_000) < 30_000 * 0.05
    few = Hll()
    few.add_all([b"a", b"b", b"c", b"a"])
    assert few.estimate() == 3
    assert Hll.from_json(whole.to_json()).registers == whole.registers


def test_grid_keeps_its_bound_and_is_split_independent() -> None:
    points = [(T0 + i * 61_000, 1, 10, T0 + i * 61_000) for i in range(5000)]
    whole = GridSeries(60_000, 100)
    whole.add_many(points)
    assert len(whole.cells) <= 100 and sum(c[0] for c in whole.cells.values()) == 5000
    parts = [GridSeries(60_000, 100) for _ in range(3)]
    for i, p in enumerate(points):
        parts[i % 3].add(*p)
    parts[2].merge(parts[0])
    parts[2].merge(parts[1])
    assert parts[2].to_json() == whole.to_json()


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_incremental_folding_equals_full_recomputation(seed: int) -> None:
    data = messages(6000, seed)
    full = fold_messages(data)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(data)), 4))
    stored = Profile()
    for lo, hi in zip([0, *cuts], [*cuts, len(data)], strict=True):
        # each run folds what it read into the stored totals, through JSON as in etcd
        stored = Profile.from_json(orjson.loads(orjson.dumps(stored.to_json())))
        stored.merge(fold_messages(data[lo:hi]))
    assert stored.to_json() == full.to_json()
    assert full.messages == 6000 and full.bytes == sum(m.size for m in data)
    assert full.last == (max(m.ledger_id for m in data), max(m.entry_id for m in data if m.ledger_id == 12))


def test_key_shared_prediction_matches_routing_by_hash_ranges() -> None:
    data = messages(8000, 6, keys=40)
    profile = fold_messages(data)
    consumers = [("c1", [(0, 16383)]), ("c2", [(16384, 40000)]), ("c3", [(40001, 65535)])]
    actual = dict.fromkeys(("c1", "c2", "c3"), 0)
    for m in data:
        slot = key_slot(key_bytes(m.key))
        for name, ranges in consumers:
            if any(s <= slot <= e for s, e in ranges):
                actual[name] += 1
    shares = predict(profile, consumers)
    # 40 keys, all heavy hitters: every keyed message sits in its exact slot
    assert {s.consumer: round(s.messages) for s in shares} == actual
    assert sum(s.share for s in shares) == pytest.approx(1.0)


def test_prediction_spreads_light_keys_over_their_bucket() -> None:
    profile = Profile(Bounds(heavy_keys=4))
    profile.add_keys({f"u{i}": 1 for i in range(20_000)})
    halves = predict(profile, [("a", [(0, 32767)]), ("b", [(32768, 65535)])], top=0)
    assert [round(s.share, 2) for s in halves] == [pytest.approx(0.5, abs=0.02)] * 2


def test_skew_warns_of_a_hot_key_and_an_overloaded_consumer() -> None:
    profile = Profile()
    profile.add_totals(1000, 1000, T0, T0)
    profile.add_keys({"hot": 600, **{f"k{i}": 10 for i in range(40)}})
    shares = predict(profile, [("c1", [(0, 32767)]), ("c2", [(32768, 65535)])])
    warnings = skew_warnings(profile, shares, profile.distinct.estimate())
    assert any("hot key 'hot'" in w and "60%" in w for w in warnings), warnings
    hot_owner = "c1" if key_slot(b"hot") <= 32767 else "c2"
    assert any(f"consumer {hot_owner} would receive" in w for w in warnings), warnings
    even = Profile()
    even.add_totals(1000, 1000, T0, T0)
    even.add_keys({f"k{i}": 10 for i in range(100)})
    assert skew_warnings(even, predict(even, [("c1", [(0, 65535)])]), 100) == []


def test_backlog_counts_unacknowledged_messages_after_the_cursor() -> None:
    data = messages(3000, 7)
    profile = fold_messages(data)
    mark = (11, 40)
    acked_range = (11, 60, 70)
    cursor = {"cursor": {"markDelete": list(mark), "ranges": [list(acked_range)]}, "type": "Shared"}
    unacked = [
        m
        for m in data
        if (m.ledger_id, m.entry_id) > mark
        and not (m.ledger_id == acked_range[0] and acked_range[1] <= m.entry_id <= acked_range[2])
    ]
    lag = subscription_lag(profile, cursor)
    # 250 entries per ledger in 64 cells: counts are pro rata inside a cell of 4 entries
    assert abs(lag.backlog - len(unacked)) <= 2 * 4 * 4, (lag.backlog, len(unacked))
    assert abs(lag.backlog_bytes - sum(m.size for m in unacked)) <= 0.02 * sum(m.size for m in unacked)
    oldest = min(m.publish_ms for m in unacked)
    assert lag.oldest_ms is not None and oldest - 4 * 4 * 700 <= lag.oldest_ms <= oldest
    view = lag.to_json(T0 + 10**7, None, {"acked": lag.acked - 600, "atMs": T0 + 10**7 - 60_000})
    assert view["consumeRate"] == pytest.approx(10.0) and view["drainSeconds"] == pytest.approx(
        lag.backlog / 10
    )
    done = subscription_lag(profile, {"cursor": {"markDelete": [12, 10**6], "ranges": []}})
    assert (done.backlog, done.oldest_ms, done.to_json(T0, None, None)["drainSeconds"]) == (0, None, 0.0)


def test_results_stay_within_their_byte_bound_and_summary_ranks() -> None:
    bounds = Bounds()
    big = Profile(bounds)
    rng = random.Random(8)
    for ledger in range(600):  # more ledgers, producers, keys and minutes than any list keeps
        big.add_entries(ledger, [(e, 10, 1000, T0 + e) for e in range(0, 5000, 7)])
    big.add_producers((f"producer-{i}-" + "x" * 200, 5, 50) for i in range(1000))
    big.add_keys({f"key-{i}-" + "y" * 2000: rng.randrange(1, 50) for i in range(5000)})
    big.series.add_many((T0 + i * 60_000, 1, 1, T0) for i in range(100_000))
    big.add_totals(10**6, 10**9, T0, T0 + 10**9)
    results = topic_results(big, T0 + 10**9, {}, {}, ["w"] * 3)
    assert len(orjson.dumps(results)) <= RESULT_BYTES
    assert len(orjson.dumps(big.to_json())) <= STATE_BYTES
    assert len(big.index) == bounds.ledgers and len(big.producers) == bounds.producers + 1
    small = fold_messages(messages(100, 9))
    summary = cluster_summary(
        {"t/big": results, "t/small": topic_results(small, T0 + 70_000, {}, {}, [])}, T0 + 10**9
    )
    assert [row["topic"] for row in summary["largest"]] == ["t/big", "t/small"]
    assert summary["skewed"][0]["topic"] == "t/big" and summary["messages"] == 10**6 + 100
