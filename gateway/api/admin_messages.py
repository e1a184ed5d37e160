"""Admin REST v2 message reads: peek, get by id, examine, last id, id by time, browse.

Owns: the HTTP shape of ``…/subscription/{sub}/position/{n}``, ``…/ledger/{l}/entry/{e}``,
``…/examinemessage``, ``…/lastMessageId``, ``…/messageid/{timestamp}`` (Pulsar's,
docs/compatibility.md §3.2) and Folio's paged JSON browse
``…/subscription/{sub}/messages`` and ``…/{topic}/messages`` (PIP-332). Rules:
- Folio batches many messages into one entry internally (users never batched
  them), so every position here counts *messages*; a message of a batch entry
  is ``ledger:entry:batchIndex`` in ``X-Pulsar-Message-ID`` and gets its own
  payload (Pulsar would answer the whole serialized batch);
- peek/get answer the raw payload with the metadata in ``X-Pulsar-*`` headers;
- served by the topic's owner (forwarded once); never auto-creates a topic;
  404 when the topic, subscription or message does not exist; ``limit`` <= 100.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from gateway.api import errors
from gateway.api.admin_bodies import browse_item, message_headers, message_id_json
from gateway.api.admin_common import (
    SUBSCRIPTION,
    TOPIC,
    AdminRoute,
    SubscriptionPath,
    TopicPath,
    json_response,
    on_owner,
)
from gateway.api.admin_models import (
    BatchIndexQuery,
    EntryPath,
    PositionPath,
    TimestampPath,
)
from gateway.broker import topic_admin
from gateway.broker.topic import Topic
from gateway.meta.errors import NotFound
from gateway.meta.schema_registry import SchemaRegistry
from gateway.meta.schema_types import display_value
from storage.formats.message_id import INT32_MAX
from storage.formats.positions import NO_BATCH, MessagePosition

if TYPE_CHECKING:
    from gateway.process import Gateway

BROWSE_MAX = 100
RAW: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the message's payload; its metadata in X-Pulsar-* headers",
        "content": {"application/octet-stream": {}},
    }
}
Offset = Annotated[int, Query(ge=0, le=INT32_MAX, description="messages to leave out first")]
Limit = Annotated[int, Query(ge=1, le=BROWSE_MAX, description=f"messages to answer (at most {BROWSE_MAX})")]


def _raw(found: topic_admin.Found | None, topic: Topic, what: str) -> Response:
    if found is None:
        raise NotFound(f"{what} not found on {topic.name}")
    headers = message_headers(found.position, found.message, found.entry_size, topic.partition)
    return Response(found.message.payload, media_type="application/octet-stream", headers=headers)


async def _page(
    registry: SchemaRegistry,
    items: list[topic_admin.Found],
    topic: Topic,
    offset: int,
    limit: int,
    total: int,
) -> Response:
    """One page of the browse routes; a message written with a schema also carries its
    decoded ``value`` (JSON and Avro records as objects) for display."""
    messages = [browse_item(f.position, f.message, f.entry_size, topic.partition) for f in items]
    versions = {f.message.schema_version for f in items} - {None}
    if versions:
        known = {v.version: v.info for v in await registry.versions(topic.name) if not v.deleted}
        for item, found in zip(messages, items, strict=True):
            info = known.get(found.message.schema_version)  # type: ignore[arg-type]
            if info is not None:
                item["value"] = display_value(info, found.message.payload)
    return json_response({"messages": messages, "offset": offset, "limit": limit, "total": total})


def make_router(get_gateway: Callable[[], Gateway]) -> APIRouter:
    router = APIRouter(route_class=AdminRoute)

    @router.get(
        f"{SUBSCRIPTION}/position/{{n}}",
        tags=["admin-subscriptions"],
        summary="Peek the n-th (1-based) unacknowledged message after the mark-delete position",
        response_class=Response,
        responses={**RAW, **errors.responses(404, 412)},
    )
    async def peek_nth_message(
        ref: SubscriptionPath,
        n: PositionPath,
        request: Request,
    ) -> Response:
        """The n-th message the subscription has not acknowledged. Folio batches many
        messages into one entry internally (users never batched them), so ``n``
        counts messages, not entries; ``X-Pulsar-Message-ID`` is ``L:E`` or, for a
        message sharing its entry, ``L:E:batchIndex``."""

        async def serve(t: Topic) -> Response:
            found = await topic_admin.nth_forward(t, n, t.subscriptions[ref.name].cursor)
            return _raw(found, t, f"message {n} of subscription {ref.name}")

        return await on_owner(get_gateway(), request, ref.topic, serve, subscription=ref.name)

    @router.get(
        f"{TOPIC}/ledger/{{ledger}}/entry/{{entry}}",
        tags=["admin-topics"],
        summary="Get a message by id (optional batchIndex for a message sharing its entry)",
        response_class=Response,
        responses={**RAW, **errors.responses(404, 412)},
    )
    async def get_message_by_id(
        name: TopicPath,
        at: EntryPath,
        request: Request,
        batchIndex: BatchIndexQuery = NO_BATCH,
    ) -> Response:
        async def serve(t: Topic) -> Response:
            found = await topic_admin.message_at(t, at, batchIndex)
            return _raw(found, t, f"message {at.ledger_id}:{at.entry_id}")

        return await on_owner(get_gateway(), request, name, serve)

    @router.get(
        f"{TOPIC}/examinemessage",
        tags=["admin-topics"],
        summary="The n-th message from the start (earliest) or the end (latest) of the topic",
        response_class=Response,
        responses={**RAW, **errors.responses(404, 412)},
    )
    async def examine_message(
        name: TopicPath,
        request: Request,
        initialPosition: Literal["earliest", "latest"] = "latest",
        messagePosition: Annotated[int, Query(ge=1, le=INT32_MAX)] = 1,
    ) -> Response:
        async def serve(t: Topic) -> Response:
            if initialPosition == "earliest":
                got = await topic_admin.page_forward(t, messagePosition - 1, 1)
            else:
                got = await topic_admin.page_backward(t, messagePosition - 1, 1)
            return _raw(got[0] if got else None, t, f"message {messagePosition} from {initialPosition}")

        return await on_owner(get_gateway(), request, name, serve)

    @router.get(
        f"{TOPIC}/lastMessageId",
        tags=["admin-topics"],
        summary="The id of the last message",
        responses=errors.responses(404, 412),
    )
    async def get_last_message_id(name: TopicPath, request: Request) -> Response:
        async def serve(t: Topic) -> Response:
            found = await topic_admin.last_message(t)
            if found is None:  # empty: the position before the open ledger's first entry
                last = t.log.last_confirmed
                return json_response(
                    message_id_json(MessagePosition(last.ledger_id, last.entry_id), t.partition)
                )
            return json_response(message_id_json(found.position, t.partition))

        return await on_owner(get_gateway(), request, name, serve)

    @router.get(
        f"{TOPIC}/messageid/{{timestamp}}",
        tags=["admin-topics"],
        summary="The id of the first message published at or after `timestamp` (epoch ms)",
        responses=errors.responses(404, 412),
    )
    async def get_message_id_by_time(name: TopicPath, timestamp: TimestampPath, request: Request) -> Response:
        async def serve(t: Topic) -> Response:
            found = await topic_admin.first_at_or_after(t, timestamp)
            if found is None:
                raise NotFound(f"no message published at or after {timestamp} on {t.name}")
            return json_response(message_id_json(found.position, t.partition))

        return await on_owner(get_gateway(), request, name, serve)

    @router.get(
        f"{SUBSCRIPTION}/messages",
        tags=["admin-subscriptions"],
        summary="Browse the subscription's unacknowledged messages as JSON pages (Folio)",
        responses=errors.responses(400, 404, 412),
    )
    async def browse_subscription_messages(
        ref: SubscriptionPath,
        request: Request,
        offset: Offset = 0,
        limit: Limit = 20,
    ) -> Response:
        """Unacknowledged messages in log order, ``offset`` messages in (messages, not
        entries); ``total`` is the subscription's backlog."""

        async def serve(t: Topic) -> Response:
            sub = t.subscriptions[ref.name]
            items = await topic_admin.page_forward(t, offset, limit, sub.cursor)
            return await _page(get_gateway().schemas, items, t, offset, limit, sub.backlog())

        return await on_owner(get_gateway(), request, ref.topic, serve, subscription=ref.name)

    @router.get(
        f"{TOPIC}/messages",
        tags=["admin-topics"],
        summary="Browse the topic's messages as JSON pages, oldest or newest first (Folio)",
        responses=errors.responses(400, 404, 412),
    )
    async def browse_topic_messages(
        name: TopicPath,
        request: Request,
        offset: Offset = 0,
        limit: Limit = 20,
        from_: Annotated[Literal["earliest", "latest"], Query(alias="from")] = "earliest",
    ) -> Response:
        """``from=earliest``: oldest first; ``from=latest``: newest first. ``total`` is
        the number of messages the topic holds."""

        async def serve(t: Topic) -> Response:
            if from_ == "earliest":
                items = await topic_admin.page_forward(t, offset, limit)
            else:
                items = await topic_admin.page_backward(t, offset, limit)
            total = t.log.counts.view(t.log.layout).total()
            return await _page(get_gateway().schemas, items, t, offset, limit, total)

        return await on_owner(get_gateway(), request, name, serve)

    return router
