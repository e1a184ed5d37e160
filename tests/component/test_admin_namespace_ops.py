"""Admin REST v2 namespace operations beyond policies: permissions (Pulsar's
``auth_policies.namespace_auth``) and unload (whole namespace, one bundle), over the
router alone on the real etcd, and unload against a real 2-gateway cluster."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from clusters import MessagingCluster
from fastapi import FastAPI
from wsclient import Producer

from coordination.etcd_store import EtcdStore
from gateway.api.admin_namespaces import make_router
from gateway.meta import NamespaceStore
from gateway.names import NamespaceName

pytestmark = pytest.mark.component

A = "/admin/v2"
NS = f"{A}/namespaces/acme/orders"


class Unloads:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    async def __call__(self, ns: NamespaceName, bundle: str | None) -> int:
        self.calls.append((str(ns), bundle))
        return 1


@pytest.fixture
async def unloads() -> Unloads:
    return Unloads()


@pytest.fixture
async def client(etcd_store: EtcdStore, unloads: Unloads) -> AsyncIterator[httpx.AsyncClient]:
    store = NamespaceStore(etcd_store)
    app = FastAPI()
    app.include_router(make_router(lambda: store, unloads))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        assert (await c.put(f"{A}/tenants/acme")).status_code == 204
        assert (await c.put(NS, json={"bundles": {"numBundles": 2}})).status_code == 204
        yield c
    await store.close()


def error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"reason", "code"}
    return str(body["reason"])


async def test_permissions_grant_list_revoke(client: httpx.AsyncClient) -> None:
    assert (await client.get(f"{NS}/permissions")).json() == {}
    got = await client.post(f"{NS}/permissions/app-1", json=["consume", "produce", "consume"])
    assert got.status_code == 204, got.text
    assert (await client.post(f"{NS}/permissions/ops", json=["produce"])).status_code == 204
    assert (await client.get(f"{NS}/permissions")).json() == {
        "app-1": ["consume", "produce"],
        "ops": ["produce"],
    }
    policies = (await client.get(NS)).json()
    assert policies["auth_policies"]["namespace_auth"] == {
        "app-1": ["consume", "produce"],
        "ops": ["produce"],
    }

    assert "unknown action" in error(await client.post(f"{NS}/permissions/x", json=["read"]), 400)
    assert "array" in error(await client.post(f"{NS}/permissions/x", json={"a": 1}), 400)
    error(await client.post(f"{A}/namespaces/acme/nope/permissions/x", json=["produce"]), 404)

    assert (await client.delete(f"{NS}/permissions/ops")).status_code == 204
    assert (await client.get(f"{NS}/permissions")).json() == {"app-1": ["consume", "produce"]}
    error(await client.delete(f"{NS}/permissions/ops"), 404)


async def test_unload_namespace_and_bundle(client: httpx.AsyncClient, unloads: Unloads) -> None:
    assert (await client.put(f"{NS}/unload")).status_code == 204
    assert (await client.put(f"{NS}/0x00000000_0x80000000/unload")).status_code == 204
    assert unloads.calls == [("acme/orders", None), ("acme/orders", "0x00000000_0x80000000")]
    assert "no bundle" in error(await client.put(f"{NS}/0x00000000_0x40000000/unload"), 404)
    error(await client.put(f"{A}/namespaces/acme/nope/unload"), 404)
    assert len(unloads.calls) == 2  # refused requests asked nobody


async def test_unload_moves_live_topics_gracefully(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    """A producer connected when its namespace is unloaded is closed (retriable 45xx
    code), and publishing works again right after, through either gateway."""
    cluster = await messaging_cluster(gateways=2)
    topic = "persistent/public/default/unload-me"
    producer = await Producer.connect(cluster.ws(0), "unload-me")
    first = await producer.send(b"before")
    assert first["result"] == "ok"
    async with httpx.AsyncClient(base_url=cluster.urls[1], timeout=10) as http:
        assert (await http.put(f"{A}/namespaces/public/default/unload")).status_code == 204
        await asyncio.wait_for(producer.ws.wait_closed(), 15)
        code = producer.ws.close_code
        assert code is not None and 4500 <= code < 4600, code
        deadline = asyncio.get_running_loop().time() + 15
        while True:
            got = await http.post(f"/topics/{topic}", json={"messages": [{"payload": "YWZ0ZXI="}]})
            result = got.json()["messagePublishResults"][0] if got.status_code == 200 else {}
            if result.get("errorCode", 1) == 0:
                break
            assert asyncio.get_running_loop().time() < deadline, got.text
            await asyncio.sleep(0.2)
    await producer.close()


async def test_tenant_and_namespace_lists_page_and_search(client: httpx.AsyncClient) -> None:
    for name in ("billing", "Orders-EU", "orders-us", "shipping"):
        assert (await client.put(f"{A}/namespaces/acme/{name}")).status_code == 204
    everything = await client.get(f"{A}/namespaces/acme")
    assert everything.json() == [
        "acme/Orders-EU",
        "acme/billing",
        "acme/orders",
        "acme/orders-us",
        "acme/shipping",
    ]
    assert everything.headers["X-Total-Count"] == "5"
    found = await client.get(f"{A}/namespaces/acme", params={"search": "ORDERS", "limit": 2})
    assert found.json() == ["acme/Orders-EU", "acme/orders"]
    assert found.headers["X-Total-Count"] == "3"
    rest = await client.get(f"{A}/namespaces/acme", params={"search": "orders", "offset": 2, "limit": 2})
    assert rest.json() == ["acme/orders-us"]
    assert "limit" in error(await client.get(f"{A}/namespaces/acme", params={"limit": 5000}), 400)
    error(await client.get(f"{A}/namespaces/acme", params={"offset": -1}), 400)
    assert (await client.put(f"{A}/tenants/zeta")).status_code == 204
    tenants = await client.get(f"{A}/tenants", params={"offset": 1, "limit": 1})
    assert tenants.json() == ["zeta"] and tenants.headers["X-Total-Count"] == "2"
