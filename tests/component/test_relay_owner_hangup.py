"""An owner gateway that hangs up in the middle of a relayed WebSocket handshake.

The relay (gateway/api/ws_session.py) opens the owner's session before it
answers the client; an owner that accepts the TCP connection and closes it
before sending its HTTP status (it is dying, or its listener is being torn
down) makes websockets raise ``InvalidMessage``, not an ``OSError``. The
client must be refused like for an unreachable owner, 503 ``owner_unreachable``
(errors.PEER_FAILURES), so it retries; before, the exception escaped the
handler and the client got a bare 500. A real uvicorn (with the gateway's
WebSocket protocol) serves the relay; the "owner" is a TCP listener that reads
the upgrade request and hangs up.
"""

from __future__ import annotations

import asyncio
import contextlib

import orjson
import pytest
import uvicorn
import websockets
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket
from websockets.exceptions import InvalidStatus

from gateway.api.ws_session import relay

pytestmark = pytest.mark.component


async def test_an_owner_hanging_up_mid_handshake_is_refused_503() -> None:
    hung_up = 0

    async def owner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal hung_up
        await reader.readuntil(b"\r\n\r\n")  # the whole upgrade request, then no answer
        hung_up += 1
        writer.close()

    listener = await asyncio.start_server(owner, "127.0.0.1", 0)
    owner_port = listener.sockets[0].getsockname()[1]

    async def relayed(websocket: WebSocket) -> None:
        await relay(websocket, f"ws://127.0.0.1:{owner_port}/ws/v2/producer/persistent/public/default/t")

    app = Starlette(routes=[WebSocketRoute("/ws", relayed)])
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, ws="websockets-sansio", log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    task = asyncio.get_running_loop().create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        with pytest.raises(InvalidStatus) as refused:  # before: HTTP 500, the exception unhandled
            await websockets.connect(f"ws://127.0.0.1:{port}/ws", open_timeout=10)
        response = refused.value.response
        assert response.status_code == 503, response
        assert orjson.loads(response.body or b"{}")["code"] == "owner_unreachable", response.body
        assert hung_up == 1
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
        listener.close()
