"""Fixtures of the analytics tests: one cluster and one analytics service per module.

``stack`` (module): 3 storage nodes and 2 gateways as processes on the session
etcd, in their own etcd namespace (tests/component/clusters.py), and one
``folio analytics`` service process on Spark ``local[2]`` (its Spark session
costs 10-20 s to start, so every test of a module shares it). Every process is
stopped by PID at the end and the namespace deleted.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "component"))

from analytics_stack import Stack
from clusters import running_cluster


@pytest.fixture(scope="module")
def stack(etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("analytics")
    with running_cluster(etcd_endpoint, f"/analytics-test-{os.getpid()}", root) as cluster:
        stack = Stack(cluster, root)
        try:
            stack.start_service("svc-a")
            yield stack
        finally:
            for service in stack.services:
                service.stop()
