"""The gateway's WebSocket server protocol: uvicorn's sans-I/O protocol, made quiet and strict.

Owns: how one WebSocket connection on the gateway's port is served below the
ASGI application (``gateway.main`` gives this class to uvicorn). Rules, each
what a hostile client must not be able to do to the gateway's log:
- a text frame that is not UTF-8 closes the session 1007 with a reason
  saying so, and logs no traceback;
- a refused handshake (a 4xx/5xx answer instead of 101, whether the ASGI
  application or the handshake parser refused it) is logged at INFO with its
  path, status and client, once per client per interval
  (``ws_refusals.RefusalLog``); uvicorn's and the websockets library's own
  per-connection INFO lines are not logged;
- an application that answered the handshake with a refusal, or whose client
  left before the answer, has completed it: no ERROR line (uvicorn logs
  "ASGI callable returned without completing handshake" for both). An
  application that really returns without any answer still logs that ERROR.
- an accepted session whose handler takes its frames (``take_frames``) gets
  them below ASGI: each received text frame is one ``str`` appended to its
  ``FrameInbox`` (no event dict, no ``asyncio.Queue`` round, no pause and
  resume of the socket per read); a binary frame is its text decoded with
  replacement, as the handlers always read it. The inbox holds at most
  ``INBOX_BYTES`` (each frame counted as its length plus ``FRAME_OVERHEAD``)
  before the socket's reading is paused - one read (up to 256 KiB) may land
  past it - and reading resumes once the handler took it below half of that:
  a handler that stops reading leaves the client's frames in TCP. The
  connection's end (close frame, lost connection, shutdown) ends the inbox
  after the frames received before it.
- once the frames are taken, a lone data frame (masked, FIN, text or binary)
  is read by ``protocol.ws_wire`` instead of the websockets library's parser;
  every other frame (ping, pong, close, a fragment) is handed to the library
  whole, so it always stands at a frame boundary, and a header it must judge
  (bad bits, too long) hands it the rest of the connection: its close codes
  are unchanged. Bytes of a frame not complete yet wait here (at most one
  frame, up to the library's ``max_size``, as the library would buffer them).
Everything else (handshake, keepalive, close, write backpressure) is uvicorn's.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, Protocol

from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.http11 import Request
from websockets.protocol import State

from gateway.api.ws_refusals import RefusalLog
from gateway.protocol.ws_wire import OP_TEXT, Stop, read_data_frames

log = logging.getLogger(__name__)

INVALID_UTF8_REASON = "text frame is not valid UTF-8; send text frames in UTF-8 (or binary frames)"
INBOX_BYTES = 256 * 1024  # received frames waiting for their handler: past this, reading pauses
FRAME_OVERHEAD = 64  # a queued frame's cost beside its text (its str object), about
_refusals = RefusalLog()  # one per gateway process: every connection's protocol shares it


class _PerConnectionInfo(logging.Filter):
    """Drops uvicorn's and websockets' per-connection INFO lines (one per handshake)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO:
            return True
        text = str(record.msg)
        return not (text.startswith('%s - "WebSocket %s"') or text.startswith("connection rejected"))


_server_log = logging.getLogger(f"{__name__}.uvicorn")
_server_log.addFilter(_PerConnectionInfo())


def log_refusal(client: str, path: str, status: int, now_ms: int) -> None:
    """Log a refused handshake at INFO, once per client per interval."""
    quiet = _refusals.admit(client, now_ms)
    if quiet is None:
        return
    more = f" ({quiet} more refused since its last logged refusal)" if quiet else ""
    log.info("WebSocket %s refused %d for %s%s", path[:200], status, client, more)


class SocketReading(Protocol):
    """What an inbox needs of its connection: whether reading is paused, and resuming it."""

    read_paused: bool

    def resume_frames(self) -> None: ...


