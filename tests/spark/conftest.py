"""Fixtures of the Spark tests: one Folio cluster and one Spark session per test session.

- ``folio`` (session): real storage nodes (3) and gateways (2) as processes on the
  session etcd, in their own etcd namespace (tests/component/clusters.py);
- ``spark`` (session): one ``local[2, 2]`` SparkSession (2 threads, a failed task
  retried once, as on a cluster) for every Spark test (a
  session costs 8-14 s and ~1.6 GiB to start), with ``SPARK_LOCAL_IP=127.0.0.1``,
  workers on this interpreter, no UI, no progress bar, and the Python
  filter-pushdown flag on (a test turns it off to check results without it);
- ``source_options``: the connector's connection options for ``folio``.
Every process is stopped by PID at the end.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "component"))

from clusters import MessagingCluster, running_cluster

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
# Python workers unpickle functions defined in these test modules by reference
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p
)


@pytest.fixture(scope="session")
def folio(etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MessagingCluster]:
    root = tmp_path_factory.mktemp("folio-spark")
    with running_cluster(etcd_endpoint, f"/spark-test-{os.getpid()}", root) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2, 2]")  # 2 threads; a failed task is tried twice
        .appName("folio-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    # the JVM is forked from a process with etcd client (gRPC) threads; now and then the
    # launch fails at once (JAVA_GATEWAY_EXITED) - the analytics service retries it too
    for attempt in range(3):
        try:
            session = builder.getOrCreate()
            break
        except PySparkRuntimeError:
            if attempt == 2:
                raise
            time.sleep(2.0)
    session.sparkContext.setLogLevel("WARN")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def source_options(folio: MessagingCluster) -> dict[str, str]:
    return {"etcd": folio.ledgers.endpoint, "etcdNamespace": folio.ledgers.namespace}
