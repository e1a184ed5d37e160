"""Batch reads with the connector on a real cluster, in the shared ``local[2]`` session.

What was published through the gateways (REST batch publish) is what Spark
reads straight from the storage nodes: counts, bytes, keys, properties, event
times and message ids; a partitioned topic's partitions; offsets and
timestamps bounding the read; a read racing live publishing; filters with and
without pushdown; registration.
"""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
import threading
import time

import httpx
import pytest
from publish import Sent, create_partitioned, publish

from storage.formats.message_id import MessageId

pytestmark = pytest.mark.component

BASE = "persistent://public/default/"


def _payload(i: int) -> bytes:
    return bytes([i % 256, 0, 255, (i * 7) % 256]) + f"payload-{i}".encode()


def _load(spark, options, **extra):
    return spark.read.format("folio").options(**options, **extra).load()


def test_read_round_trips_what_was_published(folio, spark, source_options):
    topic = BASE + "read-roundtrip"
    messages = [
        Sent(
            topic,
            f"key-{i % 13}" if i % 5 else None,
            _payload(i),
            {"i": str(i), "ü": "ß"} if i % 3 else {},
            1_700_000_000_000 + i if i % 2 else None,
        )
        for i in range(3000)
    ]
    sent = publish(folio.urls[0], topic, messages)
    rows = _load(spark, source_options, topic=topic).orderBy("ledger_id", "entry_id", "batch_index").collect()
    assert len(rows) == len(sent)
    assert sum(len(r.value) for r in rows) == sum(len(m.value) for m in sent)
    for row, m in zip(rows, sent, strict=True):
        assert (row.value, row.key, dict(row.properties)) == (m.value, m.key, m.properties)
        assert row.topic == topic and row.partition == -1 and row.producer == "test"
        event_ms = None if row.event_time is None else int(row.event_time.timestamp() * 1000)
        assert event_ms == m.event_time_ms
        rest_id = MessageId.parse(m.message_id)  # what the publish answered: L:E:P[:B]
        assert (row.ledger_id, row.entry_id) == (rest_id.ledger_id, rest_id.entry_id)
        ws_id = MessageId.from_base64(row.message_id)  # what a WebSocket consumer gets
        assert (ws_id.ledger_id, ws_id.entry_id) == (rest_id.ledger_id, rest_id.entry_id)
        if rest_id.is_batch:
            assert row.batch_index == rest_id.batch_index == ws_id.batch_index
    assert len({r.message_id for r in rows}) == len(rows)


def test_partitioned_topic_reads_every_partition(folio, spark, source_options):
    topic = BASE + "read-partitioned"
    create_partitioned(folio.urls[0], topic, 3)
    sent = publish(folio.urls[1], topic, [Sent(topic, f"k{i}", _payload(i)) for i in range(1500)])
    df = _load(spark, source_options, topic=topic)
    counts = {r.partition: r["count"] for r in df.groupBy("partition").count().collect()}
    assert set(counts) == {0, 1, 2} and sum(counts.values()) == len(sent)
    by_partition = {
        p: sorted(m.value for m in sent if MessageId.parse(m.message_id).partition == p) for p in range(3)
    }
    for p in range(3):
        got = sorted(r.value for r in df.where(f"partition = {p}").select("value").collect())
        assert got == by_partition[p]
    assert {r.topic for r in df.select("topic").distinct().collect()} == {topic}
    # topicsPattern expands the partitioned topic too
    assert _load(spark, source_options, topicsPattern=r".*/read-partitioned").count() == len(sent)


def test_offsets_and_timestamps_bound_the_read(folio, spark, source_options):
    topic = BASE + "read-bounds"
    first = publish(folio.urls[0], topic, [Sent(topic, None, _payload(i)) for i in range(400)])
    time.sleep(0.05)
    middle_ms = int(time.time() * 1000)
    time.sleep(0.05)
    second = publish(folio.urls[0], topic, [Sent(topic, None, _payload(1000 + i)) for i in range(300)])
    df = _load(spark, source_options, topic=topic)
    rows = df.orderBy("ledger_id", "entry_id", "batch_index").collect()
    assert len(rows) == 700
    cut = rows[250]
    position = f"{cut.ledger_id}:{cut.entry_id}:{cut.batch_index}"
    start = f'{{"{topic}": {{"-1": "{position}"}}}}'
    after = _load(spark, source_options, topic=topic, startingOffsets=start).collect()
    assert sorted(r.value for r in after) == sorted(r.value for r in rows[250:])
    before = _load(spark, source_options, topic=topic, endingOffsets=f'{{"{topic}": "{position}"}}').collect()
    assert sorted(r.value for r in before) == sorted(r.value for r in rows[:250])
    late = _load(spark, source_options, topic=topic, startingTimestamp=str(middle_ms)).collect()
    assert sorted(r.value for r in late) == sorted(m.value for m in second)
    early = _load(spark, source_options, topic=topic, endingTimestamp=str(middle_ms)).collect()
    assert sorted(r.value for r in early) == sorted(m.value for m in first)
    assert _load(spark, source_options, topic=topic, startingOffsets="latest").count() == 0


