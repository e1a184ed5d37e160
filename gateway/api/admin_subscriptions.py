"""Admin REST v2 of subscriptions: list, create, delete, skip, expire, reset cursor.

Owns: the HTTP shape of ``…/{topic}/subscriptions``, ``…/{topic}/subscription/{sub}``
(+ ``skip/{n}``, ``skip_all``, ``expireMessages[/{seconds}]``,
``resetcursor[/{timestamp}]``) and ``…/{topic}/all_subscription/expireMessages/{seconds}``
(docs/compatibility.md §3.2, §4.8). Rules:
- served by the topic's owner (forwarded once from any gateway); on a
  partitioned topic every partition does it;
- counts are *messages* (Folio batches messages into entries itself; a skip of
  n acknowledges the next n unacknowledged messages, even inside an entry);
- the cursor is persisted before the call answers; 404 unknown topic or
  subscription, 409 a subscription that exists, 412 consumers connected
  (delete without ``force``), 400 a bad body.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from coordination import keys
from gateway.api import errors
from gateway.api.admin_bodies import CursorTarget, parse_target
from gateway.api.admin_common import (
    SUBSCRIPTION,
    TOPIC,
    AdminRoute,
    SubscriptionPath,
    SubscriptionRef,
    TopicPath,
    json_response,
    no_content,
    on_owner,
    partition_count,
    read_json,
)
from gateway.api.admin_models import CURSOR_TARGET, CountPath, SecondsPath, TimestampPath, request_body
from gateway.api.route_docs import Paging
from gateway.broker import topic_admin
from gateway.broker.log_state import TopicNotFound
from gateway.broker.subscription import Subscription
from gateway.broker.topic import Topic
from gateway.names import TopicName
from storage.formats.positions import EARLIEST, LATEST, Position

if TYPE_CHECKING:
    from gateway.process import Gateway

TAGS: list[str | Any] = ["admin-subscriptions"]
TARGET_EXAMPLE = {"ledgerId": 12, "entryId": 3, "partitionIndex": -1, "batchIndex": -1, "isExcluded": False}


async def _subscriptions_of(gateway: Gateway, name: TopicName) -> list[str]:
    """Durable subscriptions, from their cursor keys (no topic is loaded)."""
    count = await partition_count(gateway, name)
    parts = [name.partition(i) for i in range(count)] if count else [name]
    if not count and not await gateway.service.topic_exists(name):
        raise TopicNotFound(f"Topic {name} does not exist")
    found: set[str] = set()
    for part in parts:
        prefix = keys.cursors_of(part.path)
        found.update(kv.key[len(prefix) :] for kv in await gateway.store.list_prefix(prefix))
    return sorted(found)


async def _seek(topic: Topic, sub: Subscription, target: CursorTarget) -> None:
    """Reset ``sub`` so that the message at ``target`` is the next one (or, if
    excluded, the one after it), at batch-index precision."""
    if target.is_earliest or target.is_latest:
        sub.seek(target.entry)
        return
    await topic_admin.seek_to_message(topic, sub, target.entry, target.batch_index, target.excluded)


def make_router(get_gateway: Callable[[], Gateway]) -> APIRouter:
    router = APIRouter(tags=TAGS, route_class=AdminRoute)

    async def on_sub(
        request: Request,
        ref: SubscriptionRef,
        act: Callable[[Topic, Subscription], Any],
        body: Any = None,
    ) -> Response:
        """Run ``act`` on the subscription at its owner (every partition's, if partitioned);
        persist the cursor; 204."""
        gateway = get_gateway()
        name = ref.topic

        async def serve(t: Topic) -> Response:
            sub = t.subscriptions[ref.name]
            result = act(t, sub)
            if hasattr(result, "__await__"):
                await result
            await sub.persist()
            return no_content()

        return await on_owner(
            gateway, request, name, serve, body=body, subscription=ref.name, each_partition=True
        )

    @router.get(
        f"{TOPIC}/subscriptions",
        summary="Durable subscriptions of a topic",
        responses=errors.responses(404, 412),
    )
    async def list_subscriptions(name: TopicPath, paging: Paging) -> Response:
        names = await _subscriptions_of(get_gateway(), name)
        items, total = paging.apply(names)
        return json_response(items, total=total)

    @router.put(
        SUBSCRIPTION,
        status_code=204,
        summary="Create a durable subscription (body: optional MessageId to start at; default latest)",
        responses=errors.responses(400, 404, 409, 412),
        openapi_extra=request_body(
            CURSOR_TARGET, "where it starts: a message id, or earliest / latest", "earliest", required=False
        ),
    )
    async def create_subscription(ref: SubscriptionPath, request: Request) -> Response:
        gateway = get_gateway()
        name = ref.topic
        value = await read_json(request, required=False)
        target = parse_target(value, required=False)

        async def serve(t: Topic) -> Response:
            start: Position | None = None
            if target is not None and not target.is_latest:
                start = EARLIEST if target.is_earliest else target.entry
            await topic_admin.create_subscription(t, ref.name, start)
            return no_content()

        # as a consumer's subscribe would: the topic is created if the namespace allows it
        return await on_owner(gateway, request, name, serve, body=value, create=True, each_partition=True)

    @router.delete(
        SUBSCRIPTION,
        status_code=204,
        summary="Delete a subscription (412 while consumers are connected, unless force)",
        responses=errors.responses(404, 412),
    )
    async def delete_subscription(
        ref: SubscriptionPath,
        request: Request,
        force: Annotated[bool, Query(description="disconnect its consumers")] = False,
    ) -> Response:
        gateway = get_gateway()
        name = ref.topic

        async def serve(t: Topic) -> Response:
            await topic_admin.delete_subscription(t, ref.name, force)
            return no_content()

        return await on_owner(gateway, request, name, serve, subscription=ref.name, each_partition=True)

    @router.post(
        f"{SUBSCRIPTION}/skip/{{count}}",
        status_code=204,
        summary="Acknowledge the next `count` unacknowledged messages",
        responses=errors.responses(404, 412),
    )
    async def skip_messages(
        ref: SubscriptionPath,
        count: CountPath,
        request: Request,
    ) -> Response:
        """Skip ``count`` messages. Folio batches many messages into one entry
        internally, so ``count`` counts messages, not entries."""
        return await on_sub(request, ref, lambda _t, s: s.skip(count))

    @router.post(
        f"{SUBSCRIPTION}/skip_all",
        status_code=204,
        summary="Acknowledge everything: clear the backlog",
        responses=errors.responses(404, 412),
    )
    async def skip_all_messages(ref: SubscriptionPath, request: Request) -> Response:
        return await on_sub(request, ref, lambda _t, s: s.seek(LATEST))

    @router.post(
        f"{SUBSCRIPTION}/expireMessages/{{seconds}}",
        status_code=204,
        summary="Expire (acknowledge) messages published more than `seconds` ago",
        responses=errors.responses(404, 412),
    )
    async def expire_messages(
        ref: SubscriptionPath,
        seconds: SecondsPath,
        request: Request,
    ) -> Response:
        return await on_sub(request, ref, lambda t, s: t.expire(seconds, [s]))

    @router.post(
        f"{SUBSCRIPTION}/expireMessages",
        status_code=204,
        summary="Expire (acknowledge) messages up to a position (ResetCursorData)",
        responses=errors.responses(400, 404, 412),
        openapi_extra=request_body(CURSOR_TARGET, "expire up to this message id", TARGET_EXAMPLE),
    )
    async def expire_messages_to_position(ref: SubscriptionPath, request: Request) -> Response:
        value = await read_json(request)
        target = parse_target(value)
        assert target is not None

        def act(t: Topic, s: Subscription) -> None:
            last = t.log.last_confirmed
            if target.is_latest:
                upto = last
            elif target.is_earliest:
                return
            elif target.excluded:
                upto = Position(target.entry.ledger_id, target.entry.entry_id - 1)
            else:
                upto = target.entry
            s.expire_upto(upto)

        return await on_sub(request, ref, act, value)

    @router.post(
        f"{TOPIC}/all_subscription/expireMessages/{{seconds}}",
        status_code=204,
        summary="Expire messages older than `seconds` on every subscription",
        responses=errors.responses(404, 412),
    )
    async def expire_messages_all_subscriptions(
        name: TopicPath, seconds: SecondsPath, request: Request
    ) -> Response:
        gateway = get_gateway()

        async def serve(t: Topic) -> Response:
            await t.expire(seconds)
            for sub in t.subscriptions.values():
                await sub.persist()
            return no_content()

        return await on_owner(gateway, request, name, serve, each_partition=True)

    @router.post(
        f"{SUBSCRIPTION}/resetcursor/{{timestamp}}",
        status_code=204,
        summary="Move the cursor to the first message published at or after `timestamp` (epoch ms)",
        responses=errors.responses(404, 412),
    )
    async def reset_cursor(
        ref: SubscriptionPath,
        timestamp: TimestampPath,
        request: Request,
    ) -> Response:
        async def act(t: Topic, s: Subscription) -> None:
            found = await topic_admin.first_at_or_after(t, timestamp)
            if found is None:
                s.seek(LATEST)
                return
            p = found.position
            await _seek(t, s, CursorTarget(Position(p.ledger_id, p.entry_id), p.batch_index))

        return await on_sub(request, ref, act)

    @router.post(
        f"{SUBSCRIPTION}/resetcursor",
        status_code=204,
        summary='Move the cursor to a position (ResetCursorData, or "earliest"/"latest")',
        responses=errors.responses(400, 404, 412),
        openapi_extra=request_body(
            CURSOR_TARGET, "the message id to move to, or earliest / latest", TARGET_EXAMPLE
        ),
    )
    async def reset_cursor_to_position(ref: SubscriptionPath, request: Request) -> Response:
        value = await read_json(request)
        target = parse_target(value)
        assert target is not None
        return await on_sub(request, ref, lambda t, s: _seek(t, s, target), value)

    return router
