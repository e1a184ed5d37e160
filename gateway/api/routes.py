"""Messaging routes: health and lookup here; WebSocket v2, REST producer and HTTP consume composed.

Owns: the URL surface users publish and consume through (``routes_ws``,
``routes_publish``, ``routes_consume``, ``sse_consume``), and where each
request is served. Rules (docs/architecture.md §6-7, docs/compatibility.md §1-2, §5.2):
- where a topic is served is asked of the gateway's router
  (``gateway.routing``), once per request; a non-owner relays WebSocket
  sessions and forwards REST calls to the owner (``gateway.forwarder``);
- errors go out through ``gateway.api.errors`` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.api import route_docs as docs
from gateway.api.errors import error_response, reason_response
from gateway.api.http_consume import HttpConsumers
from gateway.api.http_io import json_response
from gateway.api.route_docs import (
    Authoritative,
    TopicRefPath,
)
from gateway.api.routes_consume import add_consume_routes
from gateway.api.routes_publish import add_publish_routes
from gateway.api.routes_ws import add_ws_routes
from gateway.errors import GatewayError
from gateway.names import InvalidName
from gateway.protocol.params import parse_authoritative
from storage.formats.errors import FormatError

if TYPE_CHECKING:
    from gateway.process import Gateway


def make_router(gateway: Gateway) -> APIRouter:
    router = APIRouter()
    consumers = HttpConsumers(held=gateway.http_held)

    # ------------------------------------------------------------ health and lookup

    @router.get("/admin/v2/brokers/health", **docs.HEALTH)
    async def health() -> Response:
        if gateway.closing or gateway.session.lost.is_set():
            return reason_response(503, "gateway is closing or lost its etcd session", "unavailable")
        return Response("ok", media_type="text/plain")

    @router.get("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", **docs.LOOKUP)
    async def lookup(at: TopicRefPath, request: Request, authoritative: Authoritative = False) -> Response:
        try:
            name = at.topic_name()
            owner = await gateway.router.owner(name, authoritative=parse_authoritative(request.query_params))
        except (GatewayError, FormatError, InvalidName) as exc:
            return error_response(exc)
        ws = owner.http_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
        tls = owner.http_url.startswith("https://")
        return json_response(
            {
                "brokerUrl": ws,
                "httpUrl": owner.http_url,
                "nativeUrl": ws,
                "brokerUrlTls": ws if tls else None,
                "httpUrlTls": owner.http_url if tls else None,
            }
        )

    @router.get("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/bundle", **docs.LOOKUP_BUNDLE)
    async def lookup_bundle(at: TopicRefPath) -> Response:
        try:
            name = at.topic_name()
            owner = await gateway.router.owner(name)
        except (GatewayError, FormatError, InvalidName) as exc:
            return error_response(exc)
        return json_response(owner.bundle.range.name)

    ws_handlers = add_ws_routes(router, gateway)
    add_publish_routes(router, gateway)
    add_consume_routes(router, gateway, consumers)
    router.consumers = consumers  # type: ignore[attr-defined]
    router.ws_handlers = ws_handlers  # type: ignore[attr-defined]
    return router
