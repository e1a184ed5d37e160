"""WebSocket sessions on a partitioned topic: one client socket, one link per partition.

Owns: the fan-out of a producer, consumer or reader session on a partitioned
topic (``<topic>`` with N partitions) to per-partition sessions on the
gateways owning ``<topic>-partition-i`` (this gateway included, over
loopback). Rules (docs/compatibility.md §1.5, §4.3, §5.2):
- producer routing: a message with a key goes to partition
  ``hash(key) mod N`` (``hashingScheme``: JavaStringHash (default) or
  Murmur3_32Hash); without a key, ``SinglePartition`` (default) sends every
  message of the session to one partition chosen at random, and
  ``RoundRobinPartition`` rotates; replies carry the client's own ``context``;
- consumer: every partition's messages are forwarded as they come (ids carry
  the partition); acks, nacks and cumulative acks go to the partition named in
  the id; permits, seeks and unsubscribe go to every partition;
- any partition's handshake failure refuses the whole session with its status;
  when any link closes, the session closes with that link's code (clients
  reconnect, as with a moved topic).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import orjson
import websockets
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidStatus

from gateway.api.errors import close_code, protocol_close_code
from gateway.api.ws_session import (
    RELAY_CLOSE_S,
    RELAY_OPEN_TIMEOUT_S,
    RELAY_PING_S,
    RELAY_PING_TIMEOUT_S,
    deny,
    deny_status,
    relay_url,
)
from gateway.names import TopicName
from gateway.protocol.errors import WS_FAILED_TO_DESERIALIZE, ProtocolError
from gateway.protocol.json_fields import load_object
from gateway.protocol.ws_commands import (
    Ack,
    AckCumulative,
    IsEndOfTopic,
    Nack,
    parse_command,
)
from gateway.protocol.ws_frames import (
    context_text,
    end_of_topic_reply,
    publish_error,
)
from storage.formats.key_routing import partition_of_key

if TYPE_CHECKING:
    from gateway.process import Gateway


async def _open_links(
    gateway: Gateway, websocket: WebSocket, name: TopicName, partitions: int, kind: str, suffix: str
) -> dict[int, ClientConnection] | None:
    """Connect to every partition's owner; on failure refuse the client's handshake."""
    links: dict[int, ClientConnection] = {}
    query = dict(websocket.query_params)
    try:
        for index in range(partitions):
            part = name.partition(index)
            owner = await gateway.router.owner(part)
            path = f"/ws/v2/{kind}/{part.path}{suffix}"
            links[index] = await websockets.connect(
                relay_url(owner.http_url, path, query),
                max_size=None,
                open_timeout=RELAY_OPEN_TIMEOUT_S,
                ping_interval=RELAY_PING_S,
                ping_timeout=RELAY_PING_TIMEOUT_S,
                close_timeout=RELAY_CLOSE_S,
            )
    except InvalidStatus as exc:
        await _close_all(links)
        response = exc.response
        try:
            data = orjson.loads(response.body or b"{}")
        except orjson.JSONDecodeError:
            data = {}
        await deny_status(
            websocket, response.status_code, str(data.get("reason", "")), str(data.get("code", ""))
        )
        return None
    except Exception as exc:
        await _close_all(links)
        await deny(websocket, exc)
        return None
    return links


async def _accept(websocket: WebSocket, links: dict[int, ClientConnection]) -> None:
    """Answer the client's handshake; a client that already left ends every partition's session."""
    try:
        await websocket.accept()
    except Exception:  # no ghost producer or consumer left on any partition's owner
        await _close_all(links)
        raise


async def _close_all(links: dict[int, ClientConnection]) -> None:
    for link in links.values():
        with contextlib.suppress(Exception):
            await link.close()


class _Fanout:
    """Pumps every link's frames to the client; ends the session when one link ends."""

    def __init__(self, websocket: WebSocket, links: dict[int, ClientConnection]) -> None:
        self.websocket = websocket
        self.links = links
        self.done = asyncio.Event()
        self.close_code = 1000
        self.close_reason = ""
        self.send_lock = asyncio.Lock()
        self.tasks = [asyncio.get_running_loop().create_task(self._pump(link)) for link in links.values()]

    def rewrite(self, frame: str) -> str | None:
        return frame

    async def _pump(self, link: ClientConnection) -> None:
        try:
            async for frame in link:
                text = frame if isinstance(frame, str) else frame.decode()
                out = self.rewrite(text)
                if out is not None:
                    await self.websocket.send_text(out)
        except (ConnectionClosed, RuntimeError, WebSocketDisconnect):
            pass
        if not self.done.is_set():
            code = link.close_code
            if code is None or code in (1005, 1006, 1015):  # no close frame: the owner vanished
                self.close_code = close_code(503)
                self.close_reason = "a partition's owner was lost; reconnect"
            else:
                self.close_code = code
                self.close_reason = link.close_reason or "a partition's session ended; reconnect"
            self.done.set()

    async def client_frames(self) -> asyncio.Queue[str | None]:
        queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=1000)

        async def reader() -> None:
            try:
                while True:
                    message = await self.websocket.receive()
                    if message["type"] == "websocket.disconnect":
                        break
                    text = message.get("text")
                    if text is None:
                        text = (message.get("bytes") or b"").decode("utf-8", "replace")
                    await queue.put(text)
            except (WebSocketDisconnect, RuntimeError):
                pass
            await queue.put(None)

        self.tasks.append(asyncio.get_running_loop().create_task(reader()))
        return queue

    async def run(self, handle: Callable[[str], Awaitable[bool]]) -> None:
        """Feed every client frame to ``handle`` (False: stop) until the client or a link ends."""
        frames = await self.client_frames()
        client_gone = False
        try:
            while True:
                text, client_gone = await _next(frames, self.done)
                if text is None or not await handle(text):
                    break
        except ConnectionClosed:
            pass
        except Exception:  # a defect: the client must not take it for a normal close
            self.close_code, self.close_reason = close_code(500), "internal error"
            raise  # logged by ws_fastpath
        finally:
            await self.finish(client_gone)

    async def finish(self, client_gone: bool) -> None:
        for task in self.tasks:
            task.cancel()
        await _close_all(self.links)
        if not client_gone:
            with contextlib.suppress(Exception):
                await self.websocket.close(
                    self.close_code if self.close_code >= 1000 else 4503, self.close_reason
                )


