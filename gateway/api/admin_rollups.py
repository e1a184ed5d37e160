"""Admin REST (Folio): the dashboard's cluster-wide list views and throughput history.

Owns: the HTTP shape of ``/admin/v2/cluster/{tenants,namespaces/…,topics/…,
subscriptions,throughput}`` (rows built by the pure ``gateway.api.rollups`` and
``gateway.api.throughput``) and of the per-gateway reads they gather:
``/admin/v2/broker-stats/subscriptions`` and ``/admin/v2/broker-stats/throughput``
(thin asyncio shell). Rules:
- a cluster view asks every live gateway (``registry.live()``), at most
  ``FANOUT_MAX`` at once with a ``FANOUT_TIMEOUT_S`` timeout; a gateway that does
  not answer is named in ``X-Folio-Unreachable`` and its topics show as not loaded -
  never a failed request;
- list views answer a plain JSON array of rows, sorted (``sort``, one of the view's
  enum in ``rollups``, declared in the OpenAPI document; ``order``; by backlog,
  largest first, unless asked) and paged (``search``, ``offset``,
  ``limit``) with the count before paging in ``X-Total-Count``;
- a subscription's time lag is read from the log: the publish time of the first
  message after its mark-delete position, for at most ``LAG_READS_MAX`` backlogged
  subscriptions per gateway and request (the others answer ``lagMs: null``), and
  once per mark-delete position (a subscription that does not move is read once);
- a gateway answers at most ``SUBSCRIPTION_ROWS_BYTES`` of subscription rows
  (``X-Folio-Truncated`` when some were left out; the cluster view names those
  gateways in it).
- a topic no live gateway has loaded shows its stored figures (size, backlog
  per subscription from its persisted cursor, subscriptions:
  ``gateway.api.stored_views``), marked ``figures: "stored"`` with ``asOfMs``;
  a loaded topic's rows are ``figures: "live"`` (docs/decisions/0016).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any, Literal

import httpx
from fastapi import APIRouter, Depends, Query, Response

from gateway.api import errors, paging, rollups, throughput
from gateway.api.admin_common import json_response
from gateway.api.messaging_models import NAMESPACE_SCHEMA, TENANT_SCHEMA
from gateway.api.route_docs import Namespace, Tenant
from gateway.api.stored_figures import live
from gateway.api.stored_views import StoredFigures, path_prefix
from gateway.api.topic_summary import broker_topic_stats, flatten
from gateway.broker.topic_stats import subscription_stats
from gateway.meta.errors import NotFound
from gateway.names import InvalidName, NamespaceName, TopicName, check_tenant
from storage.errors import StorageError
from storage.formats.positions import Position

if TYPE_CHECKING:
    from gateway.broker.subscription import Subscription
    from gateway.broker.topic import Topic
    from gateway.process import Gateway

FANOUT_MAX = 8
FANOUT_TIMEOUT_S = 3.0
LAG_READS_MAX = 256
LAG_READ_TIMEOUT_S = 1.0
OLDEST_CACHE_MAX = 20_000  # (topic, subscription) -> position and time: ~4 MiB at most
SUBSCRIPTION_ROWS_BYTES = 4 * 1024 * 1024  # one gateway's answer: ~13,000 rows
UNREACHABLE_HEADER = "X-Folio-Unreachable"
TRUNCATED_HEADER = "X-Folio-Truncated"
TAGS: list[Any] = ["admin-cluster"]


Order = Annotated[Literal["asc", "desc"], Query(description="sort order")]
Search = Annotated[
    str | None,
    Query(max_length=paging.SEARCH_MAX, description="only rows whose name (or topic) contains this text"),
]
Offset = Annotated[int, Query(ge=0, le=paging.OFFSET_MAX, description="matching rows to leave out first")]
Limit = Annotated[int | None, Query(ge=0, le=paging.LIMIT_MAX, description="most rows to answer")]
SORT_DOC = "field to sort by"


def row_page(
    order: Order = "desc",
    search: Search = None,
    offset: Offset = 0,
    limit: Limit = None,
) -> rollups.RowQuery:
    """The order, filter and page of a row view; its ``sort`` is the view's own parameter."""
    return rollups.RowQuery(descending=order == "desc", search=search, offset=offset, limit=limit)


