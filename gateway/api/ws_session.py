"""WebSocket session plumbing shared by producer, consumer and reader handlers.

Owns: handshake refusal with an HTTP status and JSON reason, the outbound
frame writer (``Outbound``), closing with a valid close code, and the relay of
a whole session to the gateway that owns the topic. Rules (docs/architecture.md §6-7):
every handler reads the socket in its own loop and writes only through its
``Outbound``, which never blocks the caller: a slow client never blocks the
broker (its frames queue, bounded) and shutdown never hangs; a relay is
transparent: the owner's handshake status and every frame in both directions
pass through unchanged; the caller's per-role session slot is the owner's
(the relay gives its own back once the owner accepted), and so does its close code - except when the owner
vanishes without a close frame (1006): the client is then closed with 4503
("reconnect"), never left hanging. The relay pings the owner every
``RELAY_PING_S``; an owner that does not answer within ``RELAY_PING_TIMEOUT_S``
(paused, partitioned) counts as vanished - time the relay spends waiting on its
own client does not count, since the owner's pong then waits unread behind the
frames the client has not taken, and one that does not answer the relay's
handshake within ``RELAY_OPEN_TIMEOUT_S`` refuses the client 503: a client is never
held longer than that by a gateway cut from the owner (docs/reliability.md §6). The
relay reads at most ``RELAY_QUEUE_FRAMES`` frames ahead of its client: a client that
does not read leaves the owner's frames in TCP, where the owner's delivery budget
bounds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import orjson
import websockets
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from gateway.api.errors import PEER_FAILURES, body, close_code, reason_response, status_of
from gateway.api.ws_outbound import Outbound
from gateway.security.middleware import SESSION_SLOT

if TYPE_CHECKING:
    from gateway.process import Gateway

log = logging.getLogger(__name__)

__all__ = ["Outbound", "accept_and_run", "deny", "deny_status", "read_frames", "relay", "relay_url"]

RELAY_OPEN_TIMEOUT_S = 10.0  # an owner that does not answer the relay's handshake this soon: 503
# (an owner opening a thousand sessions at once takes seconds: this bounds a cut, not load)
RELAY_PING_S = 5.0  # the relay pings the owner gateway this often...
RELAY_PING_TIMEOUT_S = 5.0  # ...and gives it up (client closed 4503) when no pong comes this soon
# (an owner delivering 10,000 messages/s to a thousand sessions answers pings late: not shorter)
RELAY_PING_STEP_S = 0.5  # how often a pending ping looks whether the client holds the relay
RELAY_CLOSE_S = 2.0  # waiting for the owner's close frame
# frames read from the owner and not yet written to the client: past one, the relay stops
# reading the owner's socket (TCP then holds the owner back, whose delivery budget bounds it)
RELAY_QUEUE_FRAMES = (1, 0)


async def deny(websocket: WebSocket, exc: BaseException, prefix: str = "") -> None:
    """Refuse the upgrade with the error's HTTP status and a JSON reason. A bad name
    in the URL is a bad argument here (400, as Pulsar's WebSocket handler answers),
    not the admin API's 412."""
    info = body(exc)
    reason = f"{prefix}{info['reason']}"
    status = 400 if info["code"] == "invalid_name" else status_of(exc)
    if status == 500:  # a defect, not a refusal: leave its traceback in the gateway's log
        log.error("WebSocket upgrade of %s refused with 500: %s", websocket.url.path, reason, exc_info=exc)
    await deny_status(websocket, status, reason, str(info["code"]))


async def deny_status(websocket: WebSocket, status: int, reason: str, code: str) -> None:
    """Refuse the upgrade; a client that already left (it gave up waiting, e.g. while
    etcd was away) is not an error: there is nobody left to tell."""
    with contextlib.suppress(OSError, WebSocketDisconnect):  # uvicorn's ClientDisconnected
        await websocket.send_denial_response(reason_response(status, reason, code))


async def accept_and_run(
    gateway: Gateway, out: Outbound, run: Callable[[], Awaitable[None]], undo: Callable[[], Awaitable[None]]
) -> None:
    """Answer a handshake whose session is already registered, then run the session.
    A client that left before the answer (e.g. it gave up on a paused gateway) has
    the registration undone: no ghost producer, consumer or reader keeps its name."""
    try:
        await out.accept()
    except Exception:
        await undo()
        raise
    gateway.sessions += 1
    try:
        await run()
    finally:
        gateway.sessions -= 1


async def read_frames(out: Outbound, on_frame: Callable[[str], None], *gates: asyncio.Event) -> None:
    """Hand each frame the accepted session receives to ``on_frame``, in order, until the
    connection ends or ``out`` closes; no frame is read while any of ``gates`` is clear.
    Frames already received are handed on in a run, without a loop round each."""
    inbox = out.inbox
    assert inbox is not None, "read_frames runs once the session is accepted"
    pop = inbox.pop
    while not out.closed:
        for gate in gates:
            if not gate.is_set():
                await gate.wait()
        text = pop()
        if text is None:
            if not await inbox.wait():
                return
            continue
        on_frame(text)


def relay_url(http_url: str, path: str, query: dict[str, str]) -> str:
    base = http_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
    params = {**query, "authoritative": "true"}
    return f"{base}{path}?{urlencode(params)}"


async def relay(websocket: WebSocket, url: str) -> None:
    """Carry a whole WebSocket session to the owner gateway at ``url``."""
    try:
        credentials = websocket.headers.get("authorization")  # the owner re-checks the caller
        upstream = await websockets.connect(
            url,
            max_size=None,
            max_queue=RELAY_QUEUE_FRAMES,
            open_timeout=RELAY_OPEN_TIMEOUT_S,
            ping_interval=None,  # keepalive() below: a slow client must not fail the owner
            close_timeout=RELAY_CLOSE_S,
            additional_headers={"Authorization": credentials} if credentials else None,
        )
    except InvalidStatus as exc:
        response = exc.response
        try:
            data = orjson.loads(response.body or b"{}")
            reason, code = str(data.get("reason", "")), str(data.get("code", "relay"))
        except orjson.JSONDecodeError:
            reason, code = (response.body or b"").decode(errors="replace"), "relay"
        await deny_status(websocket, response.status_code, reason, code)
        return
    except PEER_FAILURES as exc:  # unreachable, timed out, or hung up mid-handshake
        await deny(websocket, exc)  # 503 owner_unreachable
        return
    try:
        await websocket.accept()
    except Exception:  # the client left before its handshake was answered: end the owner's session
        await upstream.close()
        raise
    release_slot = websocket.scope.get(SESSION_SLOT)
    if release_slot is not None:  # the owner took the role's session slot: one gateway counts it
        release_slot()

    sending = [False]  # the relay is waiting on its client's socket (the owner is not to blame)

    async def downstream() -> None:
        try:
            async for frame in upstream:
                sending[0] = True
                try:
                    await websocket.send_text(frame if isinstance(frame, str) else frame.decode())
                finally:
                    sending[0] = False
        except ConnectionClosed:
            pass
        code = upstream.close_code or 1000
        reason = upstream.close_reason or ""
        if code in (1006, 1015):  # no close frame: the owner died; 1006 may not be sent on the wire
            code, reason = close_code(503), "owner gateway connection lost; reconnect"
        elif code == 1005:  # a close frame without a code (1005 may not be sent either)
            code = 1000
        with contextlib.suppress(Exception):
            await websocket.close(code if code >= 1000 else 1011, reason)

    async def keepalive() -> None:
        """Ping the owner; one that stays silent ``RELAY_PING_TIMEOUT_S`` while the relay
        is free to read its answer has vanished: drop the link (downstream() then
        closes the client 4503)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(RELAY_PING_S)
            try:
                pong = asyncio.ensure_future(await upstream.ping())
            except ConnectionClosed:
                return
            deadline = loop.time() + RELAY_PING_TIMEOUT_S
            while not pong.done():
                if sending[0]:
                    deadline = loop.time() + RELAY_PING_TIMEOUT_S
                elif loop.time() >= deadline:
                    upstream.transport.abort()
                    return
                await asyncio.wait([pong], timeout=RELAY_PING_STEP_S)

    task = asyncio.get_running_loop().create_task(downstream())
    pinger = asyncio.get_running_loop().create_task(keepalive())
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            text = message.get("text")
            await upstream.send(text if text is not None else message.get("bytes") or b"")
    except ConnectionClosed:  # the owner went away: downstream() closes the client with a valid code
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(task), 5)
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        pinger.cancel()
        await upstream.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
