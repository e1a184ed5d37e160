"""Admin cluster views against real processes (gateway/api/admin_cluster.py).

One cluster for the module: real etcd, 3 storage nodes, 2 gateways, plus a real
auditor process (grace 1 s) and, later, a 4th storage node forced read-only
through ``FOLIO_TEST_FREE_BYTES_FILE``. The tests run in file order; the last
two break things on purpose. Shows:
- Pulsar paths: ``/clusters`` -> ``["folio"]``, ``/brokers/folio`` -> the
  gateways' host:port, an unknown cluster 404;
- ``/brokers``: both gateways with exactly one load manager, ``self`` set on
  the answering one, owned bundle counts equal to etcd's ownership keys, and
  paging (search / offset / limit, ``X-Total-Count``; a negative offset 400);
- storage nodes, etcd members, this gateway's topic summaries, recovery status
  and an overview whose totals match what was published, with no problems;
- a subscription nobody reads whose backlog keeps rising is a problem;
- the read-only node shows ``read-only``; killed (kill -9) it shows ``gone``
  and a critical problem heads the overview; forgetting it works once (204,
  then 404), forgetting a live node is a 409;
- kill -9 of a storage node that ledgers name and of a gateway: the node is
  ``gone`` (critical, first), fewer writable nodes than Qw is critical, the
  auditor's under-replicated ledgers and progress show it (also on the
  auditor's /metrics), it cannot be forgotten (409), the dead gateway drops out
  of ``/brokers`` and the overview still answers 200 and names it missing.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from clusters import MessagingCluster
from failover_clients import owner_of
from nodeproc import NodeProcess
from prometheus_client.parser import text_string_to_metric_families
from wsclient import Consumer, module_cluster, publish_each

from coordination import keys

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 40.0
A = "/admin/v2"


class Env:
    def __init__(
        self, cluster: MessagingCluster, auditor: subprocess.Popen[str], auditor_metrics: str
    ) -> None:
        self.cluster = cluster
        self.auditor = auditor
        self.auditor_metrics = auditor_metrics
        self.extra: NodeProcess | None = None


def start_auditor(cluster: MessagingCluster) -> tuple[subprocess.Popen[str], str]:
    root = cluster.ledgers.root
    log = open(root / "auditor.log", "w")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "storage.auditor", "--etcd", cluster.ledgers.endpoint),
            *("--etcd-namespace", cluster.ledgers.namespace, "--id", "auditor-test", "--grace-ms", "1000"),
            *("--check-interval-ms", "500", "--lease-ttl", "2", "--metrics-port", "0"),
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    log.close()
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("FOLIO-AUDITOR READY"), line
    fields = dict(part.split("=", 1) for part in line.split()[2:])
    return proc, fields["metrics"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    async with module_cluster(etcd_endpoint, tmp_path_factory.mktemp("admincluster")) as cluster:
        auditor, metrics = start_auditor(cluster)
        made = Env(cluster, auditor, metrics)
        try:
            yield made
        finally:
            if auditor.poll() is None:
                auditor.send_signal(signal.SIGTERM)
                try:
                    auditor.wait(10)
                except subprocess.TimeoutExpired:
                    auditor.kill()
            if made.extra is not None:
                made.extra.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=20.0) as client:
        yield client


async def get_json(http: httpx.AsyncClient, url: str, **params: Any) -> Any:
    response = await http.get(url, params=params)
    assert response.status_code == 200, response.text
    return response.json()


async def poll(check: Any, what: str, timeout: float = DEADLINE_S) -> Any:
    """Call ``await check()`` until it returns something truthy; that value is returned."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


async def nodes_by_id(http: httpx.AsyncClient, url: str) -> dict[str, dict[str, Any]]:
    return {n["nodeId"]: n for n in await get_json(http, f"{url}{A}/storage/nodes")}


# ---------------------------------------------------------------- Pulsar-compatible lists