async def _next(queue: asyncio.Queue[str | None], done: asyncio.Event) -> tuple[str | None, bool]:
    """The next client frame, or (None, True) when the client left, (None, False) when a link ended."""
    get = asyncio.ensure_future(queue.get())
    wait_done = asyncio.ensure_future(done.wait())
    finished, _ = await asyncio.wait({get, wait_done}, return_when=asyncio.FIRST_COMPLETED)
    if get in finished:
        wait_done.cancel()
        item = get.result()
        return item, item is None
    get.cancel()
    return None, False


async def serve_partitioned_producer(
    gateway: Gateway, websocket: WebSocket, name: TopicName, partitions: int
) -> None:
    links = await _open_links(gateway, websocket, name, partitions, "producer", "")
    if links is None:
        return
    await _accept(websocket, links)
    query = websocket.query_params
    round_robin = query.get("messageRoutingMode") == "RoundRobinPartition"
    scheme = query.get("hashingScheme", "JavaStringHash")
    single = random.randrange(partitions)
    rotation = itertools.count(single)
    ids = itertools.count()
    contexts: dict[str, str | None] = {}
    fanout = _Fanout(websocket, links)

    def rewrite(frame: str) -> str | None:
        reply = orjson.loads(frame)
        original = contexts.pop(str(reply.get("context")), None)
        if original is None:
            reply.pop("context", None)
        else:
            reply["context"] = original
        return orjson.dumps(reply).decode()

    fanout.rewrite = rewrite  # type: ignore[method-assign]

    async def handle(text: str) -> bool:
        try:
            obj = load_object(text)
        except ProtocolError as exc:
            await websocket.send_text(publish_error(exc.ws_code, exc.message, None).decode())
            return True
        try:
            context = context_text(obj.get("context"))
        except ProtocolError as exc:
            await websocket.send_text(publish_error(exc.ws_code, exc.message, None).decode())
            return True
        if obj.get("type") == "batch":
            message = "batch frames are not routed on partitioned topics; publish to a partition"
            await websocket.send_text(publish_error(WS_FAILED_TO_DESERIALIZE, message, None).decode())
            return True
        key = obj.get("key")
        if isinstance(key, str):
            index = partition_of_key(key, partitions, scheme)
        elif round_robin:
            index = next(rotation) % partitions
        else:
            index = single
        internal = str(next(ids))
        contexts[internal] = context
        obj["context"] = internal
        await links[index].send(orjson.dumps(obj).decode())
        return True

    await fanout.run(handle)


async def serve_partitioned_consumer(
    gateway: Gateway, websocket: WebSocket, name: TopicName, partitions: int, subscription: str | None
) -> None:
    kind = "reader" if subscription is None else "consumer"
    suffix = "" if subscription is None else f"/{subscription}"
    links = await _open_links(gateway, websocket, name, partitions, kind, suffix)
    if links is None:
        return
    await _accept(websocket, links)
    fanout = _Fanout(websocket, links)

    async def handle(text: str) -> bool:
        try:
            command = parse_command(text)
        except ProtocolError as exc:
            fanout.close_code, fanout.close_reason = (
                protocol_close_code(exc.ws_code),
                exc.message,
            )
            return False
        if isinstance(command, Ack | Nack):
            by_partition: dict[int, list[str]] = {}
            for message_id in command.message_ids:
                by_partition.setdefault(message_id.partition, []).append(message_id.to_base64())
            kind_ = "ack" if isinstance(command, Ack) else "negativeAcknowledge"
            for index, id_list in by_partition.items():
                link = links.get(index)
                if link is not None:
                    await link.send(orjson.dumps({"type": kind_, "messageIds": id_list}).decode())
        elif isinstance(command, IsEndOfTopic):
            await websocket.send_text(end_of_topic_reply(False).decode())
        elif isinstance(command, AckCumulative):
            link = links.get(command.message_id.partition)
            if link is not None:
                await link.send(text)
        else:
            for link in links.values():
                await link.send(text)
        return True

    await fanout.run(handle)
