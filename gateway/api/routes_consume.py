"""HTTP consume routes: fetch, ack and nack over plain HTTP, and the event stream.

Owns: ``GET /consume/...`` (messages delivered to an HTTP consumer, waiting up
to ``waitMs`` when none is ready), ``POST .../ack`` and ``.../nack``, and adds
the server-sent events route (``sse_consume``). Rules (docs/compatibility.md
§2): ids go out in base64 as WebSocket consumers get them and come back in
base64 or ``ledger:entry:partition[:batch]``; a non-owner forwards to the
owner; an HTTP consumer belongs to the role that attached it (another role's
ack is a 409); ids that match nothing pending are answered as ``unmatched``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.api import route_docs as docs
from gateway.api.errors import error_response, reason_response
from gateway.api.http_consume import HttpConsumers, pull_params, settle
from gateway.api.http_io import ACK_BODY_MAX, JSON, json_response, read_body
from gateway.api.route_docs import (
    Authoritative,
    ConsumePath,
    ConsumeRef,
    ConsumerNameQuery,
    ConsumerQuery,
    Max,
    Wait,
)
from gateway.api.sse_consume import add_stream_route
from gateway.api.wire_mapping import delivery_frames, position_of
from gateway.broker.topic import Topic
from gateway.errors import GatewayError
from gateway.names import InvalidName, TopicName, check_subscription
from gateway.protocol.params import parse_authoritative
from gateway.protocol.rest import fetch_response, id_texts, parse_ack_body
from gateway.routing import Peer
from gateway.security.middleware import role_of
from storage.formats.errors import FormatError

if TYPE_CHECKING:
    from gateway.process import Gateway


def add_consume_routes(router: APIRouter, gateway: Gateway, consumers: HttpConsumers) -> None:
    async def _serve(name: TopicName, query: dict[str, str]) -> Topic | Peer:
        return await gateway.router.serve(name, authoritative=parse_authoritative(query))

    @router.get(
        "/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}",
        dependencies=[ConsumerQuery],
        **docs.FETCH,
    )
    async def fetch(
        at: ConsumePath,
        request: Request,
        max: Max = 100,
        waitMs: Wait = 5000,
    ) -> Response:
        """Messages delivered to this HTTP consumer (ids in base64, as WebSocket consumers get
        them); ack or nack them by id (base64 or ``ledger:entry:partition[:batch]``). Waits up
        to ``waitMs`` when none is ready."""
        query = dict(request.query_params)
        try:
            name = at.topic_name()
            subscription = check_subscription(at.subscription)
            params = pull_params(query)
            where = await _serve(name, query)
            if isinstance(where, Peer):
                return await gateway.forwarder.replay(where, request, b"")
            key = (str(name), subscription, params.consumer_name or "http")
            consumer = await consumers.attach(key, where, params, owner=role_of(request.scope))
            consumer.last_used_ms = consumers.now_ms()
            got = await consumer.fetch(max, waitMs)
            consumer.last_used_ms = consumers.now_ms()
        except (GatewayError, FormatError, InvalidName) as exc:
            return error_response(exc)
        return Response(fetch_response(delivery_frames(got, where.partition)), media_type=JSON)

    async def _settle(at: ConsumeRef, request: Request, nack: bool) -> Response:
        query = dict(request.query_params)
        try:
            body = await read_body(request, ACK_BODY_MAX)
            name = at.topic_name()
            subscription = at.subscription
            ids = parse_ack_body(body)
            where = await _serve(name, query)
            if isinstance(where, Peer):
                return await gateway.forwarder.replay(where, request, body)
            consumer = consumers.get((str(name), subscription, query.get("consumerName", "http")))
            if consumer is not None and consumer.owner != role_of(request.scope):
                return reason_response(409, "this HTTP consumer belongs to another role", "consumer_busy")
            sub = where.subscriptions.get(subscription)
            if sub is None:
                return reason_response(404, f"subscription {subscription} does not exist", "not_found")
            consumer_id = consumer.consumer_id if consumer is not None else 0
            texts = id_texts(body)
            found = [position_of(i, where.partition) for i in ids]
            unmatched = settle(sub, consumer_id, texts, found, nack)
        except (GatewayError, FormatError, InvalidName) as exc:
            return error_response(exc)
        return json_response(
            {"nacked" if nack else "acked": len(texts) - len(unmatched), "unmatched": unmatched}
        )

    def settle_route(nack: bool) -> Callable[..., Awaitable[Response]]:
        async def endpoint(
            at: ConsumePath,
            request: Request,
            consumerName: ConsumerNameQuery = None,
            authoritative: Authoritative = False,
        ) -> Response:
            return await _settle(at, request, nack)

        return endpoint

    # .../{subscription}/ack and .../nack: one route each, named (and so given an operationId) by its verb
    for verb, nack, verb_docs in (("ack", False, docs.ACK), ("nack", True, docs.NACK)):
        path = f"/consume/{{domain}}/{{tenant}}/{{namespace}}/{{topic}}/{{subscription}}/{verb}"
        router.post(path, name=verb, **verb_docs)(settle_route(nack))

    add_stream_route(router, consumers, _serve)  # .../{subscription}/stream: server-sent events
