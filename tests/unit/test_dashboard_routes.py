"""The dashboard's routes stay out of the API: not in OpenAPI, no shared or shadowed path.

Walks the routes of ``create_app`` (built like ``gateway/api/openapi_spec.py`` does, on a
MemoryStore, without starting the gateway): a dashboard route is one whose endpoint
lives in ``gateway.dashboard.routes``; every other HTTP or WebSocket route is API.
Two path templates overlap when one concrete path matches both (segment by
segment: equal literals, or a parameter on either side; a ``{x:path}`` parameter
takes the rest of the path). Then fetches the pages in-process and follows every
link and asset they name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts

from coordination.clock import SystemClock
from coordination.memory_store import MemoryStore
from gateway.api.app import create_app
from gateway.process import Gateway, GatewayConfig

pytestmark = pytest.mark.unit

DASHBOARD_MODULE = "gateway.dashboard.routes"
DASHBOARD_PATHS = {
    "/",
    "/favicon.ico",
    "/ui/tenants",
    "/ui/tenants/{tenant}",
    "/ui/tenants/{tenant}/{namespace}",
    "/ui/topics/persistent/{tenant}/{namespace}/{topic}",
    "/ui/static/{path:path}",
    "/ui/sql",
    "/ui/subscriptions",
    "/ui/grants",
    "/ui/search",
}
PARAM = re.compile(r"\{[^}]*\}")


@dataclass(frozen=True)
class Found:
    path: str
    methods: frozenset[str]
    in_schema: bool
    dashboard: bool


def walk(app: FastAPI) -> Iterator[Found]:
    for route in iter_route_contexts(app.routes):
        path = route.path
        if not isinstance(path, str):
            continue
        module = getattr(route.endpoint, "__module__", "")
        yield Found(
            path,
            frozenset(route.methods or ()),
            bool(getattr(route, "include_in_schema", False)),
            module == DASHBOARD_MODULE,
        )


def overlap(a: str, b: str) -> bool:
    """Whether some concrete path matches both templates ``a`` and ``b``."""
    left, right = a.strip("/").split("/"), b.strip("/").split("/")
    for index in range(max(len(left), len(right))):
        x = left[index] if index < len(left) else None
        y = right[index] if index < len(right) else None
        if (x is not None and x.endswith(":path}")) or (y is not None and y.endswith(":path}")):
            return True  # the rest of the path is free
        if x is None or y is None:
            return False
        if not (x == y or PARAM.search(x) or PARAM.search(y)):
            return False
    return True


@pytest.fixture(scope="module")
def app() -> FastAPI:
    gateway = Gateway(
        MemoryStore(SystemClock()), GatewayConfig(gateway_id="gw-test", http_url="http://127.0.0.1:8080")
    )
    return create_app(gateway, manage_lifecycle=False)


@pytest.fixture(scope="module")
def routes(app: FastAPI) -> list[Found]:
    return list(walk(app))


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("/topics/persistent/{t}/{ns}/{topic}", "/topics/{domain}/{tenant}/{namespace}/{topic}", True),
        ("/ui/tenants/{t}", "/ui/{x}/y", True),  # both match /ui/tenants/y
        ("/ui/static/{path:path}", "/ui/static/js/app.js", True),
        ("/tenants/{tenant}", "/admin/v2/tenants/{tenant}", False),
        ("/ui/tenants/{t}", "/ui/tenants/{t}/{ns}", False),
        ("/", "/metrics", False),
        ("/ui/tenants", "/ui/tenants", True),
    ],
)
def test_overlap_of_path_templates(a: str, b: str, expected: bool) -> None:
    assert overlap(a, b) is expected
    assert overlap(b, a) is expected


def test_dashboard_routes_are_the_expected_ones_and_not_in_openapi(app: FastAPI, routes: list[Found]) -> None:
    dashboard = [r for r in routes if r.dashboard]
    assert {r.path for r in dashboard} == DASHBOARD_PATHS
    assert all(r.methods == {"GET"} and not r.in_schema for r in dashboard), dashboard
    documented = set(app.openapi()["paths"])
    assert documented, "the API has an OpenAPI document"
    assert not documented & DASHBOARD_PATHS


def test_no_dashboard_path_equals_or_shadows_an_api_path(routes: list[Found]) -> None:
    dashboard = [r.path for r in routes if r.dashboard]
    api = [r.path for r in routes if not r.dashboard]
    assert len(api) > 50, "walked the API's routes too"
    clashes = [(d, a) for d in dashboard for a in api if overlap(d, a)]
    assert clashes == []
    assert [a for a in api if a == "/ui" or a.startswith("/ui/")] == []  # /ui/ is the dashboard's


def client_of(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://unit")


PAGES = [
    "/",
    "/ui/tenants",
    "/ui/tenants/acme",
    "/ui/tenants/acme/prod",
    "/ui/topics/persistent/acme/prod/t-partition-1",
]


async def test_pages_render_and_every_link_and_asset_they_name_resolves(app: FastAPI) -> None:
    named: set[str] = set()
    async with client_of(app) as client:
        for url in PAGES:
            reply = await client.get(url)
            assert reply.status_code == 200, (url, reply.text)
            assert "text/html" in reply.headers["content-type"]
            assert "gw-test" in reply.text
            named |= set(re.findall(r'(?:href|src)="(/[^"]*)"', reply.text))
        assert {n for n in named if n.startswith("/ui/static/")}, named
        assert "/ui/topics/persistent/acme/prod/t" in named  # the partition's crumb to its topic
        for url in sorted(named):
            assert url == "/" or url.startswith("/ui/"), url
            reply = await client.get(url)
            assert reply.status_code == 200, (url, reply.status_code)
        assert (await client.get("/ui/tenants/bad%20name")).status_code == 404


async def test_the_old_page_paths_are_the_apis_again(app: FastAPI) -> None:
    async with client_of(app) as client:
        produce = await client.get("/topics/persistent/acme/prod/orders")  # only the REST producer's POST
        assert produce.status_code == 405
        assert produce.headers["allow"] == "POST"
        assert (await client.get("/tenants")).status_code == 404
        assert (await client.get("/dashboard/static/dashboard.css")).status_code == 404
