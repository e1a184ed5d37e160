"""Server-sent events consume: a subscription's messages streamed over one HTTP response (Folio extension).

Owns: the ``/consume/.../{subscription}/stream`` route and each stream: an HTTP
consumer of ``http_consume`` (pull mode, the same consumer table, so
``POST .../ack?consumerName=<name>`` acks what a stream delivered). Rules
(docs/compatibility.md §7 row 12: users asked for HTTP consume with SSE; a browser's
``EventSource`` and ``curl -N`` read it as it is):
- the first event (``event: consumer``) names the consumer to ack as (given by
  ``consumerName`` or generated, ``sse-<hex>``; a stream has its consumer to
  itself: a name in use on this gateway is 409); then each message is one
  ``event: message`` whose ``id:`` is its message id and whose ``data:`` is
  the JSON object a WebSocket consumer receives for it;
- credit is granted ``STREAM_FETCH`` messages at a time, once the previous ones
  are written to the socket: a slow reader holds back only its own stream (the
  socket's backpressure), and the subscription's unacked limit per consumer
  bounds what it holds unacked;
- a comment line every ``KEEPALIVE_MS`` of silence keeps proxies from closing an
  idle stream;
- the stream ends after ``maxMessages`` or ``durationMs`` when given, when the
  topic moves or unloads (``EventSource`` reconnects by itself), or when the
  client goes; its consumer is removed then, and what it left unacked is
  redelivered, as for a WebSocket consumer that disconnects;
- a gateway that does not own the topic answers 307 to the owner (Pulsar's REST
  redirect; ``EventSource`` follows it, ``curl`` with ``-L``).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated

import orjson
from fastapi import APIRouter, Query, Request
from starlette.responses import RedirectResponse, Response, StreamingResponse

from gateway.api.errors import error_response
from gateway.api.http_consume import HttpConsumer, HttpConsumers, pull_params
from gateway.api.route_docs import (
    STREAM,
    ConsumePath,
    ConsumerQuery,
)
from gateway.api.wire_mapping import delivery_frames
from gateway.broker.topic import Topic
from gateway.errors import GatewayError
from gateway.names import InvalidName, TopicName, check_subscription
from gateway.routing import Peer
from gateway.security.middleware import role_of
from storage.formats.errors import FormatError

STREAM_FETCH = 100  # credit granted at a time
KEEPALIVE_MS = 15_000
EVENT_STREAM = "text/event-stream"

MaxMessages = Annotated[int, Query(ge=0, description="end the stream after this many messages (0: no limit)")]
Duration = Annotated[
    int, Query(ge=0, le=86_400_000, description="end the stream after this many ms (0: no limit)")
]


def message_events(frames: list[dict[str, object]]) -> bytes:
    """One ``message`` event per delivery frame (its message id as the event id)."""
    return b"".join(
        b"id: %s\nevent: message\ndata: %s\n\n" % (str(frame["messageId"]).encode(), orjson.dumps(frame))
        for frame in frames
    )


async def events(
    consumers: HttpConsumers,
    key: tuple[str, str, str],
    consumer: HttpConsumer,
    max_messages: int,
    duration_ms: int,
) -> AsyncIterator[bytes]:
    """The stream's bytes; removes its consumer when it ends (or the client goes)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + duration_ms / 1000 if duration_ms else None
    sent = 0
    try:
        yield b"event: consumer\ndata: %s\n\n" % orjson.dumps(
            {"consumerName": key[2], "subscription": key[1]}
        )
        while not consumer.closed and (not max_messages or sent < max_messages):
            wait_ms = KEEPALIVE_MS
            if deadline is not None:
                wait_ms = min(wait_ms, int((deadline - loop.time()) * 1000))
                if wait_ms <= 0:
                    break
            want = STREAM_FETCH if not max_messages else min(STREAM_FETCH, max_messages - sent)
            consumer.last_used_ms = consumers.now_ms()
            got = await consumer.fetch(want, wait_ms, refuse=False)  # full budget: keep-alives
            consumer.last_used_ms = consumers.now_ms()
            if got:
                sent += len(got)
                yield message_events(delivery_frames(got, consumer.topic.partition))
            elif not consumer.closed:
                yield b": keep-alive\n\n"
    finally:
        consumers.remove(key, consumer)  # this stream's, not a newer one of that name


def add_stream_route(
    router: APIRouter,
    consumers: HttpConsumers,
    serve: Callable[[TopicName, dict[str, str]], Awaitable[Topic | Peer]],
) -> None:
    @router.get(
        "/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}/stream",
        dependencies=[ConsumerQuery],
        **STREAM,
    )
    async def stream(
        at: ConsumePath,
        request: Request,
        maxMessages: MaxMessages = 0,
        durationMs: Duration = 0,
    ) -> Response:
        """Messages of the subscription as server-sent events, as they arrive; ack them
        with ``POST .../ack?consumerName=`` (the name the first event gives)."""
        query = dict(request.query_params)
        try:
            name = at.topic_name()
            subscription = check_subscription(at.subscription)
            params = pull_params(query)
            where = await serve(name, query)
            if isinstance(where, Peer):
                return RedirectResponse(f"{where.url}{request.url.path}?{request.url.query}", status_code=307)
            key = (str(name), subscription, params.consumer_name or f"sse-{secrets.token_hex(6)}")
            consumer = await consumers.attach(key, where, params, stream=True, owner=role_of(request.scope))
        except (GatewayError, FormatError, InvalidName) as exc:
            return error_response(exc)
        return StreamingResponse(
            events(consumers, key, consumer, maxMessages, durationMs),
            media_type=EVENT_STREAM,
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
