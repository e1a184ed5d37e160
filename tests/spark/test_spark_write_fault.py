"""A gateway killed -9 while df.write publishes through it: the writer opens its
producer sessions again on the new owner and resends every unacknowledged frame
with the same producer names and sequence ids, so with dedup on every row is
stored exactly once; the control (dedup off) stores some rows twice, which shows
the resend happened. The namespace keeps everything (retention unlimited): with no
subscription, the ledger the new owner closes would be trimmed, as Pulsar trims
what neither a subscription nor a retention policy holds."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from publish import create_namespace, create_partitioned

pytestmark = pytest.mark.component

ROWS = 400_000
KILL_AT = 40_000  # the owner is killed once the topic holds this many rows


def _rows(index: int, _rows):
    for i in range(ROWS):
        yield (b"%d-%d" % (index, i),)


def _stored(url: str, namespace: str) -> int:
    reply = httpx.get(f"{url}/admin/v2/persistent/{namespace}/written/partitioned-stats", timeout=30)
    return int(reply.json()["msgInCounter"]) if reply.status_code == 200 else 0


@pytest.mark.parametrize("dedup", [True, False], ids=["dedup", "control-no-dedup"])
def test_write_survives_the_owner_gateway_killed(folio, spark, source_options, dedup):
    namespace = "public/spark-wkill-dedup" if dedup else "public/spark-wkill-plain"
    create_namespace(folio.urls[0], namespace, dedup)
    # kept with no subscription: the ledger the new owner closes would otherwise be trimmed,
    # as Pulsar trims what no subscription and no retention policy holds
    retention = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    reply = httpx.post(
        f"{folio.urls[0]}/admin/v2/namespaces/{namespace}/retention", json=retention, timeout=30
    )
    assert reply.status_code == 204, reply.text
    topic = f"persistent://{namespace}/written"
    create_partitioned(folio.urls[0], topic, 2)
    time.sleep(1.0)  # the owners see the namespace policy
    lookup = f"{folio.urls[0]}/lookup/v2/topic/persistent/{namespace}/written-partition-0"
    owner = httpx.get(lookup, timeout=30).json()["httpUrl"].rstrip("/")
    victim = next(g for g in folio.gateways if g.http_url.rstrip("/") == owner)
    survivor = next(g.http_url for g in folio.gateways if g is not victim)
    rows = spark.sparkContext.parallelize(range(1), 1).mapPartitionsWithIndex(_rows)
    df = spark.createDataFrame(rows, "value binary")
    killed: list[float] = []
    done = threading.Event()

    def kill_when_written() -> None:  # the write runs in the test's thread (Spark finds the source there)
        deadline = time.monotonic() + 300
        while not done.is_set() and time.monotonic() < deadline:
            if _stored(survivor, namespace) >= KILL_AT:
                victim.kill9()
                killed.append(time.monotonic())
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_when_written)
    killer.start()
    try:
        df.write.format("folio").options(**source_options, topic=topic).mode("append").save()
        finished_after = time.monotonic() - killed[0] if killed else -1.0
    finally:
        done.set()
        killer.join(30)
        if not victim.running():
            victim.start()
    assert killed, "the write ended before the gateway could be killed"
    read = spark.read.format("folio").options(**source_options, topic=topic).load()
    total = read.count()
    distinct = read.select("value").distinct().count()
    print(f"write kill dedup={dedup}: stored {total}, distinct {distinct}, done {finished_after:.1f} s after")
    if distinct != ROWS:  # say which rows are missing: per partition, as runs of positions
        have = {int(r.value.split(b"-")[1]) for r in read.select("value").distinct().collect()}
        missing = sorted(set(range(ROWS)) - have)
        runs: list[list[int]] = []
        for i in missing:
            if runs and i - runs[-1][1] <= 2:
                runs[-1][1] = i
            else:
                runs.append([i, i])
        by_partition = {p: sum(1 for i in missing if i % 2 == p) for p in (0, 1)}
        print(f"missing {len(missing)} by partition {by_partition}, runs {runs[:20]}")
        stats = f"{survivor}/admin/v2/persistent/{namespace}/written-partition-0/internalStats"
        print("partition 0:", httpx.get(stats, timeout=30).text[:3000])
    assert distinct == ROWS
    if dedup:
        assert total == ROWS
    else:
        assert total > ROWS  # frames stored but not answered before the kill were sent again