# FastAPI documents a dependency's own parameters before its dependencies': ``sort``
# comes first, then ``order``, ``search``, ``offset`` and ``limit``.
RowPage = Annotated[rollups.RowQuery, Depends(row_page)]


def group_query(
    page: RowPage,
    sort: Annotated[rollups.GroupSort, Query(description=SORT_DOC)] = rollups.GroupSort.MSG_BACKLOG,
) -> rollups.RowQuery:
    return replace(page, sort=sort.value)


def topic_query(
    page: RowPage,
    sort: Annotated[rollups.TopicSort, Query(description=SORT_DOC)] = rollups.TopicSort.MSG_BACKLOG,
) -> rollups.RowQuery:
    return replace(page, sort=sort.value)


def subscription_query(
    page: RowPage,
    sort: Annotated[
        rollups.SubscriptionSort, Query(description=SORT_DOC)
    ] = rollups.SubscriptionSort.MSG_BACKLOG,
) -> rollups.RowQuery:
    return replace(page, sort=sort.value)


GroupRows = Annotated[rollups.RowQuery, Depends(group_query)]
TopicRows = Annotated[rollups.RowQuery, Depends(topic_query)]
SubscriptionRows = Annotated[rollups.RowQuery, Depends(subscription_query)]


async def _oldest_publish_ms(topic: Topic, sub: Subscription) -> int | None:
    """Publish time of the first message after ``sub``'s mark-delete position."""
    position = topic.log.layout.next_position(sub.cursor.mark_delete)
    if position is None:
        return None
    with contextlib.suppress(StorageError, TimeoutError):
        messages = await asyncio.wait_for(topic.decoded.load_messages(position), LAG_READ_TIMEOUT_S)
        if messages:
            return messages[0].publish_time_ms
    return None


class RollupViews:
    def __init__(self, gateway: Gateway, stored: StoredFigures) -> None:
        self.gateway = gateway
        self.stored = stored
        # (topic, subscription) -> (mark-delete position, publish time of the entry after it)
        self._oldest: dict[tuple[str, str], tuple[Position, int]] = {}

    async def _oldest_of(self, topic: Topic, name: str, sub: Subscription) -> int | None:
        """``_oldest_publish_ms`` once per mark-delete position (the view refreshes every
        few seconds; a subscription that does not move is read once)."""
        key, mark = (str(topic.name), name), sub.cursor.mark_delete
        cached = self._oldest.get(key)
        if cached is not None and cached[0] == mark:
            return cached[1]
        oldest = await _oldest_publish_ms(topic, sub)
        if oldest is not None:  # a failed read is tried again next time
            if len(self._oldest) >= OLDEST_CACHE_MAX:
                self._oldest.clear()
            self._oldest[key] = (mark, oldest)
        return oldest

    async def gather(
        self, path: str, local: Callable[[], Awaitable[Any]], truncated: list[str] | None = None
    ) -> tuple[dict[str, Any], list[str]]:
        """Every live gateway's answer to ``path`` (this one's from ``local``), and the
        gateways that did not answer; those that said they left rows out
        (``TRUNCATED_HEADER``) are added to ``truncated``."""
        gw = self.gateway
        me = gw.config.gateway_id
        limit = asyncio.Semaphore(FANOUT_MAX)
        failed: list[str] = []

        async def one(gateway_id: str, url: str) -> Any:
            if gateway_id == me:
                return await local()
            async with limit:
                try:
                    response = await gw.http.get(f"{url}{path}", timeout=FANOUT_TIMEOUT_S)
                    response.raise_for_status()
                    if truncated is not None and response.headers.get(TRUNCATED_HEADER):
                        truncated.append(gateway_id)
                    return response.json()
                except (httpx.HTTPError, ValueError):
                    failed.append(gateway_id)
                    return None

        live = {gid: info.http_url for gid, info in gw.registry.live().items()}
        live.setdefault(me, gw.config.http_url)
        ids = sorted(live)
        answers = await asyncio.gather(*(one(gid, live[gid]) for gid in ids))
        return {gid: a for gid, a in zip(ids, answers, strict=True) if a is not None}, sorted(failed)

    async def summaries(self, prefix: str = "") -> tuple[list[dict[str, Any]], list[str]]:
        """Every topic's summary under the stored-name ``prefix`` (``stored_views.path_prefix``):
        live from the gateway that has it loaded, else its stored figures."""

        async def local() -> Any:
            gw = self.gateway
            return broker_topic_stats(gw.service.topics.values(), gw.ownership.owned_bundles())

        answers, failed = await self.gather("/admin/v2/broker-stats/topics", local)
        now = self.gateway.clock.now_ms()
        out = [live(s, now) for body in answers.values() if isinstance(body, dict) for s in flatten(body)]
        stored, _ = await self.stored.topics(prefix, {str(s.get("topic")) for s in out})
        return out + [figures.summary for figures in stored.values()], failed

    async def local_subscriptions(self, prefix: str) -> tuple[list[dict[str, Any]], bool]:
        """Subscriptions of this gateway's topics whose name starts with ``prefix``, as
        many as fit in ``SUBSCRIPTION_ROWS_BYTES`` of JSON; and whether some did not."""
        now = self.gateway.clock.now_ms()
        found: list[tuple[Topic, str, Subscription]] = []
        for name, topic in list(self.gateway.service.topics.items()):
            if topic.closed or not str(name).startswith(prefix):
                continue
            subs = [*topic.subscriptions.items(), *topic.readers.items()]
            found.extend((topic, n, sub) for n, sub in subs if not rollups.is_dashboard_reader(n))
        rows = (
            rollups.subscription_row(str(topic.name), n, subscription_stats(topic, sub, now), None, now)
            for topic, n, sub in found
        )
        kept, truncated = rollups.take_within(rows, SUBSCRIPTION_ROWS_BYTES)
        backlogged = [i for i, row in enumerate(kept) if row["msgBacklog"] > 0][:LAG_READS_MAX]
        reads = await asyncio.gather(*(self._oldest_of(*found[i]) for i in backlogged))
        for i, oldest in zip(backlogged, reads, strict=True):
            kept[i] = rollups.with_lag(kept[i], oldest, now)
        return kept, truncated


