"""Writes through the gateways: df.write and writeStream; a task that fails once and
a replayed streaming batch store each row once when the namespace has dedup on, and
twice with dedup off (the control)."""

from __future__ import annotations

import shutil
import threading
import time
from functools import partial

import httpx
import pyarrow as pa
import pytest
from publish import Sent, create_namespace, create_partitioned, publish
from pyspark import TaskContext
from pyspark.sql.types import BinaryType, StringType, StructField, StructType
from pyspark_folio.options import WriteOptions
from pyspark_folio.writer import PublishedCount, publish_batches

pytestmark = pytest.mark.component

ROWS_PER_TASK = 4_000
ARROW_BATCH = 500  # rows Spark hands the writer at a time in this test (spark.sql.execution.arrow...)
FAIL_AT = 3_000  # the first attempt fails before yielding this row, once the topic holds
STORED_BEFORE_FAILURE = 1_000  # this many of the rows before it
SCHEMA = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
PAD = b"x" * 1000  # rows of ~1 KiB: the batches before the failure fill Spark's 64 KiB stream buffers
ARROW = pa.schema([("key", pa.string()), ("value", pa.binary())])


def _stored(stats_url: str) -> int:
    return int(httpx.get(stats_url, timeout=30).json()["msgInCounter"])


def _rows_failing_once(stats_url: str, batches):
    """The rows of the one write task as Arrow batches; its first attempt fails at FAIL_AT,
    once the topic holds STORED_BEFORE_FAILURE rows (the writer publishes the rows before
    while this waits: it pulls rows in a thread)."""
    context = TaskContext.get()
    for batch in batches:
        ids = batch.column(0).to_pylist()
        if FAIL_AT in ids and context.attemptNumber() == 0:
            deadline = time.monotonic() + 60
            while _stored(stats_url) < STORED_BEFORE_FAILURE and time.monotonic() < deadline:
                time.sleep(0.2)
            raise RuntimeError("injected failure (first attempt)")
        yield pa.RecordBatch.from_pydict(
            {"key": [f"k{i % 100}" for i in ids], "value": [f"0-{i}-".encode() + PAD for i in ids]},
            schema=ARROW,
        )


def _read(spark, options, topic):
    return spark.read.format("folio").options(**options, topic=topic).load()


@pytest.mark.parametrize("dedup", [True, False], ids=["dedup", "control-no-dedup"])
def test_retried_write_task_stores_each_row_once_with_dedup(folio, spark, source_options, dedup):
    namespace = "public/spark-write-dedup" if dedup else "public/spark-write-plain"
    create_namespace(folio.urls[0], namespace, dedup)
    topic = f"persistent://{namespace}/written"
    create_partitioned(folio.urls[0], topic, 2)
    time.sleep(1.0)  # the owners see the namespace policy
    stats_url = f"{folio.urls[0]}/admin/v2/persistent/{namespace}/written/partitioned-stats"
    source = spark.range(ROWS_PER_TASK, numPartitions=1)
    rows = source.mapInArrow(partial(_rows_failing_once, stats_url), SCHEMA)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(ARROW_BATCH))
    try:
        rows.write.format("folio").options(**source_options, topic=topic, batchMessages="100").mode(
            "append"
        ).save()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    read = _read(spark, source_options, topic)
    total = read.count()
    distinct = read.select("value").distinct().count()
    print(f"write dedup={dedup}: stored {total}, distinct {distinct}")
    assert distinct == ROWS_PER_TASK
    if dedup:
        assert total == ROWS_PER_TASK
    else:
        assert total >= ROWS_PER_TASK + STORED_BEFORE_FAILURE  # the failed attempt's rows are there twice
    keyed = read.where("key = 'k7'").groupBy("partition").count().collect()
    assert len(keyed) == 1  # one key, one partition (routed as the gateways route keys)


def test_write_round_trips_columns(folio, spark, source_options):
    topic = "persistent://public/default/spark-write-columns"
    rows = [("k1", "text", {"a": "1"}, topic), (None, "more", {}, topic)]
    df = spark.createDataFrame(rows, "key string, value string, properties map<string,string>, topic string")
    df.write.format("folio").options(**source_options).mode("append").save()  # the topic column
    got = sorted(
        (r.key or "", r.value, dict(r.properties)) for r in _read(spark, source_options, topic).collect()
    )
    assert got == [("", b"more", {}), ("k1", b"text", {"a": "1"})]


def test_a_task_whose_frames_are_all_answered_before_its_rows_end_finishes(folio, source_options):
    """The task's last rows fill whole frames, so it queues no frame when its rows end;
    the replies to all of them came before: the session ends all the same (it used to
    wait for a reply that never came, and the task hung)."""
    topic = "persistent://public/default/spark-write-whole-frames"
    given = {**source_options, "topic": topic, "batchmessages": "100"}  # lower case, as Spark passes them
    options = WriteOptions.parse(given)

    stats_url = f"{folio.urls[0]}/admin/v2/persistent/public/default/spark-write-whole-frames/stats"
    answered: list[bool] = []

    def rows():
        yield pa.RecordBatch.from_pydict({"value": [b"v%d" % i for i in range(200)]})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # both frames stored, so answered ...
            try:
                if _stored(stats_url) >= 200:
                    break
            except (httpx.HTTPError, KeyError):
                pass  # the topic is loaded by the first frame
            time.sleep(0.1)
        else:
            return
        time.sleep(0.5)  # ... and the two replies have reached the task
        answered.append(True)

    done: list[PublishedCount] = []

    def write() -> None:
        done.append(publish_batches(options, tuple(folio.urls), "whole-frames", 0, rows()))

    thread = threading.Thread(target=write, daemon=True)  # a hung task must not hang the test run
    thread.start()
    thread.join(60)
    assert answered, "the two frames were not stored within 30 s"
    assert [(c.rows, c.duplicates) for c in done] == [(200, 0)]


def test_replayed_streaming_batch_is_stored_once_with_dedup(folio, spark, source_options, tmp_path):
    create_namespace(folio.urls[0], "public/spark-stream-dedup", True)
    source = "persistent://public/default/spark-stream-source"
    target = "persistent://public/spark-stream-dedup/stream-target"
    publish(folio.urls[0], source, [Sent(source, None, b"m%d" % i) for i in range(500)])
    time.sleep(1.0)
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        query = (
            spark.readStream.format("folio")
            .options(**source_options, topic=source, startingOffsets="earliest")
            .load()
            .select("key", "value")
            .writeStream.format("folio")
            .options(**source_options, topic=target)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(180)

    run()
    assert _read(spark, source_options, target).count() == 500
    # a crash after the sink wrote batch 0 but before Spark recorded it: the batch runs again
    shutil.rmtree(checkpoint / "commits")
    run()
    read = _read(spark, source_options, target)
    assert read.count() == 500 and read.select("value").distinct().count() == 500
    producers = {r.producer for r in read.select("producer").distinct().collect()}
    assert producers and all(p.startswith("spark-") and "None" not in p for p in producers), producers
