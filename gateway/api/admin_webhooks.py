"""Admin REST of push subscriptions (webhooks), a Folio extension.

Owns: the HTTP shape of ``…/{topic}/subscription/{sub}/webhook`` (PUT, GET,
DELETE) and ``…/{topic}/webhooks`` (GET: all of a topic's, by subscription).
Rules (ADR 0006, docs/compatibility.md §7 row 12):
- served by the topic's owner (forwarded once from any gateway); on a
  partitioned topic every partition has its own (PUT/DELETE do all, GET lists
  them by partition);
- PUT validates the settings (400, ``webhook_config``) and the URL's target
  (400 naming the rule, ``gateway.security.egress``), creates the
  subscription if it does not exist (at ``initialPosition``), stores the
  settings in etcd and starts pushing before it answers 204; at most
  ``webhooks_max`` webhooks in the cluster (409 beyond);
- GET shows the settings (header values masked) and, from the owner, how the
  pushing goes; DELETE stops pushing (the subscription stays); 404 when the
  subscription has no webhook.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from coordination import keys
from coordination.store import KeyValue
from gateway.api import errors
from gateway.api.admin_common import (
    SUBSCRIPTION,
    TOPIC,
    AdminRoute,
    SubscriptionPath,
    TopicPath,
    json_response,
    no_content,
    on_owner,
    on_partitions,
    partition_count,
    read_json,
)
from gateway.api.admin_models import WebhookSettings, request_body
from gateway.broker import topic_admin
from gateway.broker.topic import Topic
from gateway.meta.errors import Conflict, NotFound
from gateway.names import TopicName
from gateway.protocol.errors import BadRequest
from gateway.protocol.webhook_config import parse_webhook
from gateway.security.middleware import IDENTITY
from gateway.security.policy import Need
from storage.formats.positions import EARLIEST

if TYPE_CHECKING:
    from gateway.process import Gateway

TAGS: list[str | Any] = ["admin-subscriptions"]
W = f"{SUBSCRIPTION}/webhook"
EXAMPLE = {"url": "http://127.0.0.1:9000/hook", "maxMessages": 100, "headers": {"Authorization": "Bearer …"}}


async def _partition_views(
    gateway: Gateway, request: Request, name: TopicName, count: int, *, required: bool = True
) -> Response:
    """A GET on a partitioned topic: each partition's answer, by partition name (404 when
    ``required`` and none has one)."""

    async def one(index: int) -> tuple[str, Any]:
        part = name.partition(index)
        owner = await gateway.router.owner(part)
        url = f"{owner.http_url}{request.url.path.replace(f'/{name.local}/', f'/{part.local}/', 1)}"
        upstream = await gateway.http.get(url, params={"authoritative": "true"})
        return str(part), upstream.json() if upstream.status_code == 200 else None

    found = dict(await asyncio.gather(*(one(i) for i in range(count))))
    if required and not any(found.values()):
        raise NotFound(f"no partition of {name} has a webhook on this subscription")
    return json_response({"partitions": found})


def _view(gateway: Gateway, topic: Topic, subscription: str, kv: KeyValue) -> dict[str, Any]:
    """A stored webhook as GET shows it: settings (header values masked), owner, progress."""
    config = parse_webhook(orjson.loads(kv.value))
    key = (topic.name.path, subscription)
    pusher = gateway.webhooks.running.get(key)
    if pusher is not None and pusher.revision == kv.mod_revision:
        status = pusher.status()
    else:
        error = gateway.webhooks.errors.get(key)
        status = {"state": "error" if error else "starting", "lastError": error}
    return {**config.public_json(), "gateway": gateway.config.gateway_id, **status}


def make_router(get_gateway: Callable[[], Gateway]) -> APIRouter:
    router = APIRouter(tags=TAGS, route_class=AdminRoute)

    async def target(name: TopicName) -> tuple[Gateway, int]:
        """The gateway and the partition count of topic ``name`` (0: not partitioned, or a
        partition)."""
        gateway = get_gateway()
        return gateway, await partition_count(gateway, name)

    @router.put(
        W,
        status_code=204,
        summary="Push the subscription's messages to a URL (creates the subscription if needed)",
        responses=errors.responses(400, 404, 409, 412),
        openapi_extra=request_body(WebhookSettings, "the webhook's settings", EXAMPLE),
    )
    async def set_webhook(ref: SubscriptionPath, request: Request) -> Response:
        name, subscription = ref.topic, ref.name
        gateway, count = await target(name)
        value = await read_json(request)
        config = parse_webhook(value, gateway.webhooks.allowed_hosts)
        await gateway.webhooks.check_url(config.url)  # and again at every connection (DNS rebinding)
        if config.deadLetterTopic is not None:
            letters = name.sibling(config.deadLetterTopic)
            if letters == name.base:
                raise BadRequest("deadLetterTopic: must not be the topic itself")
            if await gateway.router.partitions(letters):
                raise BadRequest(f"deadLetterTopic: {letters} is partitioned; name a non-partitioned topic")
            # it dead-letters there for the caller (the default one is checked in front)
            await request.app.state.guard.require(Need.PRODUCE, request.scope.get(IDENTITY), letters)
        if count:
            return await on_partitions(gateway, request, name, count, value)

        async def serve(t: Topic) -> Response:
            key = keys.webhook(t.name.path, subscription)
            stored = await gateway.store.list_prefix(keys.WEBHOOKS)
            if len(stored) >= gateway.webhooks.webhooks_max and all(kv.key != key for kv in stored):
                raise Conflict(f"the cluster has its maximum of {gateway.webhooks.webhooks_max} webhooks")
            if subscription not in t.subscriptions:
                start = EARLIEST if config.initialPosition == "Earliest" else None
                await topic_admin.create_subscription(t, subscription, start)
            encoded = orjson.dumps(config.to_json())
            revision = await gateway.store.put(key, encoded)
            await gateway.webhooks.apply(t, subscription, (encoded, revision))
            return no_content()

        return await on_owner(gateway, request, name, serve, body=value, create=True)

    @router.get(
        W,
        summary="The webhook of a subscription: its settings and how pushing goes",
        responses=errors.responses(404, 412),
    )
    async def get_webhook(ref: SubscriptionPath, request: Request) -> Response:
        name, subscription = ref.topic, ref.name
        gateway, count = await target(name)
        if count:
            return await _partition_views(gateway, request, name, count)

        async def serve(t: Topic) -> Response:
            kv = await gateway.store.get(keys.webhook(t.name.path, subscription))
            if kv is None:
                raise NotFound(f"subscription {subscription} of {t.name} has no webhook")
            return json_response(_view(gateway, t, subscription, kv))

        return await on_owner(gateway, request, name, serve)

    @router.get(
        f"{TOPIC}/webhooks",
        summary="The webhooks of a topic's subscriptions, by subscription",
        responses=errors.responses(404, 412),
    )
    async def list_webhooks(name: TopicPath, request: Request) -> Response:
        gateway, count = await target(name)
        if count:
            return await _partition_views(gateway, request, name, count, required=False)

        async def serve(t: Topic) -> Response:
            prefix = keys.webhooks_of(t.name.path)
            stored = await gateway.store.list_prefix(prefix)
            return json_response(
                {kv.key[len(prefix) :]: _view(gateway, t, kv.key[len(prefix) :], kv) for kv in stored}
            )

        return await on_owner(gateway, request, name, serve)

    @router.delete(
        W,
        status_code=204,
        summary="Stop pushing (the subscription and its backlog stay)",
        responses=errors.responses(404, 412),
    )
    async def delete_webhook(ref: SubscriptionPath, request: Request) -> Response:
        name, subscription, gateway = ref.topic, ref.name, get_gateway()

        async def serve(t: Topic) -> Response:
            if not await gateway.store.delete(keys.webhook(t.name.path, subscription)):
                raise NotFound(f"subscription {subscription} of {t.name} has no webhook")
            await gateway.webhooks.apply(t, subscription, None)
            return no_content()

        return await on_owner(gateway, request, name, serve, each_partition=True)

    return router
