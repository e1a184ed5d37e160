"""REST producer routes: publish to a topic or one partition, here or through its owner.

Owns: ``POST /topics/...`` (JSON ``ProducerMessages`` or a raw payload with its
headers) and ``POST /topics/.../partitions/{n}``. Rules
(docs/architecture.md §7, docs/compatibility.md §2): where the topic is served
is asked of the router once (``gateway.routing``); the topic's owner publishes
(a non-owner forwards the request, ``gateway.forwarder``); a partitioned
topic's messages are split per partition - by key hash, else round robin - and
each part goes to its owner; the JSON reply has one result per
message (HTTP 200 even when some failed), a raw publish answers one
``ProducerAck`` (503 when retriable, 500 else); the topic numbers messages
without a sequence id (``Topic.publish_requests``); publish latency is
observed where this gateway publishes itself.
"""

from __future__ import annotations

import itertools
from time import perf_counter
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from gateway.api import route_docs as docs
from gateway.api.errors import error_response, reason_response
from gateway.api.http_io import JSON, json_response, read_body
from gateway.api.metrics import publish_latency
from gateway.api.rest_schemas import apply_schemas
from gateway.api.route_docs import (
    Authoritative,
    Domain,
    MarkDuplicates,
    Namespace,
    PartitionedTopic,
    Tenant,
    TopicPart,
)
from gateway.broker.publish_results import PublishResult
from gateway.broker.topic import Topic
from gateway.errors import GatewayError
from gateway.names import PARTITIONS_MAX, InvalidName, TopicName
from gateway.protocol.errors import BadRequest
from gateway.protocol.params import parse_authoritative, parse_mark_duplicates
from gateway.protocol.rest import (
    ack_error,
    ack_ok,
    parse_producer_messages,
    parse_raw_headers,
    producer_acks,
)
from gateway.protocol.ws_frames import PublishRequest
from gateway.routing import Partitioned, Peer
from storage.formats import producer_messages
from storage.formats.errors import FormatError
from storage.formats.key_routing import partition_of_key

if TYPE_CHECKING:
    from gateway.process import Gateway

_round_robin = itertools.count()


def _forwarded(request: PublishRequest) -> dict[str, Any]:
    """``request`` as a message of the REST producer body sent to a partition's owner."""
    return producer_messages.message(
        request.payload,
        key=request.key,
        properties=request.properties,
        sequence_id=request.sequence_id,
        event_time_ms=request.event_time_ms,
        deliver_at_ms=request.deliver_at_ms,
        schema_version=request.schema_version,
    )


def add_publish_routes(router: APIRouter, gateway: Gateway) -> None:
    async def _publish_local(
        topic: Topic, producer: str, requests: list[PublishRequest], mark_duplicates: bool
    ) -> list[dict[str, Any]]:
        outcomes = await topic.publish_requests(producer, requests, gateway.clock.now_ms())
        return [
            ack_ok(o.message_id, o.duplicate and mark_duplicates)
            if isinstance(o, PublishResult)
            else ack_error(topic.partition, str(o), o.retriable)
            for o in outcomes
        ]

    async def _produce(name: TopicName, request: Request) -> Response:
        started = perf_counter()  # publish latency: observed where this gateway publishes itself
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
            where = await gateway.router.locate(name, authoritative=parse_authoritative(query))
            if isinstance(where, Partitioned):
                response = await _produce_partitioned(
                    name, where.count, producer, requests, schema_version, mark
                )
                publish_latency(gateway).rest.observe(perf_counter() - started)
                return response
            if isinstance(where, Peer):
                return await gateway.forwarder.replay(where, request, body)
            results = await _publish_local(where, producer, requests, mark)
            publish_latency(gateway).rest.observe(perf_counter() - started)
        except (GatewayError, FormatError, InvalidName) as exc:
            return error_response(exc)
        if content_type != JSON:
            first = results[0]
            status = 200 if not first.get("errorCode") else (503 if first["errorCode"] == 1 else 500)
            return json_response(first, status)
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
            where = await gateway.router.serve(part)
            if isinstance(where, Peer):
                stamped = schema_version or any(r.schema_version is not None for _, r in items)
                body = producer_messages.body(
                    producer,
                    [_forwarded(r) for _, r in items],
                    schema_version if stamped else None,  # the payloads are its bytes; keep it stamped
                )
                params = {"markDuplicates": str(mark_duplicates).lower()}
                got = await gateway.forwarder.publish(where, part, body, params)
                part_results = (
                    got if len(got) == len(items) else [ack_error(index, "forward failed", True)] * len(items)
                )
            else:
                part_results = await _publish_local(where, producer, [r for _, r in items], mark_duplicates)
            for (i, _), result in zip(items, part_results, strict=True):
                results[i] = {**result, "schemaVersion": schema_version} if schema_version else result
        return Response(producer_acks(results, schema_version), media_type=JSON)

    @router.post("/topics/{domain}/{tenant}/{namespace}/{topic}", **docs.PRODUCE)
    async def produce(  # parameters spelt out: a publish resolves no dependency (docs/architecture.md §13)
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