def _rows(
    rows: list[dict[str, Any]], query: rollups.RowQuery, fields: tuple[str, ...], failed: list[str]
) -> Response:
    page, total = query.apply(rows, fields)
    response = json_response(page, total=total)
    if failed:
        response.headers[UNREACHABLE_HEADER] = ",".join(failed)
    return response


def make_router(get_gateway: Callable[[], Gateway], stored: StoredFigures) -> APIRouter:
    router = APIRouter(prefix="/admin/v2", tags=TAGS, route_class=errors.ErrorMappingRoute)
    views = RollupViews(get_gateway(), stored)
    READ = errors.responses(400, 404)
    NAMED = errors.responses(400, 404, 412)  # a tenant or namespace name that is not one: 412, as Pulsar

    @router.get(
        "/broker-stats/throughput",
        summary="This gateway's throughput history (msg/s in and out of the topics it owns, per load report)",
        responses=READ,
    )
    async def get_gateway_throughput(since: int = 0) -> list[dict[str, Any]]:
        return views.gateway.throughput.samples(since)

    @router.get(
        "/broker-stats/subscriptions",
        summary="Subscriptions of the topics this gateway owns, with lag in messages and time",
        responses=READ,
    )
    async def get_gateway_subscriptions(
        prefix: Annotated[str, Query(max_length=1024, description="only topics whose name starts so")] = "",
    ) -> Response:
        rows, truncated = await views.local_subscriptions(prefix)
        response = json_response(rows)
        if truncated:
            response.headers[TRUNCATED_HEADER] = "true"
        return response

    @router.get(
        "/cluster/throughput",
        summary="The cluster's throughput history: every gateway's samples added up per 5 s",
        responses=READ,
    )
    async def get_cluster_throughput(since: int = 0) -> Response:
        async def local() -> Any:
            return views.gateway.throughput.samples(since)

        answers, failed = await views.gather(f"/admin/v2/broker-stats/throughput?since={since}", local)
        series = {gid: body for gid, body in answers.items() if isinstance(body, list)}
        response = json_response(
            {"samples": throughput.merge(series, views.gateway.clock.now_ms()), "gateways": sorted(series)}
        )
        if failed:
            response.headers[UNREACHABLE_HEADER] = ",".join(failed)
        return response

    @router.get("/cluster/tenants", summary="Tenants with rates, backlog, size", responses=READ)
    async def get_tenant_rows(query: GroupRows) -> Response:
        tenants = await views.gateway.namespaces.list_tenants()
        summaries, failed = await views.summaries()
        rows = rollups.group_rows(tenants, summaries, lambda t: _part(t, 0))
        return _rows(rows, query, rollups.GROUP_FIELDS, failed)

    @router.get(
        "/cluster/namespaces/{tenant}", summary="A tenant's namespaces with rates, backlog", responses=NAMED
    )
    async def get_namespace_rows(tenant: Tenant, query: GroupRows) -> Response:
        names = [n.rsplit("/", 1)[-1] for n in await views.gateway.namespaces.list_namespaces(tenant)]
        summaries, failed = await views.summaries(path_prefix(tenant))
        mine = [s for s in summaries if _part(str(s.get("topic", "")), 0) == tenant]
        rows = rollups.group_rows(names, mine, lambda t: _part(t, 1))
        return _rows(rows, query, rollups.GROUP_FIELDS, failed)

    @router.get(
        "/cluster/topics/{tenant}/{namespace}",
        summary="A namespace's topics (partitioned topics and their partitions) with rates, backlog, size",
        responses=NAMED,
    )
    async def get_topic_rows(tenant: Tenant, namespace: Namespace, query: TopicRows) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        names = [str(TopicName.parse(t)) for t in await views.gateway.namespaces.list_topics(ns)]
        partitioned = [str(TopicName.parse(t)) for t in await views.gateway.namespaces.list_partitioned(ns)]
        summaries, failed = await views.summaries(path_prefix(tenant, namespace))
        rows = rollups.topic_rows(names, {str(s.get("topic")): s for s in summaries}, partitioned)
        return _rows(rows, query, rollups.TOPIC_FIELDS, failed)

    @router.get(
        "/cluster/subscriptions",
        summary="Subscriptions across topics (optionally of one tenant or namespace) with lag",
        responses=NAMED,
    )
    async def get_subscription_rows(
        query: SubscriptionRows,
        tenant: Annotated[
            str | None,
            Query(json_schema_extra=TENANT_SCHEMA, description="only this tenant's"),
        ] = None,
        namespace: Annotated[
            str | None,
            Query(
                json_schema_extra=NAMESPACE_SCHEMA,
                description="only this namespace's (needs tenant)",
            ),
        ] = None,
    ) -> Response:
        prefix = ""
        if namespace is not None and tenant is None:
            raise NotFound("a namespace needs its tenant")
        if tenant is not None:  # a given name is checked, an empty one too (412)
            check_tenant(tenant)
            scope = NamespaceName.of(tenant, namespace) if namespace is not None else tenant
            prefix = f"persistent://{scope}/"

        truncated: list[str] = []

        async def local() -> Any:
            rows, cut = await views.local_subscriptions(prefix)
            if cut:
                truncated.append(views.gateway.config.gateway_id)
            return rows

        answers, failed = await views.gather(
            f"/admin/v2/broker-stats/subscriptions?{httpx.QueryParams(prefix=prefix)}", local, truncated
        )
        now = views.gateway.clock.now_ms()
        found = [r for body in answers.values() if isinstance(body, list) for r in body]
        rows = [live(r, now) for r in found if isinstance(r, dict)]
        loaded = {str(r.get("topic")) for r in rows}
        stored, _ = await views.stored.topics(path_prefix(tenant, namespace), loaded)
        rows += [row for figures in stored.values() for row in figures.subscriptions]
        response = _rows(rows, query, rollups.SUBSCRIPTION_FIELDS, failed)
        if truncated:
            response.headers[TRUNCATED_HEADER] = ",".join(sorted(truncated))
        return response

    return router


def _part(topic: str, index: int) -> str | None:
    """Tenant (0) or namespace (1) of a full topic name; None if it is not one."""
    try:
        name = TopicName.parse(topic)
    except InvalidName:
        return None
    return name.tenant if index == 0 else name.namespace
