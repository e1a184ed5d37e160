"""Admin REST v2 router (tenants, namespaces, policies, topic creation/partitions) over a
NamespaceStore on the real etcd: status codes and body shapes as Pulsar's."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute

from coordination.clock import ManualClock
from coordination.etcd_store import EtcdStore
from coordination.memory_store import MemoryStore
from gateway.api.admin_namespaces import make_router
from gateway.api.admin_topics import make_metadata_router
from gateway.meta import NamespaceStore

pytestmark = pytest.mark.component

A = "/admin/v2"
NS = f"{A}/namespaces/acme/orders"
P = f"{A}/persistent/acme/orders"


def app_for(store: NamespaceStore) -> FastAPI:
    app = FastAPI()  # no app-level exception handlers: the router must map its own errors
    app.include_router(make_router(lambda: store))
    app.include_router(make_metadata_router(lambda: store))  # topic creation, lists, partitions
    return app


@pytest.fixture
async def client(etcd_store: EtcdStore) -> AsyncIterator[httpx.AsyncClient]:
    store = NamespaceStore(etcd_store)
    transport = httpx.ASGITransport(app=app_for(store))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        yield c
    await store.close()


@pytest.fixture
async def ns(client: httpx.AsyncClient) -> str:
    assert (await client.put(f"{A}/tenants/acme")).status_code == 204
    assert (await client.put(NS)).status_code == 204
    return NS


def reason(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"reason", "code"} and body["reason"] and body["code"]
    return str(body["reason"])


def topic_reason(response: httpx.Response, status: int) -> str:
    """The topic routes (gateway.api.admin_topics) answer ``ErrorBody`` (reason and code)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"reason", "code"} and body["reason"]
    return str(body["reason"])


# ---------------------------------------------------------------- tenants


async def test_tenants(client: httpx.AsyncClient) -> None:
    assert (await client.get(f"{A}/tenants")).json() == []
    put = await client.put(f"{A}/tenants/acme", json={"adminRoles": ["ops"], "allowedClusters": ["c1"]})
    assert put.status_code == 204 and put.content == b""
    assert "already exists" in reason(await client.put(f"{A}/tenants/acme"), 409)
    got = await client.get(f"{A}/tenants/acme")
    assert got.status_code == 200
    assert got.json() == {"adminRoles": ["ops"], "allowedClusters": ["c1"]}
    assert (await client.post(f"{A}/tenants/acme", json={"adminRoles": []})).status_code == 204
    assert (await client.get(f"{A}/tenants/acme")).json()["adminRoles"] == []
    assert "does not exist" in reason(await client.get(f"{A}/tenants/nobody"), 404)
    reason(await client.post(f"{A}/tenants/nobody", json={}), 404)
    assert "Invalid tenant" in reason(await client.put(f"{A}/tenants/bad%20name"), 412)
    assert "adminRoles" in reason(await client.put(f"{A}/tenants/other", json={"adminRoles": "x"}), 400)
    assert (await client.get(f"{A}/tenants")).json() == ["acme"]
    assert (await client.delete(f"{A}/tenants/acme")).status_code == 204
    reason(await client.delete(f"{A}/tenants/acme"), 404)


# ---------------------------------------------------------------- namespaces


