"""Streaming reads on a real cluster: admission control, restart from a checkpoint,
new partitions; every message exactly once, in order per partition."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from publish import Sent, create_partitioned, publish

from storage.formats.message_id import MessageId

pytestmark = pytest.mark.component

BASE = "persistent://public/default/"
LIMIT = 200


def _query(spark, options, topic: str, out: Path, checkpoint: Path):
    stream = (
        spark.readStream.format("folio")
        .options(**options, topic=topic, startingOffsets="earliest", maxMessagesPerTrigger=str(LIMIT))
        .load()
        .select("partition", "ledger_id", "entry_id", "batch_index", "value")
    )
    return (
        stream.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="300 milliseconds")
        .start()
    )


def _wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_stream_reads_every_message_once_across_a_restart(folio, spark, source_options, tmp_path):
    topic = BASE + "stream-restart"
    create_partitioned(folio.urls[0], topic, 2)
    sent: list[Sent] = []
    total = 1200

    def produce() -> None:
        for low in range(0, total, 100):
            batch = [Sent(topic, f"k{i % 17}", f"{i:06d}".encode()) for i in range(low, low + 100)]
            sent.extend(publish(folio.urls[low // 100 % 2], topic, batch))
            time.sleep(0.1)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    sizes: list[int] = []
    first = _query(spark, source_options, topic, out, checkpoint)
    try:
        _wait(lambda: sum(p["numInputRows"] for p in first.recentProgress) >= 400, 120, "the first rows")
    finally:
        first.stop()
    sizes += [p["numInputRows"] for p in first.recentProgress]
    producer.join(120)
    assert len(sent) == total
    second = _query(spark, source_options, topic, out, checkpoint)
    try:
        _wait(
            lambda: sum(p["numInputRows"] for p in second.recentProgress) + sum(sizes) >= total,
            180,
            "every row after the restart",
        )
        time.sleep(1.0)  # a further trigger would show a duplicate
    finally:
        second.stop()
    sizes += [p["numInputRows"] for p in second.recentProgress]
    print(f"stream: rows per trigger {sizes}")
    assert max(sizes) <= LIMIT and sum(sizes) == total
    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == total
    for partition in (0, 1):
        got = [
            r.value
            for r in sorted(
                (r for r in rows if r.partition == partition),
                key=lambda r: (r.ledger_id, r.entry_id, r.batch_index),
            )
        ]
        published = [
            m.value
            for m in sorted(
                (m for m in sent if MessageId.parse(m.message_id).partition == partition),
                key=lambda m: MessageId.parse(m.message_id).position,
            )
        ]
        assert got == published  # exactly once, in log order


def test_stream_picks_up_a_new_matching_topic(folio, spark, source_options, tmp_path):
    prefix = BASE + "stream-new-"
    publish(folio.urls[0], prefix + "a", [Sent(prefix + "a", None, b"a%d" % i) for i in range(50)])
    query = (
        spark.readStream.format("folio")
        .options(
            **source_options,
            topicsPattern=r"persistent://public/default/stream-new-.*",
            startingOffsets="earliest",
        )
        .load()
        .select("topic", "value")
        .writeStream.format("memory")
        .queryName("stream_new_topics")
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        _wait(lambda: spark.table("stream_new_topics").count() >= 50, 120, "topic a")
        publish(folio.urls[1], prefix + "b", [Sent(prefix + "b", None, b"b%d" % i) for i in range(30)])
        _wait(lambda: spark.table("stream_new_topics").count() >= 80, 120, "the new topic b")
        time.sleep(1.0)
        counts = {
            r.topic: r["count"] for r in spark.table("stream_new_topics").groupBy("topic").count().collect()
        }
        assert counts == {prefix + "a": 50, prefix + "b": 30}
    finally:
        query.stop()
