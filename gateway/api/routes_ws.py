"""WebSocket v2 routes: producer, consumer, reader and ping-pong sessions, served where the topic lives.

Owns: the ``/ws/v2/...`` routes and where each session is served. Rules
(docs/architecture.md §6-7, docs/compatibility.md §1): a session is validated
first (a bad name or parameter is refused before anything is opened); then the
router (``gateway.routing``) is asked once where the topic is: a partitioned
topic's session is served across its partitions' owners; a topic this gateway
owns is served here; any other session is relayed to the owner.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, WebSocket

from gateway.api.ws_partitioned import serve_partitioned_consumer, serve_partitioned_producer
from gateway.api.ws_producer import serve_producer
from gateway.api.ws_session import deny, relay, relay_url
from gateway.api.ws_subscribe import serve_consumer, serve_reader
from gateway.broker.topic import Topic
from gateway.names import TopicName, check_subscription
from gateway.protocol.params import (
    ConsumerParams,
    parse_authoritative,
    parse_consumer_params,
    parse_producer_params,
    parse_reader_params,
)
from gateway.routing import Partitioned, Peer

if TYPE_CHECKING:
    from gateway.process import Gateway

WsHandler = Callable[..., Awaitable[None]]


def add_ws_routes(router: APIRouter, gateway: Gateway) -> dict[str, WsHandler]:
    """Add the WebSocket routes; returns their handlers by kind (for the fast path)."""

    async def _ws_session(
        websocket: WebSocket,
        path: tuple[str, str, str, str],
        parse: Callable[[dict[str, str]], Any],
        partitioned: Callable[[TopicName, int], Awaitable[None]],
        local: Callable[[Topic, Any], Awaitable[None]],
    ) -> None:
        """Validate (the topic name of ``path``, then the query by ``parse``), then serve a
        WebSocket session here, on the partitions' owners, or relay it."""
        query = dict(websocket.query_params)
        try:
            name = TopicName.of(*path)
            params = parse(query)
            where = await gateway.router.locate(name, authoritative=parse_authoritative(query))
        except Exception as exc:
            await deny(websocket, exc)
            return
        if isinstance(where, Partitioned):
            await partitioned(name, where.count)
        elif isinstance(where, Peer):
            await relay(websocket, relay_url(where.url, websocket.url.path, query))
        else:
            await local(where, params)

    @router.websocket("/ws/v2/producer/{domain}/{tenant}/{namespace}/{topic}")
    async def ws_producer(websocket: WebSocket, domain: str, tenant: str, namespace: str, topic: str) -> None:
        await _ws_session(
            websocket,
            (domain, tenant, namespace, topic),
            parse_producer_params,
            lambda name, n: serve_partitioned_producer(gateway, websocket, name, n),
            lambda local, params: serve_producer(gateway, websocket, local, params),
        )

    @router.websocket("/ws/v2/consumer/{domain}/{tenant}/{namespace}/{topic}/{subscription}")
    async def ws_consumer(
        websocket: WebSocket, domain: str, tenant: str, namespace: str, topic: str, subscription: str
    ) -> None:
        def parse(query: dict[str, str]) -> ConsumerParams:
            check_subscription(subscription)
            return parse_consumer_params(query)

        await _ws_session(
            websocket,
            (domain, tenant, namespace, topic),
            parse,
            lambda name, n: serve_partitioned_consumer(gateway, websocket, name, n, subscription),
            lambda local, params: serve_consumer(gateway, websocket, local, subscription, params),
        )

    @router.websocket("/ws/v2/reader/{domain}/{tenant}/{namespace}/{topic}")
    async def ws_reader(websocket: WebSocket, domain: str, tenant: str, namespace: str, topic: str) -> None:
        await _ws_session(
            websocket,
            (domain, tenant, namespace, topic),
            parse_reader_params,
            lambda name, n: serve_partitioned_consumer(gateway, websocket, name, n, None),
            lambda local, params: serve_reader(gateway, websocket, local, params),
        )

    @router.websocket("/ws/v2/pingpong")
    async def ws_pingpong(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
        except Exception:
            return

    return {"producer": ws_producer, "consumer": ws_consumer, "reader": ws_reader, "pingpong": ws_pingpong}
