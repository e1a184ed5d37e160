"""Processes wait for etcd instead of dying (real etcd killed -9, real processes).

Each test runs its own etcd (the session one is shared by every other test).
The auditor keeps leading and auditing across a 10 s outage (etcd killed -9,
restarted on the same data after 10 s), a storage node registers again; and a
storage node, a gateway and the auditor started while etcd is missing start
once it appears. Each says so once in its log, with no traceback.
"""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from coordination import keys
from coordination.etcd_server import EmbeddedEtcd
from coordination.etcd_store import connect
from folio.procs import AuditorProcess, GatewayProcess, NodeProcess
from storage.client.api import LedgerClient

pytestmark = pytest.mark.component

OUTAGE_S = 10.0
WAITING = "waiting for it, retrying with back-off"  # coordination.patience: an outage starts


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EmbeddedEtcd]:
    server = EmbeddedEtcd(tmp_path / "etcd")
    yield server
    server.stop()


@pytest.fixture
def procs() -> Iterator[list[NodeProcess]]:
    started: list[NodeProcess] = []
    yield started
    for proc in started:
        proc.stop()


def metric(address: str, name: str) -> float | None:
    try:
        text = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


async def eventually_async(condition: object, what: str, timeout_s: float = 45.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        ok = condition() if callable(condition) else False
        if asyncio.iscoroutine(ok):
            ok = await ok
        if ok:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.2)


def assert_waited_once(proc: NodeProcess, loops: int = 1) -> None:
    """No traceback; the outage said once by each of the process's ``loops`` that met it."""
    text = proc.log_text()
    assert "Traceback" not in text, text[-3000:]
    assert 1 <= text.count(WAITING) <= loops, text[-3000:]


async def test_the_auditor_and_a_node_outlive_a_10s_etcd_outage(
    etcd: EmbeddedEtcd, procs: list[NodeProcess], tmp_path: Path
) -> None:
    etcd.start()
    node = NodeProcess(tmp_path / "node", etcd.endpoint)
    procs.append(node)
    await asyncio.to_thread(node.start)
    auditor = AuditorProcess(
        etcd.endpoint, tmp_path / "auditor.log", grace_ms=60_000, extra_args=["--check-interval-ms", "500"]
    )
    procs.append(auditor)
    await asyncio.to_thread(auditor.start)
    await eventually_async(lambda: metric(auditor.metrics_address, "folio_auditor_leader") == 1, "leads")

    etcd.kill()
    killed = time.monotonic()
    await asyncio.sleep(OUTAGE_S)
    await asyncio.to_thread(etcd.start)
    print(f"etcd away {time.monotonic() - killed:.1f} s")
    assert auditor.running(), auditor.log_tail()
    assert node.running(), node.log_tail()

    # still working: it leads again and audits a ledger written after the outage
    store = await connect(etcd.endpoint)
    client = LedgerClient(store)
    try:

        async def node_registered() -> bool:
            return await store.get(keys.node(node.address)) is not None

        await eventually_async(node_registered, "the node registers again")
        writer = await client.create(1, 1, 1)
        await writer.append(b"after the outage")
        await writer.close()
        await eventually_async(
            lambda: (
                metric(auditor.metrics_address, "folio_auditor_leader") == 1
                and (metric(auditor.metrics_address, "folio_auditor_ledgers_checked") or 0) >= 1
            ),
            "the auditor leads and checks the new ledger",
        )
        print(f"auditor leads again {time.monotonic() - killed:.1f} s after etcd was killed")
    finally:
        await client.close()
        await store.close()
    assert auditor.running() and node.running()
    assert_waited_once(auditor, loops=2)  # the audit passes and the election loop
    assert_waited_once(node, loops=2)  # its registration and its ledger-reclaim watch


async def test_processes_started_while_etcd_is_missing_start_once_it_appears(
    etcd: EmbeddedEtcd, procs: list[NodeProcess], tmp_path: Path
) -> None:
    etcd.start()  # pick its ports, then take it away before anything starts
    etcd.kill()
    node = NodeProcess(tmp_path / "node", etcd.endpoint)
    gateway = GatewayProcess(tmp_path / "gateway", etcd.endpoint, log_path=tmp_path / "gateway.log")
    auditor = AuditorProcess(etcd.endpoint, tmp_path / "auditor.log")
    for proc in (node, gateway, auditor):
        procs.append(proc)
        proc.start(expect_ready=False)
    for proc in (node, gateway, auditor):  # each says it waits, and waits (it exited before)
        await eventually_async(lambda proc=proc: WAITING in proc.log_text(), f"{proc.command()[2]} waits")
    await asyncio.sleep(1.0)
    for proc in (node, gateway, auditor):
        assert proc.running(), proc.log_tail()

    await asyncio.to_thread(etcd.start)
    appeared = time.monotonic()
    for proc in (node, gateway, auditor):
        assert await asyncio.to_thread(proc.wait_ready, 45.0), proc.log_tail()
        print(f"{proc.command()[2]} ready {time.monotonic() - appeared:.1f} s after etcd appeared")
        # connecting, then the first lease grant, may each meet etcd still coming up
        assert_waited_once(proc, loops=2)
    health = await asyncio.to_thread(urllib.request.urlopen, f"{gateway.http_url}/admin/v2/brokers/health")
    assert health.read() == b"ok"


async def test_rest_publishing_goes_on_through_a_short_etcd_outage(
    etcd: EmbeddedEtcd, procs: list[NodeProcess], tmp_path: Path
) -> None:
    """etcd away for less than the lease: the owner keeps its topics, and REST publishes
    (which look up the topic's partition count, cached 2 s) are served as WebSocket ones
    are. Before, every REST publish answered 503 "etcd unavailable" once the cached count
    was 2 s old (the 1 h fault run: 542-618 such refusals per REST producer)."""
    await asyncio.to_thread(etcd.start)
    for i in range(3):
        node = NodeProcess(tmp_path / f"node{i}", etcd.endpoint)
        procs.append(node)
        await asyncio.to_thread(node.start)
    gateway = GatewayProcess(tmp_path / "gateway", etcd.endpoint, extra_args=["--lease-ttl", "15"])
    procs.append(gateway)
    await asyncio.to_thread(gateway.start)
    url = f"{gateway.http_url}/topics/persistent/public/default/rest-through-outage"

    def publish(text: str) -> tuple[int, str]:
        body = orjson.dumps({"messages": [{"payload": text}]})
        request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    assert (await asyncio.to_thread(publish, "before"))[0] == 200
    etcd.kill()
    try:
        await asyncio.sleep(3.0)  # past the 2 s partition-count cache, well inside the lease
        status, text = await asyncio.to_thread(publish, "during")
    finally:
        await asyncio.to_thread(etcd.start)
    assert status == 200 and '"errorCode":0' in text.replace(" ", ""), (status, text)
