"""The path of one REST publish, measured: the source files whose code runs.

A real gateway and three real storage nodes run under the recorder of
tests/component/path_trace.py. After a first publish has loaded the topic, each
of three more publishes (``POST /topics/...`` to its 200 reply, which comes only
after the entry is fsynced on an ack quorum) is recorded on the gateway and on
every node; a file counts when its code ran in all three (so a timer that
happened to fire during one does not). The test pins the count and the files:
a new hop on the path fails it, so the path cannot quietly grow back
(docs/architecture.md §13 names the same files).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from clusters import LedgerCluster, MessagingCluster
from path_trace import TracedGateway, TracedNode

pytestmark = pytest.mark.component

RECORDED = 3
WAIT_S = 20.0


class Recorder:
    """Switches the recorder of one process on and off and reads what it saw."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def _signal(self, suffix: str) -> None:
        flag = self.path.with_suffix(suffix)
        flag.touch()
        async with asyncio.timeout(WAIT_S):
            while flag.exists():
                await asyncio.sleep(0.005)

    async def start(self) -> None:
        self.path.unlink(missing_ok=True)
        await self._signal(".on")

    async def stop(self) -> set[str]:
        await self._signal(".off")
        return set(self.path.read_text().split())


Traced = tuple[MessagingCluster, list[Recorder]]


@pytest.fixture
async def traced(etcd_endpoint: str, tmp_path: Path) -> AsyncIterator[Traced]:
    namespace = f"/path-trace-{os.getpid()}"
    ledgers = LedgerCluster(etcd_endpoint, namespace, tmp_path)
    cluster = MessagingCluster(ledgers)
    recorders: list[Recorder] = []
    try:
        for index in range(3):
            trace = tmp_path / f"node{index}.trace"
            node = TracedNode(
                tmp_path / f"node{index}",
                etcd_endpoint,
                namespace=namespace,
                env={"FOLIO_PATH_TRACE": str(trace)},
            )
            node.data_dir.mkdir(parents=True)
            await asyncio.to_thread(node.start)
            ledgers.nodes.append(node)
            recorders.append(Recorder(trace))
        trace = tmp_path / "gateway.trace"
        gateway = TracedGateway(
            tmp_path / "gateway",
            etcd_endpoint,
            namespace=namespace,
            env={"FOLIO_PATH_TRACE": str(trace)},
            log_path=tmp_path / "gateway.log",
        )
        await asyncio.to_thread(gateway.start)
        cluster.gateways.append(gateway)
        recorders.insert(0, Recorder(trace))
        yield cluster, recorders
    finally:
        cluster.stop()
        await ledgers.forget()
        await ledgers.close_stores()


async def recorded_publish(cluster: MessagingCluster, recorders: list[Recorder]) -> tuple[set[str], set[str]]:
    """The gateway's files and the nodes' files (intersected over RECORDED publishes)."""
    url = f"{cluster.urls[0]}/topics/persistent/public/default/path"
    gateway_runs, node_runs = [], []
    async with httpx.AsyncClient() as http:
        assert (await http.post(url, content=b"first")).status_code == 200
        for i in range(RECORDED):
            for recorder in recorders:
                await recorder.start()
            response = await http.post(url, content=f"m{i}".encode())
            assert response.status_code == 200, response.text
            seen = [await recorder.stop() for recorder in recorders]
            gateway_runs.append(seen[0])
            node_runs.append(set().union(*seen[1:]))
    return set.intersection(*gateway_runs), set.intersection(*node_runs)


async def test_a_rest_publish_runs_code_in_these_files(traced: Traced) -> None:
    cluster, recorders = traced
    gateway_files, node_files = await recorded_publish(cluster, recorders)
    print("gateway", len(gateway_files), *sorted(gateway_files), sep="\n  ")
    print("node", len(node_files), *sorted(node_files), sep="\n  ")
    assert "storage/node/journal_io.py" in node_files  # the recorder saw the fsync's file
    assert "storage/client/writer.py" in gateway_files and "gateway/broker/topic.py" in gateway_files
    # a file not in the lists is a new hop: fold it into a stop, or add it here and to §13
    assert sorted(gateway_files - PUBLISH_GATEWAY_FILES) == []
    assert sorted(node_files - PUBLISH_NODE_FILES) == []


# the gateway process: one entry a file whose code runs, in any order
PUBLISH_GATEWAY_FILES = frozenset(
    {
        "coordination/clock.py",
        "coordination/keys.py",
        "coordination/lease.py",
        "coordination/session.py",
        "coordination/session_thread.py",
        "gateway/api/http_io.py",
        "gateway/api/metrics.py",
        "gateway/api/routes_publish.py",
        "gateway/api/ws_fastpath.py",
        "gateway/broker/cache_budget.py",
        "gateway/broker/log_policy.py",
        "gateway/broker/log_state.py",
        "gateway/broker/managed_log.py",
        "gateway/broker/message_counts.py",
        "gateway/broker/publish_core.py",
        "gateway/broker/publish_results.py",
        "gateway/broker/service.py",
        "gateway/broker/topic.py",
        "gateway/meta/namespaces.py",
        "gateway/meta/policy_cache.py",
        "gateway/names.py",
        "gateway/ownership/bundles.py",
        "gateway/ownership/held_bundles.py",
        "gateway/ownership/owner.py",
        "gateway/ownership/registry.py",
        "gateway/protocol/params.py",
        "gateway/protocol/rest.py",
        "gateway/protocol/ws_frames.py",
        "gateway/routing.py",
        "gateway/security/guard.py",
        "gateway/security/http_limits.py",
        "gateway/security/middleware.py",
        "gateway/security/rules.py",
        "storage/client/connection.py",
        "storage/client/pool.py",
        "storage/client/write_core.py",
        "storage/client/writer.py",
        "storage/formats/entry_format.py",
        "storage/formats/message_id.py",
        "storage/wire.py",
    }
)
# each storage node
PUBLISH_NODE_FILES = frozenset(
    {
        "coordination/clock.py",
        "storage/node/drop_behind.py",
        "storage/node/entry_index.py",
        "storage/node/entry_store.py",
        "storage/node/journal.py",
        "storage/node/journal_core.py",
        "storage/node/journal_io.py",
        "storage/node/ledger_state.py",
        "storage/node/metrics.py",
        "storage/node/reads.py",
        "storage/node/server.py",
        "storage/node/service.py",
        "storage/node/tombstones.py",
        "storage/wire.py",
    }
)
