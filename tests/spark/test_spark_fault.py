"""A storage node killed -9 while Spark reads: the read completes from the other
replicas with the right count (E = Qw = 3, so every entry has two more copies)."""

from __future__ import annotations

import threading
import time

import pytest
from publish import Sent, create_partitioned, publish

pytestmark = pytest.mark.component


def test_read_survives_a_storage_node_killed_during_it(folio, spark, source_options):
    topic = "persistent://public/default/spark-fault"
    create_partitioned(folio.urls[0], topic, 3)
    total = 0
    for round_ in range(6):
        total += len(
            publish(folio.urls[round_ % 2], topic, [Sent(topic, f"k{i}", b"x" * 200) for i in range(5000)])
        )
    df = spark.read.format("folio").options(**source_options, topic=topic, entriesPerPartition="20").load()
    result: list[int] = []
    errors: list[BaseException] = []

    def count() -> None:
        try:
            result.append(df.count())
        except BaseException as exc:  # reported below
            errors.append(exc)

    reader = threading.Thread(target=count)
    reader.start()
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 120
    while not tracker.getActiveJobsIds() and reader.is_alive():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    victim = folio.ledgers.nodes[1]
    killed_at = time.monotonic()
    victim.kill9()
    reader.join(300)
    finished_after = time.monotonic() - killed_at
    victim.start()
    assert not errors, errors
    print(f"fault: node {victim.address} killed -9 during the read; it finished {finished_after:.1f} s later")
    assert reader.is_alive() is False and result == [total]