async def test_clusters_and_brokers_of_cluster(env: Env, http: httpx.AsyncClient) -> None:
    url = env.cluster.urls[1]
    assert await get_json(http, f"{url}{A}/clusters") == ["folio"]
    addresses = sorted(g.address for g in env.cluster.gateways)
    assert await get_json(http, f"{url}{A}/brokers/folio") == addresses
    missing = await http.get(f"{url}{A}/brokers/other-cluster")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found", missing.text


async def test_list_gateways_roles_bundles_and_paging(env: Env, http: httpx.AsyncClient) -> None:
    cluster = env.cluster
    for i in range(4):  # topics spread over bundles, so gateways own some
        await publish_each(cluster.ws(i % 2), f"spread-{i}", ["x"])
    url = cluster.urls[0]
    store = await cluster.ledgers.store()
    owners = [kv.value.decode() for kv in await store.list_prefix(keys.BUNDLES)]
    gateways = await get_json(http, f"{url}{A}/brokers")
    assert [g["id"] for g in gateways] == sorted(g.address for g in cluster.gateways)
    assert [g["httpUrl"] for g in gateways] == sorted(cluster.urls)
    assert sum(g["loadManager"] for g in gateways) == 1
    assert [g["self"] for g in gateways] == [g["httpUrl"] == url for g in gateways]
    assert {g["id"]: g["bundles"] for g in gateways} == {g["id"]: owners.count(g["id"]) for g in gateways}
    assert sum(g["bundles"] for g in gateways) >= 1
    me = next(g for g in gateways if g["self"])
    owned = await get_json(http, f"{url}{A}/broker-stats/topics")
    assert me["topics"] == sum(len(d) for ns in owned.values() for b in ns.values() for d in b.values())

    first = await http.get(f"{url}{A}/brokers", params={"limit": 1})
    assert first.headers["X-Total-Count"] == "2" and [g["id"] for g in first.json()] == [gateways[0]["id"]]
    second = await http.get(f"{url}{A}/brokers", params={"offset": 1, "limit": 1})
    assert second.headers["X-Total-Count"] == "2" and [g["id"] for g in second.json()] == [gateways[1]["id"]]
    port = gateways[1]["id"].rsplit(":", 1)[1]
    found = await http.get(f"{url}{A}/brokers", params={"search": f":{port}"})
    assert found.headers["X-Total-Count"] == "1" and [g["id"] for g in found.json()] == [gateways[1]["id"]]
    none = await http.get(f"{url}{A}/brokers", params={"search": "no-such-gateway"})
    assert none.headers["X-Total-Count"] == "0" and none.json() == []
    bad = await http.get(f"{url}{A}/brokers", params={"offset": -1})
    assert bad.status_code == 400, bad.text


# ---------------------------------------------------------------- healthy cluster views


