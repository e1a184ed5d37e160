"""Admin REST v2 of topics: lists, creation, partitions, stats, internal stats, lifecycle.

Owns: the HTTP shape of ``/admin/v2/persistent/{tenant}/{namespace}`` (list,
partitioned list) and ``…/{topic}`` (create, delete, partitions, stats,
partitioned-stats, internalStats, partitioned-internalStats, stats/history,
terminate, unload) - docs/compatibility.md §3.2-3.4 - and mounts the
subscription and message routers. Rules:
- any gateway answers: a topic's call is served by its owner or forwarded
  there once (``admin_common.on_owner``); partitioned calls fan out to each
  partition's owner and aggregate;
- stats, internal stats and lifecycle calls never auto-create a topic (404);
- list routes take Folio's optional ``search``/``offset``/``limit`` and keep
  Pulsar's plain array, with the total in ``X-Total-Count``;
- ``…/{namespace}/partitioned`` is the partitioned list, never a topic: the
  topic's own routes match only other names (``{topic:topic}``, so PUT/DELETE
  there are 405 with ``Allow: GET``), and ``gateway.names`` reserves the name
  everywhere (412); a new partitioned topic's name must leave room for every
  partition's name (``check_partitioned_base``, 412) before anything is written;
- bodies are read by ``admin_common.read_json`` and documented by
  ``gateway.api.admin_models``;
- errors are ``ErrorBody`` with statuses from ``gateway.api.errors``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from gateway.api import admin_messages, admin_models, admin_subscriptions, admin_webhooks, errors
from gateway.api import stats_models as models
from gateway.api.admin_bodies import message_id_json
from gateway.api.admin_common import (
    PREFIX,
    TOPIC,
    TOPIC_ROOT,
    AdminRoute,
    TopicPath,
    json_response,
    no_content,
    on_owner,
    partition_count,
    read_json,
    topic_name,
)
from gateway.api.route_docs import Namespace, Paging, PartitionedBase, Tenant
from gateway.broker import stats, stats_history
from gateway.broker.broker_errors import SubscriptionBusy, TopicUnavailable
from gateway.broker.log_state import TopicNotFound
from gateway.broker.topic import Topic
from gateway.broker.topic_stats import internal_stats, topic_stats
from gateway.meta.errors import Conflict, NotFound
from gateway.meta.namespaces import NamespaceStore
from gateway.names import NamespaceName, TopicName
from gateway.protocol.params import parse_authoritative
from storage.formats.positions import MessagePosition

if TYPE_CHECKING:
    from gateway.process import Gateway

TAGS: list[str | Any] = ["admin-topics"]
Force = Annotated[bool, Query(description="also when clients are connected (they are disconnected)")]


def make_metadata_router(get_store: Callable[[], NamespaceStore]) -> APIRouter:
    """Topic lists, creation and partition counts: etcd metadata only (no topic is loaded)."""
    router = APIRouter(tags=TAGS, route_class=AdminRoute)

    @router.get(
        PREFIX, summary="Topics of a namespace, partitions included", responses=errors.responses(404, 412)
    )
    async def list_topics(tenant: Tenant, namespace: Namespace, paging: Paging) -> Response:
        items, total = paging.apply(await get_store().list_topics(NamespaceName.of(tenant, namespace)))
        return json_response(items, total=total)

    @router.get(
        f"{PREFIX}/partitioned",
        summary="Partitioned topics of a namespace",
        responses=errors.responses(404, 412),
    )
    async def list_partitioned_topics(tenant: Tenant, namespace: Namespace, paging: Paging) -> Response:
        items, total = paging.apply(await get_store().list_partitioned(NamespaceName.of(tenant, namespace)))
        return json_response(items, total=total)

    @router.put(
        TOPIC_ROOT,
        status_code=204,
        summary="Create a non-partitioned topic",
        responses=errors.responses(404, 409, 412),
    )
    async def create_topic(name: TopicPath) -> Response:
        await get_store().create_topic(name)
        return no_content()

    def partitions_route(
        method: str, write: Callable[[NamespaceStore, TopicName, Any], Awaitable[None]], **doc: Any
    ) -> None:
        """PUT (create) or POST (increase) ``…/{topic}/partitions``: the body is the count;
        the name must leave room for every partition's (412) before ``write``."""

        async def set_partitions(
            tenant: Tenant, namespace: Namespace, topic: PartitionedBase, request: Request
        ) -> Response:
            name = topic_name(tenant, namespace, topic).check_partitioned_base()
            await write(get_store(), name, await read_json(request))
            return no_content()

        router.add_api_route(
            f"{TOPIC}/partitions",
            set_partitions,
            methods=[method],
            status_code=204,
            responses=errors.responses(400, 404, 409, 412),
            **doc,
        )

    partitions_route(
        "PUT",
        NamespaceStore.create_partitioned,
        name="create_partitioned_topic",
        summary="Create a partitioned topic (body: the partition count)",
        openapi_extra=admin_models.request_body(admin_models.PARTITIONS, "the number of partitions", 4),
    )
    partitions_route(
        "POST",
        NamespaceStore.update_partitions,
        name="update_partitioned_topic",
        summary="Increase the partitions of a partitioned topic (412 to fewer, 409 if not partitioned)",
        openapi_extra=admin_models.request_body(admin_models.PARTITIONS, "the new number of partitions", 8),
    )

    @router.get(
        f"{TOPIC}/partitions",
        summary="Partition count (0 = not partitioned)",
        responses=errors.responses(412),
    )
    async def get_partitioned_metadata(name: TopicPath) -> dict[str, int]:
        return {"partitions": await get_store().get_partitions(name)}

    return router