async def test_namespaces_create_get_list_delete(client: httpx.AsyncClient) -> None:
    assert "Tenant acme" in reason(await client.put(NS), 404)
    await client.put(f"{A}/tenants/acme")
    assert (await client.put(NS, json={"bundles": {"numBundles": 8}})).status_code == 204
    reason(await client.put(NS), 409)
    assert (await client.put(f"{A}/namespaces/acme/billing")).status_code == 204
    assert (await client.get(f"{A}/namespaces/acme")).json() == ["acme/billing", "acme/orders"]
    reason(await client.get(f"{A}/namespaces/nobody"), 404)

    policies = (await client.get(NS)).json()
    assert policies["bundles"]["numBundles"] == 8
    assert policies["retention_policies"] == {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
    assert policies["autoTopicCreationOverride"]["allowAutoTopicCreation"] is True
    assert {"message_ttl_in_seconds", "backlog_quota_map", "deduplicationEnabled"} <= set(policies)
    assert (await client.get(f"{NS}/bundles")).json() == {
        "boundaries": [f"0x{i * 0x20000000:08x}" for i in range(8)] + ["0xffffffff"],
        "numBundles": 8,
    }
    assert (await client.get(f"{A}/namespaces/acme/billing/bundles")).json()["boundaries"] == [
        "0x00000000",
        "0x40000000",
        "0x80000000",
        "0xc0000000",
        "0xffffffff",
    ]
    assert "numBundles" in reason(
        await client.put(f"{A}/namespaces/acme/x", json={"bundles": {"numBundles": 0}}), 400
    )
    assert "Invalid namespace" in reason(await client.put(f"{A}/namespaces/acme/.hidden"), 412)
    reason(await client.get(f"{A}/namespaces/acme/none"), 404)

    assert (await client.delete(f"{A}/namespaces/acme/billing")).status_code == 204
    reason(await client.delete(f"{A}/namespaces/acme/billing"), 404)
    assert "still has namespaces" in reason(await client.delete(f"{A}/tenants/acme"), 409)


async def test_namespace_with_topics_needs_force(client: httpx.AsyncClient, ns: str) -> None:
    assert (await client.put(f"{P}/t")).status_code == 204
    assert "still has topics" in reason(await client.delete(ns), 409)
    assert (await client.delete(f"{ns}?force=true")).status_code == 204
    reason(await client.get(ns), 404)


# ---------------------------------------------------------------- policies


async def test_retention_ttl_dedup_limits_and_auto_creation(client: httpx.AsyncClient, ns: str) -> None:
    retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
    assert (await client.post(f"{ns}/retention", json=retention)).status_code == 204
    assert (await client.get(f"{ns}/retention")).json() == retention
    assert "use -1" in reason(await client.post(f"{ns}/retention", json={"retentionTimeInMinutes": 5}), 400)
    assert (await client.delete(f"{ns}/retention")).status_code == 204
    assert (await client.get(f"{ns}/retention")).json() == {
        "retentionTimeInMinutes": 0,
        "retentionSizeInMB": 0,
    }

    assert (await client.get(f"{ns}/messageTTL")).json() is None
    # curl -d 3600 sends form-encoded content; the body is still read as JSON
    curl = await client.post(
        f"{ns}/messageTTL", content=b"3600", headers={"content-type": "x-www-form-urlencoded"}
    )
    assert curl.status_code == 204
    assert (await client.get(f"{ns}/messageTTL")).json() == 3600
    assert "messageTTL" in reason(await client.post(f"{ns}/messageTTL", json=-1), 400)
    assert "body is required" in reason(await client.post(f"{ns}/messageTTL"), 400)
    bad_json = await client.post(
        f"{ns}/messageTTL", content=b"{", headers={"content-type": "application/json"}
    )
    assert "not JSON" in reason(bad_json, 400)
    assert (await client.delete(f"{ns}/messageTTL")).status_code == 204
    assert (await client.get(f"{ns}/messageTTL")).json() is None

    assert (await client.post(f"{ns}/deduplication", json=True)).status_code == 204
    assert (await client.get(f"{ns}/deduplication")).json() is True
    assert (await client.get(ns)).json()["deduplicationEnabled"] is True
    reason(await client.post(f"{ns}/deduplication", json="yes"), 400)

    assert (await client.post(f"{ns}/maxConsumersPerSubscription", json=3)).status_code == 204
    assert (await client.get(f"{ns}/maxConsumersPerSubscription")).json() == 3
    assert (await client.post(f"{ns}/maxProducersPerTopic", json=2)).status_code == 204
    assert (await client.get(ns)).json()["max_producers_per_topic"] == 2
    assert (await client.delete(f"{ns}/maxConsumersPerSubscription")).status_code == 204
    assert (await client.get(f"{ns}/maxConsumersPerSubscription")).json() is None

    auto = {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3}
    assert (await client.post(f"{ns}/autoTopicCreation", json=auto)).status_code == 204
    assert (await client.get(f"{ns}/autoTopicCreation")).json() == auto
    reason(
        await client.post(f"{ns}/autoTopicCreation", json={"allowAutoTopicCreation": True, "topicType": "x"}),
        400,
    )
    assert (await client.delete(f"{ns}/autoTopicCreation")).status_code == 204
    assert (await client.get(f"{ns}/autoTopicCreation")).json()["topicType"] == "non-partitioned"

    reason(await client.get(f"{A}/namespaces/acme/none/retention"), 404)
    reason(await client.post(f"{A}/namespaces/acme/none/messageTTL", json=5), 404)


async def test_persistence_set_get_remove_and_bad_bodies(client: httpx.AsyncClient, ns: str) -> None:
    """Pulsar's …/persistence: unset is null (like messageTTL), a body out of range or out
    of order is 400 naming the field, DELETE makes it unset again."""
    url = f"{ns}/persistence"
    assert (await client.get(url)).json() is None
    assert (await client.get(ns)).json()["persistence"] is None
    body = {
        "bookkeeperEnsemble": 3,
        "bookkeeperWriteQuorum": 2,
        "bookkeeperAckQuorum": 2,
        "managedLedgerMaxMarkDeleteRate": 0.0,
    }
    assert (await client.post(url, json=body)).status_code == 204
    assert (await client.get(url)).json() == body
    assert (await client.get(ns)).json()["persistence"] == body

    for bad, words in [
        ({**body, "bookkeeperWriteQuorum": 4}, "bookkeeperWriteQuorum 4 is more than bookkeeperEnsemble 3"),
        ({**body, "bookkeeperAckQuorum": 3}, "bookkeeperAckQuorum 3 is more than bookkeeperWriteQuorum 2"),
        ({**body, "bookkeeperEnsemble": 17}, "bookkeeperEnsemble must be between 1 and 16"),
        ({**body, "bookkeeperAckQuorum": 0}, "bookkeeperAckQuorum must be between 1"),
        ({"bookkeeperEnsemble": 3, "bookkeeperAckQuorum": 2}, "needs bookkeeperWriteQuorum"),
        ({**body, "managedLedgerMaxMarkDeleteRate": -1}, "managedLedgerMaxMarkDeleteRate"),
        (3, "JSON object"),
    ]:
        response = await client.post(url, json=bad)
        assert words in reason(response, 400)
        assert response.json()["code"] == "invalid_policy"
    assert "body is required" in reason(await client.post(url), 400)
    assert (await client.get(url)).json() == body  # refused bodies changed nothing

    assert (await client.delete(url)).status_code == 204
    assert (await client.get(url)).json() is None
    reason(await client.get(f"{A}/namespaces/acme/none/persistence"), 404)
    reason(await client.post(f"{A}/namespaces/acme/none/persistence", json=body), 404)
    reason(await client.post(f"{A}/namespaces/acme/none/persistence", json=[1]), 400)  # 400 before 404


async def test_backlog_quotas(client: httpx.AsyncClient, ns: str) -> None:
    assert (await client.get(f"{ns}/backlogQuotaMap")).json() == {}
    quota = {"limitSize": 1024, "limitTime": -1, "policy": "producer_exception"}
    url = f"{ns}/backlogQuota?backlogQuotaType=destination_storage"
    assert (await client.post(url, json=quota)).status_code == 204
    assert (
        await client.post(f"{ns}/backlogQuota?backlogQuotaType=message_age", json={"limitTime": 60})
    ).status_code == 204
    quotas = (await client.get(f"{ns}/backlogQuotaMap")).json()
    assert quotas["destination_storage"] == quota
    assert quotas["message_age"]["limitTime"] == 60
    assert "backlogQuotaType" in reason(
        await client.post(f"{ns}/backlogQuota?backlogQuotaType=x", json={}), 400
    )
    reason(await client.post(url, json={"policy": "nope"}), 400)
    assert (await client.delete(f"{ns}/backlogQuota?backlogQuotaType=message_age")).status_code == 204
    assert set((await client.get(f"{ns}/backlogQuotaMap")).json()) == {"destination_storage"}

    # a quota beyond the retention size is a precondition failure, as in Pulsar
    await client.post(f"{ns}/retention", json={"retentionTimeInMinutes": 10, "retentionSizeInMB": 1})
    assert "exceeds the retention" in reason(await client.post(url, json={"limitSize": 5 << 20}), 412)


# ---------------------------------------------------------------- topics


async def test_topics_create_list_and_partitions(client: httpx.AsyncClient, ns: str) -> None:
    assert (await client.put(f"{P}/p/partitions", json=3)).status_code == 204
    assert (await client.get(f"{P}/p/partitions")).json() == {"partitions": 3}
    topic_reason(await client.put(f"{P}/p/partitions", json=3), 409)
    topic_reason(await client.put(f"{P}/p", json=None), 409)
    assert (await client.post(f"{P}/p/partitions", json=4)).status_code == 204
    assert "only be increased" in topic_reason(await client.post(f"{P}/p/partitions", json=2), 412)
    assert "not a partitioned topic" in topic_reason(await client.post(f"{P}/plain/partitions", json=2), 409)
    assert "from 1 to 1024" in topic_reason(await client.put(f"{P}/q/partitions", json=0), 400)
    topic_reason(await client.put(f"{P}/q/partitions", json="4"), 400)
    topic_reason(await client.put(f"{P}/q/partitions"), 400)

    assert (await client.put(f"{P}/plain")).status_code == 204
    topic_reason(await client.put(f"{P}/plain"), 409)
    topic_reason(await client.put(f"{P}/plain/partitions", json=2), 409)
    assert (await client.get(f"{P}/plain/partitions")).json() == {"partitions": 0}
    assert (await client.get(f"{P}/unknown/partitions")).json() == {"partitions": 0}
    assert "Invalid topic" in topic_reason(await client.put(f"{P}/-bad"), 412)
    topic_reason(await client.put(f"{A}/persistent/acme/none/t"), 404)

    expected = [f"persistent://acme/orders/p-partition-{i}" for i in range(4)]
    topics = (await client.get(P)).json()
    assert topics == [*expected, "persistent://acme/orders/plain"]
    assert (await client.get(f"{ns}/topics")).json() == topics
    assert (await client.get(f"{P}/partitioned")).json() == ["persistent://acme/orders/p"]
    topic_reason(await client.get(f"{A}/persistent/acme/none"), 404)


async def test_unreachable_store_is_503_with_a_reason() -> None:
    store = MemoryStore(ManualClock())
    node = store.view()
    meta = NamespaceStore(node)
    transport = httpx.ASGITransport(app=app_for(meta))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        node.set_available(False)
        assert "unavailable" in reason(await c.get(f"{A}/tenants"), 503)


def test_openapi_has_unique_operation_ids() -> None:
    app = app_for(NamespaceStore(MemoryStore(ManualClock())))
    schema: dict[str, Any] = app.openapi()
    ids = [op["operationId"] for path in schema["paths"].values() for op in path.values()]
    assert [i for i, n in Counter(ids).items() if n > 1] == []
    assert "/admin/v2/namespaces/{tenant}/{namespace}/backlogQuota" in schema["paths"]
    store = NamespaceStore(MemoryStore(ManualClock()))
    routers = (make_router(lambda: store), make_metadata_router(lambda: store))
    routes = [r for rt in routers for r in rt.routes if isinstance(r, APIRoute) and r.include_in_schema]
    assert routes
    assert len(ids) == sum(len(r.methods) for r in routes)  # every route of the routers is in the spec
