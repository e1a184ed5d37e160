"""The gateway's FastAPI application: routes, error handlers, metrics, lifecycle.

Owns: assembling the ASGI app from the routers (messaging, admin) around one
``Gateway``. Rule: every typed error that escapes a route becomes a JSON
``{"reason", "code"}`` response with the status from ``gateway.api.errors``;
nothing else formats errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from coordination.errors import CoordinationError
from gateway.api import admin_namespaces, routes, ws_fastpath
from gateway.api.errors import error_response
from gateway.api.gateway import Gateway
from gateway.api.metrics import registry_for
from gateway.errors import GatewayError
from storage.errors import StorageError


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
    )
    messaging = routes.make_router(lambda: gateway)
    app.include_router(messaging)
    ws_fastpath.install(app, messaging.ws_handlers)  # type: ignore[attr-defined]
    app.include_router(admin_namespaces.make_router(lambda: gateway.namespaces, gateway.unload_namespace))

    @app.exception_handler(GatewayError)
    async def gateway_error(_request: Request, exc: GatewayError) -> Response:
        return error_response(exc)

    @app.exception_handler(CoordinationError)
    async def coordination_error(_request: Request, exc: CoordinationError) -> Response:
        return error_response(exc)

    @app.exception_handler(StorageError)
    async def storage_error(_request: Request, exc: StorageError) -> Response:
        return error_response(exc)

    registry = registry_for(gateway)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