async def _figures(topic: Topic, kind: str) -> Any:
    """``kind`` (stats, internalStats, stats/history) of a topic loaded here."""
    if kind == "stats":
        return topic_stats(topic)
    if kind == "internalStats":
        return await internal_stats(topic)
    return topic.history.to_json()


async def fan_out(gateway: Gateway, name: TopicName, count: int, kind: str) -> dict[str, Any]:
    """``kind`` (stats, internalStats, stats/history) of each partition, from its owner."""

    async def one(index: int) -> tuple[str, Any]:
        part = name.partition(index)
        peer = await gateway.router.peer(part)
        if peer is None:
            return str(part), await _figures(await gateway.service.topic(part, create=False), kind)
        status, body = await gateway.forwarder.get_json(peer, f"/admin/v2/{part.path}/{kind}")
        if status != 200:
            reason = body.get("reason") if isinstance(body, dict) else body
            raise TopicUnavailable(f"partition {part}: {status} {reason}")
        return str(part), body

    return dict(await asyncio.gather(*(one(i) for i in range(count))))


async def _require_partitioned(gateway: Gateway, name: TopicName) -> int:
    """The partitions of partitioned topic ``name`` (NotFound if it is not one)."""
    count = await gateway.namespaces.get_partitions(name)
    if not count:
        raise NotFound(f"Partitioned topic {name} does not exist")
    return count


