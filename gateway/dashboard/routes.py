"""HTTP routes of the dashboard: page shells, static files and the favicon.

The templates and static files themselves live in the top-level ``web_ui``
package; this router serves them.

Owns: ``make_router(gateway_id)``: ``/`` (overview), ``/ui/tenants``,
``/ui/tenants/{tenant}``, ``/ui/tenants/{tenant}/{namespace}``, ``/ui/sql``,
``/ui/subscriptions``, ``/ui/search``, ``/ui/grants``,
``/ui/topics/persistent/{tenant}/{namespace}/{topic}``, ``/ui/static/…`` and
``/favicon.ico``. Rules: routes stay out of the OpenAPI document
(``include_in_schema=False``) and out of the API's URL space (every page but
``/`` is under ``pages.UI``; tests/unit/test_dashboard_routes.py checks that no
dashboard path equals or shadows an API path); a page for a name the admin API would refuse is a
404 page; static files are served by Starlette's ``StaticFiles`` (path safety,
ETag, 304) with a version query string on every URL so browsers cache them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.templating import Jinja2Templates
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

import web_ui
from gateway.dashboard import pages
from gateway.names import InvalidName

STATIC = web_ui.STATIC
TEMPLATES = web_ui.TEMPLATES


def asset_version(root: Path = STATIC) -> str:
    """A short digest of the static files' names, sizes and mtimes (changes on upgrade)."""
    digest = hashlib.sha1(usedforsecurity=False)
    for path in sorted(root.rglob("*")):
        if path.is_file():
            stat = path.stat()
            digest.update(f"{path.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:10]


def make_router(gateway_id: str | Callable[[], str]) -> APIRouter:
    """The dashboard router; ``gateway_id`` names this gateway in the page header."""
    router = APIRouter(include_in_schema=False)
    ui = APIRouter(prefix=pages.UI, include_in_schema=False)
    templates = Jinja2Templates(directory=str(TEMPLATES))
    static = StaticFiles(directory=str(STATIC))
    version = asset_version()

    def own_id() -> str:
        return gateway_id() if callable(gateway_id) else gateway_id

    def render(request: Request, build: Callable[[], pages.Page]) -> Response:
        try:
            page = build()
        except InvalidName as exc:
            page, status, reason = pages.Page("missing.html", "Not found", ""), 404, str(exc)
        else:
            status, reason = 200, ""
        context = {
            "page": page,
            "nav": pages.NAV,
            "gateway_id": own_id(),
            "v": version,
            "static": pages.STATIC,
            "reason": reason,
        }
        return templates.TemplateResponse(request, page.template, context, status_code=status)

    def page_route(where: APIRouter, path: str, build: Callable[[], pages.Page], name: str) -> None:
        """``GET path`` on ``where``: the page ``build`` makes (a page without path parameters)."""

        async def page(request: Request) -> Response:
            return render(request, build)

        where.add_api_route(path, page, methods=["GET"], name=name)

    page_route(router, "/", pages.overview, "dashboard_overview")
    for path, build in (
        ("/sql", pages.sql),
        ("/search", pages.search),
        ("/subscriptions", pages.subscriptions),
        ("/grants", pages.grants),
        ("/tenants", pages.tenants),
    ):
        page_route(ui, path, build, f"dashboard_{path[1:]}")

    @ui.get("/tenants/{tenant}")
    async def dashboard_namespaces(request: Request, tenant: str) -> Response:
        return render(request, lambda: pages.namespaces(tenant))

    @ui.get("/tenants/{tenant}/{namespace}")
    async def dashboard_topics(request: Request, tenant: str, namespace: str) -> Response:
        return render(request, lambda: pages.topics(tenant, namespace))

    @ui.get("/topics/persistent/{tenant}/{namespace}/{topic}")
    async def dashboard_topic(request: Request, tenant: str, namespace: str, topic: str) -> Response:
        return render(request, lambda: pages.topic(tenant, namespace, topic))

    @ui.get("/static/{path:path}")  # pages.STATIC
    async def dashboard_static(request: Request, path: str) -> Response:
        response = await static.get_response(path, request.scope)
        if request.query_params.get("v") == version:
            response.headers["Cache-Control"] = "public, max-age=86400, immutable"
        return response

    @router.get("/favicon.ico")
    async def dashboard_favicon(request: Request) -> Response:
        response = await static.get_response("favicon.svg", request.scope)
        response.headers["Content-Type"] = "image/svg+xml"
        return response

    router.include_router(ui, include_in_schema=False)
    return router