async def test_storage_etcd_topic_stats_recovery_and_overview(env: Env, http: httpx.AsyncClient) -> None:
    cluster = env.cluster
    url = cluster.urls[0]
    consumer = await Consumer.connect(cluster.ws(0), "stats", "s", "subscriptionType=Shared")
    await consumer.close()  # a durable subscription nobody reads: every message stays in its backlog
    await publish_each(cluster.ws(1), "stats", [f"m{i}" for i in range(5)])

    expected = {n.address: n.metrics_address for n in cluster.ledgers.nodes}

    async def nodes_with_ledgers() -> list[dict[str, Any]] | None:
        nodes = await get_json(http, f"{url}{A}/storage/nodes")
        return nodes if sum(n["ledgerCount"] for n in nodes) >= 3 else None

    nodes = await poll(nodes_with_ledgers, "storage nodes to report their ledgers")
    assert {n["nodeId"]: n["metricsAddress"] for n in nodes} == expected
    assert all(n["state"] == "writable" and n["totalBytes"] > 0 and n["freeBytes"] > 0 for n in nodes)
    paged = await http.get(f"{url}{A}/storage/nodes", params={"offset": 2, "limit": 5})
    assert (
        paged.headers["X-Total-Count"] == "3" and [n["nodeId"] for n in paged.json()] == sorted(expected)[2:]
    )

    members = await get_json(http, f"{url}{A}/etcd/members")
    assert len(members) == 1 and members[0]["isLeader"] is True and members[0]["dbSize"] > 0
    assert any(u.endswith(cluster.ledgers.endpoint.split(":")[-1]) for u in members[0]["clientUrls"])

    owner = await owner_of(url, "stats")
    other = next(u for u in cluster.urls if u != owner)
    stats = await get_json(http, f"{owner}{A}/broker-stats/topics")
    summary = stats["public/default"]
    topic = "persistent://public/default/stats"
    found = [d["persistent"][topic] for d in summary.values() if topic in d.get("persistent", {})]
    assert len(found) == 1, stats
    assert (found[0]["msgInCounter"], found[0]["msgBacklog"], found[0]["subscriptionCount"]) == (5, 5, 1)
    assert found[0]["storageSize"] > 0
    elsewhere = await get_json(http, f"{other}{A}/broker-stats/topics")
    assert all(topic not in d.get("persistent", {}) for ns in elsewhere.values() for d in ns.values())

    async def checked() -> dict[str, Any] | None:
        response = await http.get(f"{url}{A}/storage/recovery")
        body = response.json() if response.status_code == 200 else {}
        return body if body.get("ledgersChecked", 0) >= 1 else None

    recovery = await poll(checked, "the auditor's first pass")
    assert recovery["auditor"] == "auditor-test" and recovery["ledgersPending"] == 0
    assert await get_json(http, f"{url}{A}/storage/under-replicated") == []

    overview = await get_json(http, f"{other}{A}/cluster/overview")
    assert overview["problems"] == []
    assert len(overview["gateways"]) == 2 and len(overview["storageNodes"]) == 3
    assert overview["etcd"] == {"members": 1, "healthy": True}
    totals = overview["totals"]
    assert totals["tenants"] >= 1 and totals["namespaces"] >= 1
    assert totals["topics"] >= 5  # spread-0..3 and stats at least
    assert totals["msgBacklog"] >= 5 and totals["storageSize"] >= found[0]["storageSize"]


async def test_a_backlog_that_keeps_growing_is_a_problem(env: Env, http: httpx.AsyncClient) -> None:
    cluster = env.cluster
    consumer = await Consumer.connect(cluster.ws(0), "growing", "lagging", "subscriptionType=Shared")
    await consumer.close()
    topic = "persistent://public/default/growing"

    async def growing() -> dict[str, Any] | None:
        await publish_each(cluster.ws(0), "growing", ["more"])
        overview = await get_json(http, f"{cluster.urls[0]}{A}/cluster/overview")
        return next((p for p in overview["problems"] if p["target"] == topic), None)

    problem = await poll(growing, "a backlog-growing problem")
    assert (problem["severity"], problem["kind"]) == ("warning", "backlog-growing")


# ---------------------------------------------------------------- read-only, gone, forget


