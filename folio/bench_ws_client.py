"""The benches' fast WebSocket client: picows (framing and masking in C) under asyncio.

Owns: one client session that hands each complete text or binary frame's bytes
to a callback, sends text frames without a coroutine per frame, and reports how
the session ended (its close code, or the callback's own failure). Rule: the
client must not be what limits a row (the peers' clients are C-accelerated
too), so nothing here parses a reply (the caller decodes with orjson) and a
send is one C call that writes to the socket. The callback gets the session a
frame came by, to answer on: frames may arrive in the same read as the
handshake's answer, before ``open_session`` has returned the session to its
caller (a gateway pushes a consumer's backlog at once). Bounded: a frame larger
than ``MAX_FRAME`` ends the session (picows' ``max_frame_size``); compression is
never offered, as the peers' clients.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from picows import WSCloseCode, WSFrame, WSListener, WSMsgType, WSTransport, ws_connect

MAX_FRAME = 64 * 1024 * 1024
CONNECT_S = 15.0
ABNORMAL = 1006  # the connection ended without a close frame (RFC 6455 §7.4.1)


OnFrame = Callable[["FrameSession", bytes], None]


class FrameSession(WSListener):
    """One connection: ``send(bytes)``; every frame in goes to ``on_frame(session, bytes)``;
    ``closed`` resolves with the close code when the session ends; ``failure`` says why the
    client itself ended it (its callback raised), empty when the peer or the network did."""

    def __init__(self, on_frame: OnFrame) -> None:
        self.on_frame = on_frame
        self.transport: WSTransport | None = None
        self.close_code = ABNORMAL
        self.close_reason = ""
        self.failure = ""
        self.closed: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        if kind is WSMsgType.TEXT or kind is WSMsgType.BINARY:
            if self.failure:
                return  # closing after a failed callback: the frames behind it go unread
            try:
                self.on_frame(self, frame.get_payload_as_bytes())
            except Exception as exc:  # the caller's defect: end the session saying so
                self.failure = f"{type(exc).__name__}: {exc}"[:200]
                transport.send_close(WSCloseCode.INTERNAL_ERROR, b"client frame handler failed")
                transport.disconnect()
        elif kind is WSMsgType.CLOSE:
            raw = frame.get_payload_as_bytes()
            self.close_code = int.from_bytes(raw[:2], "big") if len(raw) >= 2 else 1005
            self.close_reason = raw[2:].decode(errors="replace")
            transport.send_close(frame.get_close_code())
            transport.disconnect()

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        if not self.closed.done():
            self.closed.set_result(self.close_code)

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.send(WSMsgType.TEXT, data)

    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.closed.done()

    async def close(self) -> None:
        """Close handshake (code 1000), then wait (bounded) for the connection to end."""
        if self.transport is not None and not self.closed.done():
            self.transport.send_close()
            self.transport.disconnect()
            try:
                await asyncio.wait_for(asyncio.shield(self.closed), 2.0)
            except TimeoutError:
                pass


async def open_session(url: str, on_frame: OnFrame) -> FrameSession:
    """Connect to ``url`` (ws://...); frames in go to ``on_frame`` with their session."""
    _, listener = await ws_connect(
        lambda: FrameSession(on_frame),
        url,
        websocket_handshake_timeout=CONNECT_S,
        max_frame_size=MAX_FRAME,
        enable_auto_pong=True,
    )
    assert isinstance(listener, FrameSession)
    return listener
