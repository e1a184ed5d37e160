"""The outbound side of one WebSocket session: frames out, in order, without a task.

Owns: ``Outbound``, the only writer of a session's socket, and its handle on
the session's received frames once accepted (``inbox``: ``ws_server.FrameInbox``,
read by ``ws_session.read_frames``). Rules:
- ``send`` never blocks its caller (the broker) and costs no task switch: a
  frame is written by the protocol's own connection object while the
  transport takes data;
- the frames of one loop round (e.g. the acks of every entry a storage reply
  completed) are written at the end of the round with one socket write
  (``ws_writer.FrameWriter``), in order; a consumer's delivery is written at
  once as one burst (``flush``, or ``send_burst``: straight to the socket when
  nothing waits, without queueing each frame);
- only when a send suspends (the transport paused writing: a slow client) is
  it resumed from its future's callback; later frames queue behind it;
  ``pending_bytes`` (queued + in the transport's buffer) is what a consumer
  session reports to the gateway's delivery budget (delivery_budget.py), which
  pauses its deliveries or closes it (``close_slow``: 4429, queued frames dropped);
- a frame that has to wait is copied to its exact size first: orjson's output
  keeps a buffer many times its length (12 KiB for a 1.4 KiB frame), which
  a slow client's queue would otherwise pin;
- frames sent before the handshake is accepted (``accept``) wait for it; the
  close frame goes after every frame queued before it; ``finish`` gives a stuck
  client ``FINISH_S`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Coroutine
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from gateway.api.errors import close_code
from gateway.api.ws_server import FrameInbox
from gateway.api.ws_writer import FrameWriter

log = logging.getLogger(__name__)

FINISH_S = 5.0  # a closing session waits this long for its last frames to go out
SLOW_CLOSE_S = 2.0  # a client closed as slow has this long to read up to the close frame
_CLOSE = object()


class Outbound:
    """The only writer of one WebSocket: frames go out in order, without a task."""

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket
        self.pending: deque[object] = deque()
        self.closed = False  # takes no more frames
        self.close_code = 1000
        self.close_reason = ""
        self.queued_bytes = 0  # bytes of the frames in ``pending``
        self._open = False  # frames wait until the handshake is accepted (``accept``)
        self._writer: FrameWriter | None = None  # one socket write for many frames (uvicorn)
        self.inbox: FrameInbox | None = None  # the received frames, once accepted
        self._in_round = False  # a frame went out this loop round: later ones wait for its end
        self._stalled: Coroutine[Any, Any, None] | None = None  # a send waiting for the transport
        self._stopped = asyncio.Event()  # the close frame went out, or the connection failed

    async def accept(self) -> None:
        """Accept the handshake and take the session's received frames (below ASGI);
        frames queued before it go out now."""
        await self.websocket.accept()
        writer = FrameWriter.of(self.websocket)
        if writer is None:
            raise RuntimeError("WebSocket sessions are served by the gateway's own protocol (ws_server)")
        self._writer = writer
        self.inbox = writer.take_frames()
        self._open = True
        self._pump()

    def send(self, frame: bytes) -> None:
        if self.closed:
            return
        frame = memoryview(frame).tobytes()  # it waits: orjson's output holds ~8x its length (4 KiB for 86)
        self.pending.append(frame)
        self.queued_bytes += len(frame)
        if self._stalled is None and not self._in_round and self._open:
            self._in_round = True  # the round's frames go out together at its end (one write)
            asyncio.get_running_loop().call_soon(self._end_round)

    def send_burst(self, frames: list[bytes]) -> None:
        """Send ``frames`` now, in order behind whatever waits: one socket write when nothing
        waits and the socket takes data (the frames are not copied: they do not wait),
        else queued as ``send`` does and flushed."""
        if self.closed:
            return
        writer = self._writer
        if (
            writer is not None
            and not self.pending
            and self._stalled is None
            and self._open
            and not self._stopped.is_set()
            and writer.ready()
        ):
            try:
                writer.write(frames)
            except Exception:  # InvalidState: the connection is closing
                self._fail()
            return
        for frame in frames:
            self.send(frame)
        self.flush()

    def pending_bytes(self) -> int:
        """Bytes taken and not yet written to the socket: queued here or in the transport."""
        return self.queued_bytes + (self._writer.buffered() if self._writer is not None else 0)

    def close_slow(self, reason: str) -> None:
        """Close a client that does not keep up (4429): the frames it has not been sent are
        dropped (their messages are unacked and go to it or others again), only the close
        frame follows what the transport already holds."""
        if self.closed:
            return
        self.pending.clear()
        self.queued_bytes = 0
        self.close(close_code(429), reason)
        asyncio.get_running_loop().call_later(SLOW_CLOSE_S, self._drop_if_stuck)

    def _drop_if_stuck(self) -> None:
        """A client closed as slow that has not read up to the close frame in ``SLOW_CLOSE_S``
        loses its connection (what the transport still holds is dropped)."""
        if not self._stopped.is_set() and self._writer is not None:
            self._writer.abort()

    def received_waiting(self) -> int:
        """Frames received and not yet read."""
        return len(self.inbox.frames) if self.inbox is not None else 0

    def flush(self) -> None:
        """Write what waits for the end of this round now (one socket write): a delivery's
        frames go out as one burst, instead of waiting in memory while the same loop round
        serves every other consumer of a hot topic."""
        if self._stalled is None and self.pending:
            self._pump()

    def _end_round(self) -> None:
        self._in_round = False
        if self._stalled is None:
            self._pump()

    def close(self, code: int, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.close_code = code
        self.close_reason = reason[:120]
        self.pending.append(_CLOSE)
        if self._stalled is None:
            self._pump()

    def _pump(self) -> None:
        pending = self.pending
        ws = self.websocket
        writer = self._writer
        while pending and self._open and self._stalled is None and not self._stopped.is_set():
            if writer is not None and pending[0] is not _CLOSE and writer.ready():
                frames: list[bytes] = []
                while pending and pending[0] is not _CLOSE:
                    frames.append(pending.popleft())  # type: ignore[arg-type]  # only _CLOSE is not bytes
                self.queued_bytes -= sum(map(len, frames))
                try:
                    writer.write(frames)
                except Exception:  # InvalidState: the connection is closing
                    self._fail()
                continue
            item = pending.popleft()
            if item is _CLOSE:
                self._step(self._close_socket())
            else:
                assert isinstance(item, bytes)
                self.queued_bytes -= len(item)
                self._step(ws.send_text(item.decode()))

    def _step(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` until it completes or suspends (then resume it from its future)."""
        try:
            awaited = coro.send(None)
        except StopIteration:
            self._stalled = None
            return
        except (WebSocketDisconnect, RuntimeError, ConnectionError, OSError):
            self._stalled = None
            self._fail()
            return
        except Exception:
            log.exception("WebSocket send failed")
            self._stalled = None
            self._fail()
            return
        self._stalled = coro
        if isinstance(awaited, asyncio.Future):
            awaited._asyncio_future_blocking = False  # as asyncio.Task does
            awaited.add_done_callback(self._resume)
        else:  # a bare yield (asyncio.sleep(0)): try again next round
            asyncio.get_running_loop().call_soon(self._resume, None)

    def _resume(self, _awaited: object) -> None:
        coro = self._stalled
        if coro is None:
            return
        self._step(coro)
        if self._stalled is None:
            self._pump()

    async def _close_socket(self) -> None:
        ws = self.websocket
        if ws.client_state is WebSocketState.CONNECTED and ws.application_state is WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):
                await ws.close(self.close_code, self.close_reason)
        self._stopped.set()

    def _fail(self) -> None:
        self.closed = True
        self.pending.clear()
        self.queued_bytes = 0
        self._stopped.set()

    async def finish(self) -> None:
        """Send what is queued and a close frame (the client went away or the handler ends);
        gives a stuck client ``FINISH_S`` seconds."""
        if not self.closed:
            self.closed = True
            self.pending.append(_CLOSE)
            if self._stalled is None:
                self._pump()
        if self._open:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), FINISH_S)
        stalled, self._stalled = self._stalled, None
        if stalled is not None:
            stalled.close()
        self.pending.clear()
        self.queued_bytes = 0
        self._stopped.set()