async def test_read_only_node_then_gone_then_forgotten(env: Env, http: httpx.AsyncClient) -> None:
    cluster = env.cluster
    url = cluster.urls[1]
    knob = cluster.ledgers.root / "free-bytes"
    knob.write_text("0")  # no free space: read-only from its first disk check
    extra = NodeProcess(
        cluster.ledgers.root / "node-extra",
        cluster.ledgers.endpoint,
        namespace=cluster.ledgers.namespace,
        extra_args=["--lease-ttl", "2"],
        env={"FOLIO_TEST_FREE_BYTES_FILE": str(knob)},
    )
    extra.data_dir.mkdir(parents=True, exist_ok=True)
    env.extra = extra
    await asyncio.to_thread(extra.start)
    nodes = await nodes_by_id(http, url)
    assert nodes[extra.address]["state"] == "read-only" and nodes[extra.address]["freeBytes"] == 0
    overview = await get_json(http, f"{url}{A}/cluster/overview")
    assert [(p["kind"], p["target"]) for p in overview["problems"] if p["target"] == extra.address] == [
        ("storage-node-read-only", extra.address)
    ]
    live = cluster.ledgers.nodes[1].address
    refused = await http.delete(f"{url}{A}/storage/nodes/{live}")
    assert refused.status_code == 409 and refused.json()["code"] == "conflict", refused.text

    extra.kill9()

    async def gone() -> bool:
        return (await nodes_by_id(http, url)).get(extra.address, {}).get("state") == "gone"

    await poll(gone, "the killed read-only node to show as gone")
    overview = await get_json(http, f"{url}{A}/cluster/overview")
    head = overview["problems"][0]
    assert (head["severity"], head["kind"], head["target"]) == (
        "critical",
        "storage-node-gone",
        extra.address,
    )
    forgotten = await http.delete(f"{url}{A}/storage/nodes/{extra.address}")
    assert forgotten.status_code == 204, forgotten.text
    assert extra.address not in await nodes_by_id(http, url)
    again = await http.delete(f"{url}{A}/storage/nodes/{extra.address}")
    assert again.status_code == 404 and again.json()["code"] == "not_found", again.text
    overview = await get_json(http, f"{url}{A}/cluster/overview")
    assert all(p["target"] != extra.address for p in overview["problems"])


async def test_killed_storage_node_and_gateway(env: Env, http: httpx.AsyncClient) -> None:
    cluster = env.cluster
    victim = cluster.ledgers.nodes[0]
    cluster.gateways[1].kill9()
    victim.kill9()
    url = cluster.urls[0]

    async def node_gone() -> bool:
        return (await nodes_by_id(http, url))[victim.address]["state"] == "gone"

    await poll(node_gone, "the killed storage node to show as gone")

    async def one_gateway() -> list[dict[str, Any]] | None:
        gateways = await get_json(http, f"{url}{A}/brokers")
        return gateways if len(gateways) == 1 else None

    gateways = await poll(one_gateway, "the killed gateway to drop out of /brokers")
    assert gateways[0]["httpUrl"] == url and gateways[0]["loadManager"] is True
    assert await get_json(http, f"{url}{A}/brokers/folio") == [cluster.gateways[0].address]

    async def under_replicated() -> list[dict[str, Any]]:
        return await get_json(http, f"{url}{A}/storage/under-replicated")  # type: ignore[no-any-return]

    ledgers = await poll(under_replicated, "the auditor to mark under-replicated ledgers")
    assert all(entry["missingNodes"] == [victim.address] for entry in ledgers), ledgers
    recovery = await get_json(http, f"{url}{A}/storage/recovery")
    assert recovery["goneNodes"] == [victim.address] and recovery["ledgersPending"] >= 1

    overview = await get_json(http, f"{url}{A}/cluster/overview")
    kinds = [(p["severity"], p["kind"], p["target"]) for p in overview["problems"]]
    assert kinds[0] == ("critical", "storage-node-gone", victim.address), kinds
    assert ("critical", "not-enough-writable-nodes", "storage") in kinds
    assert ("warning", "under-replicated-ledgers", victim.address) in kinds
    assert ("warning", "gateway-missing", cluster.gateways[1].address) in kinds
    assert [g["id"] for g in overview["gateways"]] == [cluster.gateways[0].address]

    refused = await http.delete(f"{url}{A}/storage/nodes/{victim.address}")
    assert refused.status_code == 409 and "ledger" in refused.json()["reason"], refused.text

    async def auditor_metrics() -> dict[str, float] | None:
        text = (await http.get(f"http://{env.auditor_metrics}/metrics")).text
        values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
        return values if values.get("folio_auditor_ledgers_pending", 0) >= 1 else None

    values = await poll(auditor_metrics, "the auditor's pending gauge")
    assert values["folio_auditor_leader"] == 1 and values["folio_auditor_ledgers_checked"] >= len(ledgers)
    assert values["folio_auditor_gone_nodes"] == 1 and values["folio_auditor_passes_total"] >= 1
