"""ASGI middleware that hands ``/ws/v2/...`` sessions straight to their handlers.

Owns: the dispatch of WebSocket v2 paths to the producer/consumer/reader
handlers without the router and exception middleware layers, which otherwise
wrap every frame sent and received. Rule: the same handlers and the same path
rules as the routes in routes.py (segments are URL-decoded; a path with the
wrong number of segments is refused with 404); anything else passes through.
A session whose client left (``ClientDisconnected``, ``WebSocketDisconnect``
escaping its handler: it gave up while the gateway was paused) logs one INFO
line, no traceback; any other escaping exception logs its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import unquote

from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect
from uvicorn.protocols.utils import ClientDisconnected

from gateway.api.errors import reason_response

log = logging.getLogger(__name__)

WsHandler = Callable[..., Awaitable[None]]
SEGMENTS = {"producer": 4, "consumer": 5, "reader": 4, "pingpong": 0}


class WebSocketFastPath:
    def __init__(self, app: ASGIApp, handlers: Mapping[str, WsHandler]) -> None:
        self.app = app
        self.handlers = handlers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket" or not scope["path"].startswith("/ws/v2/"):
            await self.app(scope, receive, send)
            return
        parts = scope["path"].split("/")[3:]
        kind, args = (parts[0], [unquote(p) for p in parts[1:]]) if parts else ("", [])
        handler = self.handlers.get(kind)
        websocket = WebSocket(scope, receive, send)
        if handler is None or len(args) != SEGMENTS.get(kind, -1):
            await websocket.send_denial_response(
                reason_response(404, f"no WebSocket endpoint at {scope['path'][:200]}", "not_found")
            )
            return
        try:
            await handler(websocket, *args)
        except (ClientDisconnected, WebSocketDisconnect):
            # the client left (it gave up on a paused or slow gateway before its handshake was
            # answered, or mid-session): nobody is left to answer, not a defect - no traceback
            log.info("WebSocket session on %s failed: the client left", scope["path"][:200])
        except Exception:
            log.exception("WebSocket session on %s failed", scope["path"][:200])
            raise


def install(app: Any, handlers: Mapping[str, WsHandler]) -> None:
    app.add_middleware(WebSocketFastPath, handlers=handlers)