def make_router(get_gateway: Callable[[], Gateway]) -> APIRouter:
    router = APIRouter(tags=TAGS, route_class=AdminRoute)
    router.include_router(make_metadata_router(lambda: get_gateway().namespaces))
    router.include_router(admin_subscriptions.make_router(get_gateway))
    router.include_router(admin_webhooks.make_router(get_gateway))
    router.include_router(admin_messages.make_router(get_gateway))

    async def figures_on_owner(request: Request, name: TopicName, kind: str) -> Response:
        """``kind`` (as ``_figures``) of topic ``name``, from its owner (forwarded once)."""

        async def serve(t: Topic) -> Response:
            return json_response(await _figures(t, kind))

        return await on_owner(get_gateway(), request, name, serve)

    # ------------------------------------------------------------ stats

    @router.get(
        f"{TOPIC}/stats",
        summary="Topic stats (Pulsar's TopicStats)",
        responses=errors.responses(404, 412),
        response_model=models.TopicStats,
    )
    async def get_topic_stats(name: TopicPath, request: Request) -> Response:
        return await figures_on_owner(request, name, "stats")

    @router.get(
        f"{TOPIC}/partitioned-stats",
        summary="Stats of a partitioned topic: aggregated, plus each partition's",
        responses=errors.responses(404, 412),
        response_model=models.PartitionedTopicStats,
    )
    async def get_partitioned_stats(name: TopicPath, perPartition: bool = True) -> Response:
        gateway = get_gateway()
        parts = await fan_out(gateway, name, await _require_partitioned(gateway, name), "stats")
        return json_response(stats.aggregate(parts, per_partition=perPartition))

    @router.get(
        f"{TOPIC}/internalStats",
        summary="Managed-log internals: ledgers (with ensembles) and cursors",
        responses=errors.responses(404, 412),
        response_model=models.PersistentTopicInternalStats,
    )
    async def get_internal_stats(name: TopicPath, request: Request) -> Response:
        return await figures_on_owner(request, name, "internalStats")

    @router.get(
        f"{TOPIC}/partitioned-internalStats",
        summary="Internal stats of each partition",
        responses=errors.responses(404, 412),
        response_model=models.PartitionedTopicInternalStats,
    )
    async def get_partitioned_internal_stats(name: TopicPath) -> Response:
        gateway = get_gateway()
        count = await _require_partitioned(gateway, name)
        parts = await fan_out(gateway, name, count, "internalStats")
        return json_response({"metadata": {"partitions": count}, "partitions": parts})

    @router.get(
        f"{TOPIC}/stats/history",
        summary="Rates and backlog over the last 15 minutes (one sample every 5 s; Folio)",
        responses=errors.responses(404, 412),
        response_model=models.StatsHistory,
    )
    async def get_stats_history(name: TopicPath, request: Request) -> Response:
        gateway = get_gateway()
        count = await partition_count(gateway, name)
        if count:
            parts = await fan_out(gateway, name, count, "stats/history")
            return json_response(stats_history.merge(list(parts.values())))
        return await figures_on_owner(request, name, "stats/history")

    # ------------------------------------------------------------ lifecycle

    @router.post(
        f"{TOPIC}/terminate",
        summary="Seal the topic: no more publishes; answers the last message id",
        responses=errors.responses(404, 412),
    )
    async def terminate_topic(name: TopicPath, request: Request) -> Response:
        async def serve(t: Topic) -> Response:
            last = await t.terminate()
            return json_response(message_id_json(MessagePosition(last.ledger_id, last.entry_id), t.partition))

        return await on_owner(get_gateway(), request, name, serve)

    @router.put(
        f"{TOPIC}/unload",
        status_code=204,
        summary="Close the topic gracefully; it is loaded again on next use",
        responses=errors.responses(404, 412),
    )
    async def unload_topic(name: TopicPath, request: Request) -> Response:
        gateway = get_gateway()
        peer = await gateway.router.peer(name, authoritative=parse_authoritative(request.query_params))
        if peer is not None:
            return await gateway.forwarder.replay(peer, request, b"")
        if not await gateway.service.topic_exists(name):
            raise TopicNotFound(f"Topic {name} does not exist")
        await gateway.service.unload(name)
        return no_content()

    async def delete_one(gateway: Gateway, name: TopicName, force: bool, request: Request | None) -> Response:
        query = dict(request.query_params) if request is not None else {}
        peer = await gateway.router.peer(name, authoritative=parse_authoritative(query))
        if peer is not None:
            if request is not None:
                return await gateway.forwarder.replay(peer, request, b"")
            upstream = await gateway.http.delete(
                f"{peer.url}/admin/v2/{name.path}", params={"force": "true", "authoritative": "true"}
            )
            return Response(upstream.content, status_code=upstream.status_code)
        if not name.is_partition and await gateway.router.partitions(name):
            raise Conflict(
                f"Topic {name} is a partitioned topic: delete it with DELETE …/{name.local}/partitions"
            )
        await gateway.service.delete_topic(
            name, force=force, delete_metadata=gateway.namespaces.delete_topic_metadata
        )
        return no_content()

    @router.delete(
        TOPIC_ROOT,
        status_code=204,
        summary="Delete a topic and its storage (412 with clients connected unless force)",
        responses=errors.responses(404, 409, 412),
    )
    async def delete_topic(name: TopicPath, request: Request, force: Force = False) -> Response:
        return await delete_one(get_gateway(), name, force, request)

    @router.delete(
        f"{TOPIC}/partitions",
        status_code=204,
        summary="Delete a partitioned topic and all its partitions",
        responses=errors.responses(404, 412),
    )
    async def delete_partitioned_topic(name: TopicPath, force: Force = False) -> Response:
        gateway = get_gateway()
        count = await _require_partitioned(gateway, name)
        if not force:
            for part_stats in (await fan_out(gateway, name, count, "stats")).values():
                subs = part_stats["subscriptions"].values()
                if part_stats["publishers"] or any(sub["consumers"] for sub in subs):
                    raise SubscriptionBusy(f"Partitioned topic {name} has connected clients; use force=true")
        for index in range(count):
            try:
                answer = await delete_one(gateway, name.partition(index), True, None)
            except TopicNotFound:
                continue
            if answer.status_code not in (204, 404):
                return answer
        await gateway.namespaces.delete_partitioned(name)
        return no_content()

    return router