class FrameInbox:
    """The text frames one accepted session received and its handler has not read, in order."""

    def __init__(self, protocol: SocketReading) -> None:
        self._protocol = protocol
        self.frames: deque[str] = deque()
        self.bytes = 0  # the frames' lengths plus ``FRAME_OVERHEAD`` each
        self.ended = False  # the connection ended: no frame follows those in ``frames``
        self._waiter: asyncio.Future[None] | None = None

    def push(self, text: str) -> None:
        self.frames.append(text)
        self.bytes += len(text) + FRAME_OVERHEAD
        self._wake()

    def put_nowait(self, message: Mapping[str, Any]) -> None:
        """uvicorn's own events once the frames are taken: only the connection's end."""
        if message["type"] == "websocket.disconnect":
            self.ended = True
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def pop(self) -> str | None:
        """The next frame, or None when none waits (``wait`` for one)."""
        if not self.frames:
            return None
        text = self.frames.popleft()
        self.bytes -= len(text) + FRAME_OVERHEAD
        if self._protocol.read_paused and self.bytes <= INBOX_BYTES // 2:
            self._protocol.resume_frames()
        return text

    async def wait(self) -> bool:
        """Wait until a frame waits; False once the connection ended and none is left."""
        while not self.frames:
            if self.ended:
                return False
            self._waiter = waiter = asyncio.get_running_loop().create_future()
            await waiter
        return True


