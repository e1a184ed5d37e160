"""Several outbound WebSocket text frames in one socket write, and the received frames' inbox.

Owns: finding the gateway's sans-I/O protocol object (``ws_server``) behind a
Starlette ``WebSocket``, writing a run of text frames with one
``transport.write``, and taking the session's received frames below ASGI
(``take_frames``: ``ws_server.FrameInbox``).
Rules: the frames are exactly what uvicorn's ASGI send would write (the
websockets library's ``ServerProtocol.send_text``), only joined: one write (one
syscall) per burst instead of one per frame. On a plain open session (no
extension) they are built by ``protocol.ws_wire.text_frames``, the same bytes
without a library frame object each; else by the library itself. It is used
only while uvicorn itself would write at once (handshake accepted, nothing
closing, transport not paused); otherwise ``ready`` is False
and the caller goes through the ASGI send, which waits or raises as uvicorn
decides. Any other ASGI server (or a wrapped ``send``) simply has no writer.
"""

from __future__ import annotations

from starlette.websockets import WebSocket, WebSocketState
from websockets.exceptions import InvalidState
from websockets.protocol import State

from gateway.api.ws_server import FrameInbox, GatewayWebSocketProtocol
from gateway.protocol.ws_wire import text_frames


class FrameWriter:
    def __init__(self, websocket: WebSocket, protocol: GatewayWebSocketProtocol) -> None:
        self._websocket = websocket
        self._protocol = protocol

    @classmethod
    def of(cls, websocket: WebSocket) -> FrameWriter | None:
        """The writer for an accepted ``websocket``, or None when its server is not
        the gateway's protocol (or ``send`` is wrapped)."""
        protocol = getattr(getattr(websocket, "_send", None), "__self__", None)
        if not isinstance(protocol, GatewayWebSocketProtocol):
            return None
        return cls(websocket, protocol)

    def ready(self) -> bool:
        """Whether uvicorn would write a frame right now (else use the ASGI send)."""
        p = self._protocol
        try:
            return (
                p.handshake_complete
                and not p.close_sent
                and not p.disconnected
                and p.initial_response is None
                and p.writable.is_set()
                and self._websocket.application_state is WebSocketState.CONNECTED
            )
        except AttributeError:  # another uvicorn version's internals: use the ASGI send
            return False

    def take_frames(self) -> FrameInbox:
        """The session's received frames from now on, without ASGI receive events."""
        return self._protocol.take_frames()

    def buffered(self) -> int:
        """Bytes written and still in the transport's buffer (not yet taken by the kernel)."""
        try:
            return int(self._protocol.transport.get_write_buffer_size())
        except (AttributeError, RuntimeError):  # closed transport
            return 0

    def abort(self) -> None:
        """Drop the connection now, and whatever its transport still holds."""
        self._protocol.transport.abort()

    def write(self, frames: list[bytes]) -> None:
        """Write ``frames`` (UTF-8 text) in order with one socket write. Raises the
        library's ``InvalidState`` if the connection is closing."""
        p = self._protocol
        conn = p.conn
        if conn.extensions or conn.expect_continuation_frame:
            for frame in frames:
                conn.send_text(frame)
            p.transport.write(b"".join(conn.data_to_send()))
            return
        if conn.state is not State.OPEN:
            raise InvalidState(f"connection is {conn.state.name.lower()}")
        earlier = conn.data_to_send()  # the library's own frames go first (none, normally)
        data = text_frames(frames)
        p.transport.write(b"".join([*earlier, data]) if earlier else data)