def test_read_racing_live_publishing_stops_at_the_planned_end(folio, spark, source_options):
    topic = BASE + "read-race"
    publish(folio.urls[0], topic, [Sent(topic, None, b"0")])
    acked = [1]
    stop = threading.Event()

    def produce() -> None:
        i = 1
        with httpx.Client(timeout=30) as http:
            while not stop.is_set():
                body = {"producerName": "racer", "messages": [{"payload": str(i)}]}
                reply = http.post(f"{folio.urls[0]}/topics/{topic.replace('://', '/', 1)}", json=body)
                assert reply.status_code == 200
                acked[0] = i + 1
                i += 1

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        time.sleep(1.0)
        acked_before = acked[0]
        values = [int(r.value) for r in _load(spark, source_options, topic=topic).select("value").collect()]
        acked_after = acked[0]
    finally:
        stop.set()
        thread.join(30)
    values.sort()
    print(
        f"race: acked before planning {acked_before}, read {len(values)}, acked after the read {acked_after}"
    )
    assert values == list(range(len(values)))  # a gap-free prefix of the log
    assert acked_before <= len(values) <= acked_after


def test_filtered_read_equals_filter_over_full_read(folio, spark, source_options):
    topic = BASE + "read-filter"
    create_partitioned(folio.urls[0], topic, 2)
    publish(folio.urls[0], topic, [Sent(topic, f"k{i % 10}", _payload(i)) for i in range(600)])
    time.sleep(0.05)
    middle_ms = int(time.time() * 1000)
    time.sleep(0.05)
    publish(folio.urls[0], topic, [Sent(topic, f"k{i % 10}", _payload(i)) for i in range(600, 1000)])
    condition = (
        f"key IN ('k1', 'k2', 'k3', 'k4') AND partition = 1 AND topic = '{topic}' "
        f"AND publish_time >= timestamp_millis({middle_ms})"
    )
    full = _load(spark, source_options, topic=topic).collect()
    expected = sorted(
        r.message_id
        for r in full
        if r.key in ("k1", "k2", "k3", "k4")
        and r.partition == 1
        and r.publish_time.timestamp() * 1000 >= middle_ms
    )
    assert expected
    pushed = _load(spark, source_options, topic=topic).where(condition)
    plan = pushed._jdf.queryExecution().executedPlan().toString()
    assert "Filter (" not in plan, plan  # all four were pushed: Spark applies none of them again
    assert sorted(r.message_id for r in pushed.collect()) == expected
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:
        unpushed = _load(spark, source_options, topic=topic).where(condition)
        assert "Filter (" in unpushed._jdf.queryExecution().executedPlan().toString()
        assert sorted(r.message_id for r in unpushed.collect()) == expected
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def test_auto_registration_from_the_installed_package():
    """Spark finds installed top-level ``pyspark_*`` modules with pkgutil.iter_modules;
    a fresh interpreter (no test path, elsewhere than the repository) must see ours."""
    code = (
        "import pkgutil, importlib\n"
        "names = [m.name for m in pkgutil.iter_modules() if m.name.startswith('pyspark_')]\n"
        "assert 'pyspark_folio' in names, names\n"
        "print(importlib.import_module('pyspark_folio').DefaultSource.name())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "folio"
    assert any(m.name == "pyspark_folio" for m in pkgutil.iter_modules())


def test_explicit_registration_works_too(folio, spark, source_options):
    from pyspark_folio import FolioDataSource

    spark.dataSource.register(FolioDataSource)
    topic = BASE + "read-register"
    publish(folio.urls[0], topic, [Sent(topic, None, b"x")])
    assert _load(spark, source_options, topic=topic).count() == 1


def test_a_misspelt_option_fails_naming_the_known_ones(folio, spark, source_options):
    """At load() for a read, at save() for a write, before anything is read or sent."""
    with pytest.raises(Exception, match=r"did you mean startingOffsets\?.*known options: etcd"):
        _load(spark, source_options, topic=BASE + "read-roundtrip", startingOffset="earliest")
    df = spark.createDataFrame([(b"x",)], "value binary")
    with pytest.raises(Exception, match=r"did you mean batchMessages\?.*known options: etcd"):
        df.write.format("folio").options(**source_options, topic=BASE + "misspelt", batchMessage="5").mode(
            "append"
        ).save()