class GatewayWebSocketProtocol(WebSocketsSansIOProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.logger = _server_log
        self.conn.logger = _server_log
        self.inbox: FrameInbox | None = None  # set by ``take_frames``: frames bypass ASGI
        self._lean = False  # lone data frames are read by ``ws_wire`` (see the module's rules)
        self._held = bytearray()  # the start of a frame not complete yet (``_lean`` only)
        self._held_need = 0  # bytes ``_held`` must reach before it is worth reading again

    def take_frames(self) -> FrameInbox:
        """From now on, hand this accepted session's frames to the returned inbox (events
        received and not yet read through ASGI go first, in order)."""
        inbox = FrameInbox(self)
        queued, self.queue = self.queue, inbox  # type: ignore[assignment]  # uvicorn's put_nowait only
        while not queued.empty():
            message = queued.get_nowait()
            if message["type"] == "websocket.receive":
                text = message.get("text")
                if text is None:
                    text = (message.get("bytes") or b"").decode("utf-8", "replace")
                inbox.push(text)
            else:
                inbox.put_nowait(message)
        self.inbox = inbox
        self._lean = self._at_frame_boundary()
        if inbox.bytes <= INBOX_BYTES // 2:
            self.resume_frames()
        return inbox

    def resume_frames(self) -> None:
        """Read the socket again (its handler took the inbox below half its bound)."""
        if self.read_paused and not self.close_sent:
            self.read_paused = False
            self.transport.resume_reading()

    def _at_frame_boundary(self) -> bool:
        """Whether the library's parser holds no part of a frame (it waits for the next
        header, its buffer empty) on an open, plain session: frames can be read here."""
        conn = self.conn
        try:
            if self.close_sent or conn.state is not State.OPEN or conn.extensions or conn.reader.buffer:
                return False
            if conn.max_fragment_size is not None:
                return False
            waiting: Any = conn.parser  # the generator chain down to the read it waits in
            while waiting.gi_yieldfrom is not None:
                waiting = waiting.gi_yieldfrom
            return bool(waiting.__name__ == "at_eof")
        except AttributeError:  # another websockets version's internals: its parser reads all
            return False

    def data_received(self, data: bytes) -> None:
        """Read the lone data frames here, hand every other frame to the library whole."""
        if not self._lean:
            super().data_received(data)
            if self.inbox is not None and self._at_frame_boundary():
                self._lean = True  # frames taken while the library held part of one
            return
        held = self._held
        if held:
            held += data
            if len(held) < self._held_need:
                return
            data = bytes(held)
            held.clear()
        conn = self.conn
        max_size = conn.max_message_size if conn.max_message_size is not None else sys.maxsize
        pos = 0
        while self._lean:
            if self.close_sent or conn.state is not State.OPEN:
                self._lean = False
                break
            scan = read_data_frames(data, pos, max_size, conn.current_size is None)
            if scan.frames and not self._push(scan.frames):
                return
            pos = scan.end
            if scan.stop is Stop.MORE:
                if pos < len(data):
                    held += data[pos:]
                    self._held_need = scan.frame_end
                return
            if scan.stop is Stop.INVALID:
                self._lean = False
                break
            super().data_received(data[pos : scan.frame_end])
            pos = scan.frame_end
        if pos < len(data):
            super().data_received(data[pos:])

    def _push(self, frames: list[tuple[int, bytes]]) -> bool:
        """Put read frames in the inbox; False if one was not UTF-8 (the session closes 1007)."""
        inbox = self.inbox
        assert inbox is not None
        push = inbox.push
        for opcode, payload in frames:
            if opcode == OP_TEXT:
                try:
                    push(payload.decode())
                except UnicodeDecodeError:
                    self._lean = False
                    self.conn.send_close(1007, INVALID_UTF8_REASON)
                    self.handle_parser_exception()
                    return False
            else:
                push(payload.decode("utf-8", "replace"))
        if inbox.bytes > INBOX_BYTES and not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()
        return True

    def _refused(self, status: int) -> None:
        client = self.client[0] if self.client else "?"
        path = str(getattr(self, "scope", {}).get("path", "")) or "?"
        log_refusal(client, path, status, _now_ms())

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        if self.response.status_code != 101:  # the handshake itself was malformed
            client = self.client[0] if self.client else "?"
            log_refusal(client, event.path.partition("?")[0], self.response.status_code, _now_ms())

    async def send(self, message: Any) -> None:
        if not self.handshake_complete and self.initial_response is None and not self.disconnected:
            kind = message["type"]
            if kind == "websocket.http.response.start":
                self._refused(int(message["status"]))
            elif kind == "websocket.close":
                self._refused(403)
        await super().send(message)

    def send_receive_event_to_app(self) -> None:
        """uvicorn's, with a text frame decoded once and a bad one closed 1007 quietly."""
        data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
        self.frames = []
        if self.close_sent:  # past the close: reads stay on until the peer's close reply
            return
        inbox = self.inbox
        if inbox is not None:
            if self.curr_msg_data_type != "text":
                inbox.push(data.decode("utf-8", "replace"))
            else:
                try:
                    inbox.push(data.decode())
                except UnicodeDecodeError:
                    self.conn.send_close(1007, INVALID_UTF8_REASON)
                    self.handle_parser_exception()
                    return
            if inbox.bytes > INBOX_BYTES and not self.read_paused:
                self.read_paused = True
                self.transport.pause_reading()
            return
        if self.curr_msg_data_type == "text":
            try:
                self.queue.put_nowait({"type": "websocket.receive", "text": data.decode()})
            except UnicodeDecodeError:
                self.conn.send_close(1007, INVALID_UTF8_REASON)
                self.handle_parser_exception()
                return
        else:
            self.queue.put_nowait({"type": "websocket.receive", "bytes": data})
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    async def run_asgi(self) -> None:
        try:
            result = await self.app(self.scope, self.receive, self.send)
        except ClientDisconnected:
            pass
        except BaseException:
            self.logger.exception("Exception in ASGI application\n")
            self.send_500_response()
        else:
            answered = self.handshake_complete or self.initial_response is not None or self.close_sent
            if not answered and not self.disconnected:
                self.logger.error("ASGI callable returned without completing handshake.")
                self.send_500_response()
            elif result is not None:
                self.logger.error("ASGI callable should return None, but returned '%s'.", result)
        if self.close_timer is None:
            self.transport.close()


def _now_ms() -> int:
    return int(time.monotonic() * 1000)
