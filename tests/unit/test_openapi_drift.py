"""The committed OpenAPI and AsyncAPI documents are exactly what the gateway app generates and serves.

In-process (httpx ASGI transport, no lifespan: nothing is started): the app
serves both documents, and answers a request it cannot validate or route with
the one ``ErrorBody`` shape (400, 404, 405) - never FastAPI's 422 or ``detail``.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest

from coordination.clock import SystemClock
from coordination.memory_store import MemoryStore
from gateway.api.app import create_app
from gateway.api.asyncapi import render as render_asyncapi
from gateway.api.openapi_spec import render
from gateway.process import Gateway, GatewayConfig

pytestmark = pytest.mark.unit

OPENAPI = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"
ASYNCAPI = Path(__file__).resolve().parents[2] / "openapi" / "asyncapi.json"


def test_committed_spec_matches_the_app() -> None:
    assert OPENAPI.read_bytes() == render(), (
        "openapi/openapi.json drifted from the app: regenerate it with "
        "`.venv/bin/python -m gateway.api.openapi_spec > openapi/openapi.json`"
    )


def test_spec_names_the_messaging_and_admin_paths() -> None:
    paths = set(orjson.loads(render())["paths"])
    for path in (
        "/topics/{domain}/{tenant}/{namespace}/{topic}",
        "/topics/{domain}/{tenant}/{namespace}/{topic}/partitions/{partition}",
        "/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}",
        "/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}/ack",
        "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}",
        "/admin/v2/brokers/health",
        "/admin/v2/namespaces/{tenant}/{namespace}",
    ):
        assert path in paths


@pytest.fixture
async def client() -> httpx.AsyncClient:
    gateway = Gateway(MemoryStore(SystemClock()), GatewayConfig("unit", "http://127.0.0.1:1"))
    app = create_app(gateway, manage_lifecycle=False)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://unit")


async def test_app_serves_the_committed_documents(client: httpx.AsyncClient) -> None:
    async with client:
        openapi = await client.get("/openapi.json")
        asyncapi = await client.get("/asyncapi.json")
    assert openapi.json() == orjson.loads(OPENAPI.read_bytes())
    assert asyncapi.headers["content-type"] == "application/json"
    assert asyncapi.content == ASYNCAPI.read_bytes() == render_asyncapi()


async def test_invalid_and_unrouted_requests_get_error_body(client: httpx.AsyncClient) -> None:
    async with client:
        bad_query = await client.get("/consume/persistent/public/default/t/s", params={"max": 0})
        bad_path = await client.post("/topics/persistent/public/default/t/partitions/x", content=b"x")
        unknown = await client.get("/no/such/path")
        method = await client.delete("/admin/v2/brokers/health")
    assert bad_query.status_code == 400
    assert bad_query.json()["code"] == "invalid_argument" and "max" in bad_query.json()["reason"]
    assert bad_path.status_code == 400 and "partition" in bad_path.json()["reason"]
    assert unknown.status_code == 404 and unknown.json() == {"reason": "Not Found", "code": "not_found"}
    assert method.status_code == 405 and method.json()["code"] == "method_not_allowed"
    assert "GET" in method.headers["allow"]
