"""Messaging routes: WebSocket v2, REST producer, raw publish, HTTP consume, lookup, health.

Owns: the URL surface users publish and consume through, and where each
request is served. Rules (docs/architecture.md §6-7, docs/compatibility.md §1-2, §5.2):
- any gateway accepts any request; the owner of the topic's bundle serves it;
  a non-owner relays WebSocket sessions and forwards REST calls to the owner
  (with ``authoritative=true`` so the owner never bounces it again);
- a partitioned topic is served by the gateways owning its partitions: REST
  publishes are split per partition (key hash, else round robin) and each part
  is forwarded to its owner;
- errors go out through ``gateway.api.errors`` only.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import TYPE_CHECKING, Annotated, Any

import orjson
from fastapi import APIRouter, Path, Request, WebSocket
from starlette.responses import Response

from gateway.api import forwarding
from gateway.api import route_docs as docs
from gateway.api.convert import delivery_frames, entry_message, position_of
from gateway.api.errors import error_response, reason_response
from gateway.api.http_consume import HttpConsumers, pull_params
from gateway.api.http_io import ACK_BODY_MAX, read_body, rest_message
from gateway.api.metrics import publish_latency
from gateway.api.rest_schemas import apply_schemas
from gateway.api.route_docs import (
    Authoritative,
    ConsumerNameQuery,
    Domain,
    InitialPositionQuery,
    MarkDuplicates,
    Max,
    NackDelayQuery,
    Namespace,
    PartitionedTopic,
    Subscription,
    SubscriptionTypeQuery,
    Tenant,
    TopicPart,
    Wait,
)
from gateway.api.sse_consume import add_stream_route
from gateway.api.ws_consumer import serve_consumer, serve_reader
from gateway.api.ws_partitioned import serve_partitioned_consumer, serve_partitioned_producer
from gateway.api.ws_producer import serve_producer
from gateway.api.ws_session import deny, relay, relay_url
from gateway.broker.topic import Topic
from gateway.broker.topic_types import PublishResult
from gateway.errors import GatewayError
from gateway.names import PARTITIONS_MAX, InvalidName, TopicName, check_subscription
from gateway.protocol.errors import BadRequest
from gateway.protocol.params import (
    parse_consumer_params,
    parse_mark_duplicates,
    parse_producer_params,
    parse_reader_params,
)
from gateway.protocol.rest import (
    ack_error,
    ack_ok,
    fetch_response,
    id_texts,
    parse_ack_body,
    parse_producer_messages,
    parse_raw_headers,
    producer_acks,
)
from gateway.protocol.ws_frames import PublishRequest
from gateway.security.middleware import role_of
from storage.formats.entry_format import EntryMessage
from storage.formats.errors import FormatError
from storage.formats.key_routing import partition_of_key

if TYPE_CHECKING:
    from gateway.api.gateway import Gateway

JSON = "application/json"
_round_robin = itertools.count()


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type=JSON)


def _authoritative(query: dict[str, str]) -> bool:
    return query.get("authoritative", "false").lower() == "true"


def make_router(get_gateway: Any) -> APIRouter:
    router = APIRouter()
    consumers = HttpConsumers()

    def gw() -> Gateway:
        gateway: Gateway = get_gateway()
        return gateway

    async def local_topic(name: TopicName, query: dict[str, str]) -> Topic | str:
        """The loaded topic if this gateway owns it, else the owner's base URL."""
        return await forwarding.local_topic(gw(), name, query)

    # ------------------------------------------------------------ health and lookup

    @router.get("/admin/v2/brokers/health", **docs.HEALTH)
    async def health() -> Response:
        gateway = gw()
        if gateway.closing or gateway.session.lost.is_set():
            return reason_response(503, "gateway is closing or lost its etcd session", "unavailable")
        return Response("ok", media_type="text/plain")

    @router.get("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", **docs.LOOKUP)
    async def lookup(
        domain: Domain,
        tenant: Tenant,
        namespace: Namespace,
        topic: TopicPart,
        request: Request,
        authoritative: Authoritative = False,
    ) -> Response:
        try:
            name = TopicName.of(domain, tenant, namespace, topic)
            owner = await gw().route(name, authoritative=_authoritative(dict(request.query_params)))
        except (GatewayError, FormatError, InvalidName) as exc:
            return error_response(exc)
        ws = owner.http_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
        tls = owner.http_url.startswith("https://")
        return _json(
            {
                "brokerUrl": ws,
                "httpUrl": owner.http_url,
                "nativeUrl": ws,
                "brokerUrlTls": ws if tls else None,
                "httpUrlTls": owner.http_url if tls else None,
            }
        )

    @router.get("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/bundle", **docs.LOOKUP_BUNDLE)
    async def lookup_bundle(
        domain: Domain, tenant: Tenant, namespace: Namespace, topic: TopicPart
    ) -> Response:
        try:
            name = TopicName.of(domain, tenant, namespace, topic)
            owner = await gw().route(name)
        except (GatewayError, FormatError, InvalidName) as exc:
            return error_response(exc)
        return _json(owner.bundle.range.name)

    # ------------------------------------------------------------ WebSocket

    async def _ws_topic(websocket: WebSocket, name: TopicName) -> Topic | None:
        query = dict(websocket.query_params)
        try:
            where = await local_topic(name, query)
        except Exception as exc:
            await deny(websocket, exc)
            return None
        if isinstance(where, str):
            await relay(websocket, relay_url(where, websocket.url.path, query))
            return None
        return where

    async def _ws_session(
        websocket: WebSocket,
        make: Callable[[], tuple[TopicName, Any]],
        partitioned: Callable[[TopicName, int], Awaitable[None]],
        local: Callable[[Topic, Any], Awaitable[None]],
    ) -> None:
        """Validate, then serve a WebSocket session here, on the partitions' owners, or relay it."""
        try:
            name, params = make()
            partitions = await _partitions(name)
        except Exception as exc:
            await deny(websocket, exc)
            return
        if partitions:
            await partitioned(name, partitions)
            return
        topic = await _ws_topic(websocket, name)
        if topic is not None:
            await local(topic, params)

    @router.websocket("/ws/v2/producer/{domain}/{tenant}/{namespace}/{topic}")
    async def ws_producer(websocket: WebSocket, domain: str, tenant: str, namespace: str, topic: str) -> None:
        await _ws_session(
            websocket,
            lambda: (
                TopicName.of(domain, tenant, namespace, topic),
                parse_producer_params(dict(websocket.query_params)),
            ),
            lambda name, n: serve_partitioned_producer(gw(), websocket, name, n),
            lambda local, params: serve_producer(gw(), websocket, local, params),
        )

    @router.websocket("/ws/v2/consumer/{domain}/{tenant}/{namespace}/{topic}/{subscription}")
    async def ws_consumer(
        websocket: WebSocket, domain: str, tenant: str, namespace: str, topic: str, subscription: str
    ) -> None:
        def make() -> tuple[TopicName, Any]:
            name = TopicName.of(domain, tenant, namespace, topic)
            check_subscription(subscription)
            return name, parse_consumer_params(dict(websocket.query_params))

        await _ws_session(
            websocket,
            make,
            lambda name, n: serve_partitioned_consumer(gw(), websocket, name, n, subscription),
            lambda local, params: serve_consumer(gw(), websocket, local, subscription, params),
        )

    @router.websocket("/ws/v2/reader/{domain}/{tenant}/{namespace}/{topic}")
    async def ws_reader(websocket: WebSocket, domain: str, tenant: str, namespace: str, topic: str) -> None:
        await _ws_session(
            websocket,
            lambda: (
                TopicName.of(domain, tenant, namespace, topic),
                parse_reader_params(dict(websocket.query_params)),
            ),
            lambda name, n: serve_partitioned_consumer(gw(), websocket, name, n, None),
            lambda local, params: serve_reader(gw(), websocket, local, params),
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

    async def _partitions(name: TopicName) -> int:
        """Partition count of ``name`` (0: not partitioned, or already a partition)."""
        return await gw().partitions(name)

    # ------------------------------------------------------------ REST producer

    async def _publish_local(
        topic: Topic, producer: str, requests: list[PublishRequest], mark_duplicates: bool
    ) -> list[dict[str, Any]]:
        now = gw().clock.now_ms()
        dedup = topic.policies.dedup
        messages: list[EntryMessage] = []
        for request in requests:
            sequence = request.sequence_id
            if sequence is None:  # keep REST retries without ids apart from each other under dedup
                sequence = topic.last_sequence_id(producer) + 1 + len(messages) if dedup else 0
            messages.append(entry_message(request, producer, sequence, now))
        outcomes = await topic.publish_many(messages)
        return [
            ack_ok(o.message_id, o.duplicate and mark_duplicates)
            if isinstance(o, PublishResult)
            else ack_error(topic.partition, str(o), o.retriable)
            for o in outcomes
        ]

    async def _forward(url: str, request: Request, body: bytes) -> Response:
        return await forwarding.forward(gw(), url, request, body)

    async def _produce(name: TopicName, request: Request) -> Response:
        started = perf_counter()  # publish latency: observed where this gateway publishes itself
        gateway = gw()
        query = dict(request.query_params)
        try:
            mark = parse_mark_duplicates(query)
            body = await read_body(request, gateway.config.max_request_bytes)
            now = gateway.clock.now_ms()
            limit = gateway.config.max_message_bytes
            content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if not body and not content_type:  # an empty message is sent with a Content-Type
                raise BadRequest("request body is missing: send JSON ProducerMessages or the raw payload")
            schema_version = 0
            if content_type == JSON:
                parsed = parse_producer_messages(body, now, limit)
                producer, requests = parsed.producer_name, parsed.messages
                schema_version = await apply_schemas(gateway, name, parsed, limit)
            else:
                raw, raw_producer = parse_raw_headers(dict(request.headers), body, now, limit)
                producer, requests = raw_producer or "RestProducer", [raw]
            partitions = await gateway.partitions(name)
            if partitions > 0:
                response = await _produce_partitioned(
                    name, partitions, producer, requests, schema_version, mark
                )
                publish_latency(gateway).rest.observe(perf_counter() - started)
                return response
            where = await local_topic(name, query)
            if isinstance(where, str):
                return await _forward(f"{where}{request.url.path}", request, body)
            results = await _publish_local(where, producer, requests, mark)
            publish_latency(gateway).rest.observe(perf_counter() - started)
        except (GatewayError, FormatError, InvalidName) as exc:
            return error_response(exc)
        if content_type != JSON:
            first = results[0]
            status = 200 if not first.get("errorCode") else (503 if first["errorCode"] == 1 else 500)
            return _json(first, status)
        if schema_version:
            results = [{**r, "schemaVersion": schema_version} for r in results]
        return Response(producer_acks(results, schema_version), media_type=JSON)

    async def _produce_partitioned(
        name: TopicName,
        partitions: int,
        producer: str,
        requests: list[PublishRequest],
        schema_version: int,
        mark_duplicates: bool,
    ) -> Response:
        gateway = gw()
        groups: dict[int, list[tuple[int, PublishRequest]]] = {}
        for i, request in enumerate(requests):
            if request.key is not None:
                index = partition_of_key(request.key, partitions, "JavaStringHash")
            else:
                index = next(_round_robin) % partitions
            groups.setdefault(index, []).append((i, request))
        results: list[dict[str, Any]] = [{}] * len(requests)
        for index, items in groups.items():
            part = name.partition(index)
            where = await local_topic(part, {})
            if isinstance(where, str):
                body: dict[str, Any] = {
                    "producerName": producer,
                    "messages": [rest_message(r) for _, r in items],
                }
                if schema_version or any(r.schema_version is not None for _, r in items):
                    body["schemaVersion"] = schema_version  # the payloads are its bytes; keep it stamped
                params = {"authoritative": "true", "markDuplicates": str(mark_duplicates).lower()}
                upstream = await gateway.http.post(f"{where}/topics/{part.path}", json=body, params=params)
                got = upstream.json().get("messagePublishResults", [])
                part_results = (
                    got if len(got) == len(items) else [ack_error(index, "forward failed", True)] * len(items)
                )
            else:
                part_results = await _publish_local(where, producer, [r for _, r in items], mark_duplicates)
            for (i, _), result in zip(items, part_results, strict=True):
                results[i] = {**result, "schemaVersion": schema_version} if schema_version else result
        return Response(producer_acks(results, schema_version), media_type=JSON)

    @router.post("/topics/{domain}/{tenant}/{namespace}/{topic}", **docs.PRODUCE)
    async def produce(
        domain: Domain,
        tenant: Tenant,
        namespace: Namespace,
        topic: TopicPart,
        request: Request,
        authoritative: Authoritative = False,
        mark_duplicates: MarkDuplicates = False,
    ) -> Response:
        """Publish to a topic (all partitions of a partitioned one). The JSON reply has one
        result per message (HTTP 200 even when some failed); a raw-body publish answers one
        ``ProducerAck`` (503 when the failure is retriable, 500 else)."""
        try:
            name = TopicName.of(domain, tenant, namespace, topic)
        except InvalidName as exc:
            return error_response(exc)
        return await _produce(name, request)

    @router.post(
        "/topics/{domain}/{tenant}/{namespace}/{topic}/partitions/{partition}", **docs.PRODUCE_PARTITION
    )
    async def produce_partition(
        domain: Domain,
        tenant: Tenant,
        namespace: Namespace,
        topic: PartitionedTopic,
        partition: Annotated[int, Path(ge=0, le=PARTITIONS_MAX - 1)],
        request: Request,
        authoritative: Authoritative = False,
        mark_duplicates: MarkDuplicates = False,
    ) -> Response:
        try:
            base = TopicName.of(domain, tenant, namespace, topic)
            if base.is_partition:
                raise InvalidName(f"{topic} already names a partition")
            name = base.partition(partition)
        except InvalidName as exc:
            return reason_response(400, str(exc), exc.code)
        return await _produce(name, request)

    # ------------------------------------------------------------ HTTP consume

    @router.get("/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}", **docs.FETCH)
    async def fetch(
        domain: Domain,
        tenant: Tenant,
        namespace: Namespace,
        topic: TopicPart,
        subscription: Subscription,
        request: Request,
        max: Max = 100,
        waitMs: Wait = 5000,
        subscriptionType: SubscriptionTypeQuery = "Shared",
        subscriptionInitialPosition: InitialPositionQuery = "Latest",
        consumerName: ConsumerNameQuery = None,
        negativeAckRedeliveryDelay: NackDelayQuery = 60_000,
        authoritative: Authoritative = False,
    ) -> Response:
        """Messages delivered to this HTTP consumer (ids in base64, as WebSocket consumers get
        them); ack or nack them by id (base64 or ``ledger:entry:partition[:batch]``). Waits up
        to ``waitMs`` when none is ready."""
        query = dict(request.query_params)
        try:
            name = TopicName.of(domain, tenant, namespace, topic)
            check_subscription(subscription)
            params = pull_params(query)
            where = await local_topic(name, query)
            if isinstance(where, str):
                return await _forward(f"{where}{request.url.path}", request, b"")
            key = (str(name), subscription, params.consumer_name or "http")
            consumer = await consumers.attach(key, where, params, owner=role_of(request.scope))
            consumer.last_used_ms = consumers.now_ms()
            got = await consumer.fetch(max, waitMs)
            consumer.last_used_ms = consumers.now_ms()
        except (GatewayError, FormatError, InvalidName) as exc:
            return error_response(exc)
        return Response(fetch_response(delivery_frames(got, where.partition)), media_type=JSON)

    async def _settle(
        domain: str, tenant: str, namespace: str, topic: str, subscription: str, request: Request, nack: bool
    ) -> Response:
        query = dict(request.query_params)
        try:
            body = await read_body(request, ACK_BODY_MAX)
            name = TopicName.of(domain, tenant, namespace, topic)
            ids = parse_ack_body(body)
            where = await local_topic(name, query)
            if isinstance(where, str):
                return await _forward(f"{where}{request.url.path}", request, body)
            consumer = consumers.get((str(name), subscription, query.get("consumerName", "http")))
            if consumer is not None and consumer.owner != role_of(request.scope):
                return reason_response(409, "this HTTP consumer belongs to another role", "consumer_busy")
            sub = where.subscriptions.get(subscription)
            if sub is None:
                return reason_response(404, f"subscription {subscription} does not exist", "not_found")
            consumer_id = consumer.consumer_id if consumer is not None else 0
            texts = id_texts(body)
            found = [position_of(i, where.partition) for i in ids]
            is_acked = sub.cursor.is_acked
            pending = [p is not None and p.entry_id >= 0 and not is_acked(p) for p in found]
            if nack:
                sub.nack(consumer_id, [p for p, ok in zip(found, pending, strict=True) if ok and p])
                unmatched = [t for t, ok in zip(texts, pending, strict=True) if not ok]
                return _json({"nacked": len(texts) - len(unmatched), "unmatched": unmatched})
            sub.ack(consumer_id, [p for p, ok in zip(found, pending, strict=True) if ok and p])
            matched = [ok and p is not None and is_acked(p) for p, ok in zip(found, pending, strict=True)]
            unmatched = [t for t, ok in zip(texts, matched, strict=True) if not ok]
        except (GatewayError, FormatError, InvalidName) as exc:
            return error_response(exc)
        return _json({"acked": len(texts) - len(unmatched), "unmatched": unmatched})

    @router.post("/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}/ack", **docs.ACK)
    async def ack(
        domain: Domain,
        tenant: Tenant,
        namespace: Namespace,
        topic: TopicPart,
        subscription: Subscription,
        request: Request,
        consumerName: ConsumerNameQuery = None,
        authoritative: Authoritative = False,
    ) -> Response:
        return await _settle(domain, tenant, namespace, topic, subscription, request, False)

    @router.post("/consume/{domain}/{tenant}/{namespace}/{topic}/{subscription}/nack", **docs.NACK)
    async def nack(
        domain: Domain,
        tenant: Tenant,
        namespace: Namespace,
        topic: TopicPart,
        subscription: Subscription,
        request: Request,
        consumerName: ConsumerNameQuery = None,
        authoritative: Authoritative = False,
    ) -> Response:
        return await _settle(domain, tenant, namespace, topic, subscription, request, True)

    add_stream_route(router, consumers, local_topic)  # .../{subscription}/stream: server-sent events
    router.consumers = consumers  # type: ignore[attr-defined]
    router.ws_handlers = {  # type: ignore[attr-defined]
        "producer": ws_producer,
        "consumer": ws_consumer,
        "reader": ws_reader,
        "pingpong": ws_pingpong,
    }
    return router
