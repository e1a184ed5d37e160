"""The gateway's FastAPI application: routes, error handlers, metrics, lifecycle.

Owns: assembling the ASGI app from the routers (messaging, admin) around one
``Gateway``. Rule: every typed error that escapes a route becomes a JSON
``{"reason", "code"}`` response with the status from ``gateway.api.errors``;
so does a request FastAPI cannot validate (400, never its 422 shape) and a
request no route matches (Starlette's 404/405); nothing else formats errors.
The OpenAPI document (operation id = function name, tags, no 422s) is shaped
by ``gateway.api.openapi``; the AsyncAPI document of the WebSocket frames is
served next to it at ``/asyncapi.json``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.routing import Match

from coordination.errors import CoordinationError
from gateway import quotas
from gateway.api import (
    admin_analytics,
    admin_cluster,
    admin_namespaces,
    admin_rollups,
    admin_search,
    admin_sql,
    admin_storage,
    admin_topic_permissions,
    admin_topic_schemas,
    admin_topics,
    asyncapi,
    openapi,
    routes,
    ws_fastpath,
)
from gateway.api.errors import error_response, http_error_response, validation_response
from gateway.api.metrics import registry_for
from gateway.api.stored_views import ClientLedgerReads, StoredFigures
from gateway.dashboard import make_router as dashboard_router
from gateway.errors import GatewayError
from gateway.process import Gateway
from gateway.security import access, http_limits, internal, middleware
from gateway.security.guard import Guard
from storage.errors import StorageError
from storage.formats.errors import FormatError

_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """Every method some route serves at the request's path (for a 405's ``Allow``)."""
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in app.router.routes):
            allowed.append(method)
    return allowed


def create_app(gateway: Gateway, *, manage_lifecycle: bool = True) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if manage_lifecycle:
            await gateway.start()
        try:
            yield
        finally:
            await messaging.consumers.close()  # type: ignore[attr-defined]
            if manage_lifecycle:
                await gateway.close()

    app = FastAPI(
        title="Folio gateway",
        version="0.3.0",
        description="Pulsar-compatible REST, WebSocket and admin API of a Folio gateway.",
        lifespan=lifespan,
        generate_unique_id_function=openapi.operation_id,
        openapi_tags=openapi.TAGS,
    )
    openapi.install(app)
    messaging = routes.make_router(gateway)
    app.include_router(messaging)
    app.state.http_consumers = messaging.consumers  # type: ignore[attr-defined]  # main.py ends them
    ws_fastpath.install(app, messaging.ws_handlers)  # type: ignore[attr-defined]
    app.include_router(admin_namespaces.make_router(lambda: gateway.namespaces, gateway.unload_namespace))
    app.include_router(admin_topics.make_router(lambda: gateway))
    app.include_router(admin_topic_permissions.make_router(lambda: gateway.namespaces))
    app.include_router(admin_topic_schemas.make_router(lambda: gateway))
    stored = StoredFigures(gateway.store, ClientLedgerReads(gateway.client), gateway.clock)  # both views'
    app.include_router(admin_cluster.make_router(lambda: gateway, stored))
    app.include_router(admin_storage.make_router(lambda: gateway))
    app.include_router(admin_rollups.make_router(lambda: gateway, stored))
    app.include_router(admin_search.make_router(lambda: gateway))
    app.include_router(admin_analytics.make_router(lambda: gateway))
    app.include_router(admin_sql.make_router(lambda: gateway))
    app.include_router(dashboard_router(gateway.config.gateway_id))
    guard = Guard(
        gateway.config.security,
        lambda: gateway.namespaces,
        peer_urls=gateway.registry.urls,
    )
    middleware.install(app, guard)  # outermost: in front of the WebSocket fast path too
    internal.install(gateway.http, gateway.config.security)
    app.state.guard = guard
    app.include_router(access.make_router(guard))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> Response:
        return validation_response(exc)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # Starlette names only the first matching route's methods
            headers["Allow"] = ", ".join(allowed_methods(app, request))
        return http_error_response(exc.status_code, str(exc.detail), headers)

    @app.exception_handler(GatewayError)
    async def gateway_error(_request: Request, exc: GatewayError) -> Response:
        return error_response(exc)

    @app.exception_handler(FormatError)
    async def format_error(_request: Request, exc: FormatError) -> Response:
        return error_response(exc)

    @app.exception_handler(CoordinationError)
    async def coordination_error(_request: Request, exc: CoordinationError) -> Response:
        return error_response(exc)

    @app.exception_handler(httpx.TransportError)
    async def peer_unreachable(_request: Request, exc: httpx.TransportError) -> Response:
        # forwarding to the owning gateway failed: the client retries (the owner may be
        # dying; its bundles move once its lease expires)
        return error_response(exc)

    @app.exception_handler(StorageError)
    async def storage_error(_request: Request, exc: StorageError) -> Response:
        return error_response(exc)

    asyncapi_document = asyncapi.render()

    @app.get("/asyncapi.json", include_in_schema=False)
    async def asyncapi_json() -> Response:
        return Response(asyncapi_document, media_type="application/json")

    registry = registry_for(gateway)
    http_limits.register(registry)
    for refusals in (middleware.REFUSED, quotas.REFUSED):  # process-wide counters
        registry.register(refusals)
    app.state.metrics_registry = registry

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
