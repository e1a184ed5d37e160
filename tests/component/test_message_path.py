"""The path of one REST publish and one catching-up delivery, measured: the files whose code runs.

A real gateway (its cache of recent entries at 1 MiB) and three real storage
nodes run under the recorder of tests/component/path_trace.py. A publish
(``POST /topics/...`` to its 200 reply, which comes only after the entry is
fsynced on an ack quorum) is recorded on the gateway and on every node after a
first one has loaded the topic; a delivery is one permit of a pull-mode
consumer that is more than the cache behind, to the message on its socket.
Each is recorded ``RECORDED`` times, ``PAUSE_S`` apart, and a gateway file
counts when its code ran in every recording (a timer on its own clock misses
one). The test pins the files as a ceiling: a new hop on either path fails it,
so the path cannot quietly grow back (docs/architecture.md §13 names the same
files and counts).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson
import pytest
from clusters import LedgerCluster, MessagingCluster
from path_trace import TracedGateway, TracedNode
from wsclient import Consumer, unb64

pytestmark = pytest.mark.component

RECORDED = 5  # a timer of its own clock (the heap trimmer, cursor flushes) misses one of them
PAUSE_S = 0.3  # between recordings, so they fall at different points of such timers
START_S = 120.0  # every call is recorded from the start: a process starts slower
WAIT_S = 20.0
CACHE_MB = 1  # the owner's cache of recent entries: the delivery test publishes past it
BIG = 200 * 1024


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


async def start(recorders: list[Recorder]) -> None:
    """Every recorder on, the gateway's last (its window is the shortest: less noise)."""
    await asyncio.gather(*(r.start() for r in recorders[1:]))
    await recorders[0].start()


async def stop(recorders: list[Recorder]) -> list[set[str]]:
    """Every recorder off, the gateway's first; what each saw."""
    first = await recorders[0].stop()
    return [first, *await asyncio.gather(*(r.stop() for r in recorders[1:]))]


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
            await asyncio.to_thread(node.start, START_S)
            ledgers.nodes.append(node)
            recorders.append(Recorder(trace))
        trace = tmp_path / "gateway.trace"
        gateway = TracedGateway(
            tmp_path / "gateway",
            etcd_endpoint,
            namespace=namespace,
            env={"FOLIO_PATH_TRACE": str(trace)},
            log_path=tmp_path / "gateway.log",
            extra_args=["--cache-mb", str(CACHE_MB)],
        )
        await asyncio.to_thread(gateway.start, START_S)
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
            await asyncio.sleep(PAUSE_S)
            await start(recorders)
            response = await http.post(url, content=f"m{i}".encode())
            assert response.status_code == 200, response.text
            seen = await stop(recorders)
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


async def test_a_catching_up_delivery_runs_code_in_these_files(traced: Traced) -> None:
    """A pull-mode consumer behind by more than the owner's cache: each permit it sends
    makes the gateway read the next entry from the storage nodes and send it on."""
    cluster, recorders = traced
    consumer = await Consumer.connect(
        cluster.ws(0), "behind", "s", "pullMode=true&subscriptionInitialPosition=Earliest"
    )
    url = f"{cluster.urls[0]}/topics/persistent/public/default/behind"
    count = 2 * CACHE_MB * 1024 * 1024 // BIG + 2 * RECORDED
    async with httpx.AsyncClient() as http:
        for i in range(count):
            assert (await http.post(url, content=bytes([i]) * BIG)).status_code == 200
    gateway_runs, node_runs = [], []
    for i in range(RECORDED):
        await asyncio.sleep(PAUSE_S)
        await start(recorders)
        await consumer.ws.send(orjson.dumps({"type": "permit", "permitMessages": 1}).decode())
        frame = await consumer.receive(WAIT_S)
        assert unb64(frame["payload"]) == bytes([i]) * BIG
        seen = await stop(recorders)
        gateway_runs.append(seen[0])
        node_runs.append(set().union(*seen[1:]))
    await consumer.close()
    gateway_files = set.intersection(*gateway_runs)
    # read-ahead may serve a later permit from memory: the nodes' files are those of the
    # permits that read from a node
    reads = [run for run in node_runs if "storage/node/reads.py" in run]
    assert reads, "no permit made the gateway read from a storage node"
    node_files = set.intersection(*reads)
    print("permits that read from a node:", len(reads))
    print("gateway", len(gateway_files), *sorted(gateway_files), sep="\n  ")
    print("node", len(node_files), *sorted(node_files), sep="\n  ")
    assert "storage/client/reader.py" in gateway_files or "gateway/broker/log_reads.py" in gateway_files
    assert sorted(gateway_files - DELIVERY_GATEWAY_FILES) == []
    assert sorted(node_files - DELIVERY_NODE_FILES) == []


# the gateway process
DELIVERY_GATEWAY_FILES = frozenset(
    {
        "coordination/clock.py",
        "gateway/api/delivery_budget.py",
        "gateway/api/routes_ws.py",
        "gateway/api/wire_mapping.py",
        "gateway/api/ws_consumer.py",
        "gateway/api/ws_fastpath.py",
        "gateway/api/ws_outbound.py",
        "gateway/api/ws_server.py",
        "gateway/api/ws_session.py",
        "gateway/api/ws_subscribe.py",
        "gateway/api/ws_writer.py",
        "gateway/broker/cache_budget.py",
        "gateway/broker/consumers.py",
        "gateway/broker/cursor_core.py",
        "gateway/broker/cursor_ranges.py",
        "gateway/broker/decoded_entries.py",
        "gateway/broker/deferred_effects.py",
        "gateway/broker/dispatch/single_active.py",
        "gateway/broker/flow.py",
        "gateway/broker/log_layout.py",
        "gateway/broker/log_reads.py",
        "gateway/broker/log_state.py",
        "gateway/broker/managed_log.py",
        "gateway/broker/read_ahead.py",
        "gateway/broker/subscription.py",
        "gateway/protocol/json_fields.py",
        "gateway/protocol/timefmt.py",
        "gateway/protocol/ws_commands.py",
        "gateway/protocol/ws_wire.py",
        "gateway/security/middleware.py",
        "storage/client/connection.py",
        "storage/client/pool.py",
        "storage/client/read_core.py",
        "storage/client/reader.py",
        "storage/client/writer.py",
        "storage/formats/entry_format.py",
        "storage/formats/key_hash.py",
        "storage/formats/message_id.py",
        "storage/formats/positions.py",
        "storage/types.py",
        "storage/wire.py",
    }
)
# the storage node that served the read
DELIVERY_NODE_FILES = frozenset(
    {
        "storage/node/entry_index.py",
        "storage/node/entry_store.py",
        "storage/node/reads.py",
        "storage/node/server.py",
        "storage/node/service.py",
        "storage/wire.py",
    }
)


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
