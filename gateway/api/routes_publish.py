"""REST producer routes: publish to a topic or one partition, here or through its owner.

Owns: ``POST /topics/...`` (JSON ``ProducerMessages`` or a raw payload with its
headers) and ``POST /topics/.../partitions/{n}``. Rules
(docs/architecture.md §7, docs/compatibility.md §2): the topic's owner
publishes (a non-owner forwards the request with ``authoritative=true``); a
partitioned topic's messages are split per partition - by key hash, else round
robin - and each part goes to its owner; the JSON reply has one result per
message (HTTP 200 even when some failed), a raw publish answers one
``ProducerAck`` (503 when retriable, 500 else); the topic numbers messages
without a sequence id (``Topic.publish_requests``); publish latency is
observed where this gateway publishes itself.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from gateway.api import forwarding
from gateway.api import route_docs as docs
from gateway.api.errors import error_response, reason_response
from gateway.api.forwarding import LocalTopic
from gateway.api.http_io import JSON, json_response, read_body, rest_message
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
from gateway.protocol.params import parse_mark_duplicates
from gateway.protocol.rest import (
    ack_error,
    ack_ok,
    parse_producer_messages,
    parse_raw_headers,
    producer_acks,
)
from gateway.protocol.ws_frames import PublishRequest
from storage.formats.errors import FormatError
from storage.formats.key_routing import partition_of_key

if TYPE_CHECKING:
    from gateway.api.gateway import Gateway

_round_robin = itertools.count()


def add_publish_routes(router: APIRouter, gw: Callable[[], Gateway], local_topic: LocalTopic) -> None:
    async def _publish_local(
        topic: Topic, producer: str, requests: list[PublishRequest], mark_duplicates: bool
    ) -> list[dict[str, Any]]:
        outcomes = await topic.publish_requests(producer, requests, gw().clock.now_ms())
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
