"""Admin REST v2: the namespace policies (``/admin/v2/namespaces/{t}/{ns}/<policy>``).

Owns: GET / POST (PUT where Pulsar uses it) / DELETE of each single namespace
policy (retention, message TTL, deduplication, consumer and producer limits,
persistence, schema compatibility and auto-update, auto topic creation, the
statistics schedule) and the backlog quotas, over a ``NamespaceStore``. Rule:
a body is validated by the policy's pure parser in ``gateway.meta.policies``
before the namespace is looked up (400 before 404), then written in one
``update_policies`` (a retention that a backlog quota would outlive is 412);
writes answer 204 as Pulsar does.
"""

from collections.abc import Callable
from enum import Enum
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from gateway.api import admin_schemas as schemas
from gateway.api.admin_common import no_content, read_json
from gateway.api.admin_schemas import QuotaTypeQuery, request_body
from gateway.api.admin_tenants import READ, WRITE
from gateway.api.route_docs import Namespace, Tenant
from gateway.meta.fields import bool_field
from gateway.meta.namespaces import NamespaceStore
from gateway.meta.persistence import ENSEMBLE_MAX, Persistence
from gateway.meta.policies import (
    AutoTopicCreation,
    BacklogQuota,
    Policies,
    Retention,
    parse_analytics_interval,
    parse_enabled,
    parse_limit,
    parse_strategy,
    parse_ttl_seconds,
)
from gateway.meta.schema_compat import Strategy
from gateway.names import NamespaceName


def add_routes(router: APIRouter, get_store: Callable[[], NamespaceStore]) -> None:
    """Add the namespace policy routes to ``router`` (prefix ``/admin/v2``);
    ``get_store`` is their dependency."""
    Store = Annotated[NamespaceStore, Depends(get_store)]
    NAMESPACES: list[str | Enum] = ["admin-namespaces"]

    def policy_routes(
        path: str,
        name: str,
        read: Callable[[Policies], Any],
        write: Callable[[Policies, Any], Policies],
        reset: Callable[[Policies], Policies],
        body: dict[str, Any],
        put: bool = False,
    ) -> None:
        """GET / POST / DELETE of one namespace policy at ``…/{path}`` (``body``: the
        POST's ``openapi_extra``); ``put``: PUT sets it too (Pulsar's verb for some)."""
        route = f"/namespaces/{{tenant}}/{{namespace}}/{path}"

        async def get(store: Store, tenant: Tenant, namespace: Namespace) -> Any:
            return read(await store.get_policies(NamespaceName.of(tenant, namespace)))

        async def post(store: Store, tenant: Tenant, namespace: Namespace, request: Request) -> Response:
            ns = NamespaceName.of(tenant, namespace)
            value = await read_json(request)
            write(Policies(), value)  # validate before touching etcd
            await store.update_policies(ns, lambda p: write(p, value))
            return no_content()

        async def delete(store: Store, tenant: Tenant, namespace: Namespace) -> Response:
            await store.update_policies(NamespaceName.of(tenant, namespace), reset)
            return no_content()

        common: dict[str, Any] = {"tags": NAMESPACES}
        router.add_api_route(
            route, get, methods=["GET"], name=f"get_{name}", summary=f"Get {path}", responses=READ, **common
        )
        router.add_api_route(
            route,
            post,
            methods=["POST"],
            status_code=204,
            name=f"set_{name}",
            summary=f"Set {path}",
            responses=WRITE,
            openapi_extra=body,
            **common,
        )
        if put:
            router.add_api_route(
                route,
                post,
                methods=["PUT"],
                status_code=204,
                name=f"put_{name}",
                summary=f"Set {path}",
                responses=WRITE,
                openapi_extra=body,
                **common,
            )
        router.add_api_route(
            route,
            delete,
            methods=["DELETE"],
            status_code=204,
            name=f"remove_{name}",
            summary=f"Remove {path}",
            responses=WRITE,
            **common,
        )

    policy_routes(
        "retention",
        "retention",
        lambda p: p.retention.to_json(),
        lambda p, v: p.replace(retention=Retention.from_json(v)),
        lambda p: p.replace(retention=Retention()),
        request_body(
            schemas.RetentionPolicies,
            "Pulsar RetentionPolicies (412 if a backlog quota would outlive it)",
            {"retentionTimeInMinutes": 60, "retentionSizeInMB": 1024},
        ),
    )
    policy_routes(
        "messageTTL",
        "message_ttl",
        lambda p: p.message_ttl_seconds,
        lambda p, v: p.replace(message_ttl_seconds=parse_ttl_seconds(v)),
        lambda p: p.replace(message_ttl_seconds=None),
        request_body(schemas.TTL_SECONDS, "seconds a message may stay unacknowledged (0 = no TTL)", 3600),
    )
    policy_routes(
        "deduplication",
        "deduplication",
        lambda p: p.deduplication_enabled,
        lambda p, v: p.replace(deduplication_enabled=parse_enabled(v, "deduplication")),
        lambda p: p.replace(deduplication_enabled=None),
        request_body(schemas.ENABLED, "whether producers' sequence ids deduplicate messages", True),
    )
    policy_routes(
        "maxConsumersPerSubscription",
        "max_consumers_per_subscription",
        lambda p: p.max_consumers_per_subscription,
        lambda p, v: p.replace(max_consumers_per_subscription=parse_limit(v, "maxConsumersPerSubscription")),
        lambda p: p.replace(max_consumers_per_subscription=None),
        request_body(schemas.LIMIT, "most consumers of one subscription (0 = no limit)", 10),
    )
    policy_routes(
        "maxProducersPerTopic",
        "max_producers_per_topic",
        lambda p: p.max_producers_per_topic,
        lambda p, v: p.replace(max_producers_per_topic=parse_limit(v, "maxProducersPerTopic")),
        lambda p: p.replace(max_producers_per_topic=None),
        request_body(schemas.LIMIT, "most producers of one topic (0 = no limit)", 10),
    )
    policy_routes(
        "maxConsumersPerTopic",
        "max_consumers_per_topic",
        lambda p: p.max_consumers_per_topic,
        lambda p, v: p.replace(max_consumers_per_topic=parse_limit(v, "maxConsumersPerTopic")),
        lambda p: p.replace(max_consumers_per_topic=None),
        request_body(schemas.LIMIT, "most consumers and readers of one topic (0 = no limit)", 100),
    )
    policy_routes(
        "maxSubscriptionsPerTopic",
        "max_subscriptions_per_topic",
        lambda p: p.max_subscriptions_per_topic,
        lambda p, v: p.replace(max_subscriptions_per_topic=parse_limit(v, "maxSubscriptionsPerTopic")),
        lambda p: p.replace(max_subscriptions_per_topic=None),
        request_body(schemas.LIMIT, "most durable subscriptions of one topic (0 = no limit)", 100),
    )
    policy_routes(
        "maxTopicsPerNamespace",
        "max_topics_per_namespace",
        lambda p: p.max_topics_per_namespace,
        lambda p, v: p.replace(max_topics_per_namespace=parse_limit(v, "maxTopicsPerNamespace")),
        lambda p: p.replace(max_topics_per_namespace=None),
        request_body(schemas.LIMIT, "most topics of the namespace, partitions counted (0 = no limit)", 1000),
    )
    policy_routes(
        "persistence",
        "persistence",
        lambda p: None if p.persistence is None else p.persistence.to_json(),
        lambda p, v: p.replace(persistence=Persistence.from_json(v)),
        lambda p: p.replace(persistence=None),
        request_body(
            schemas.PersistencePolicies,
            "Pulsar PersistencePolicies: the quorums of the namespace's topics' next ledgers "
            f"(400 unless 1 <= ack <= write <= ensemble <= {ENSEMBLE_MAX})",
            {
                "bookkeeperEnsemble": 3,
                "bookkeeperWriteQuorum": 2,
                "bookkeeperAckQuorum": 2,
                "managedLedgerMaxMarkDeleteRate": 0.0,
            },
        ),
    )
    policy_routes(
        "schemaCompatibilityStrategy",
        "schema_compatibility_strategy",
        lambda p: p.schema_compatibility_strategy.value,
        lambda p, v: p.replace(schema_compatibility_strategy=parse_strategy(v)),
        lambda p: p.replace(schema_compatibility_strategy=Strategy.UNDEFINED),
        request_body(
            schemas.SCHEMA_STRATEGY,
            "Pulsar SchemaCompatibilityStrategy of the namespace's topics (UNDEFINED means FULL)",
            "BACKWARD",
        ),
        put=True,
    )
    policy_routes(
        "isAllowAutoUpdateSchema",
        "is_allow_auto_update_schema",
        lambda p: p.is_allow_auto_update_schema,
        lambda p, v: p.replace(is_allow_auto_update_schema=bool_field(v, "isAllowAutoUpdateSchema")),
        lambda p: p.replace(is_allow_auto_update_schema=True),
        request_body(schemas.ENABLED, "whether producers may add schema versions (default true)", False),
    )
    policy_routes(
        "autoTopicCreation",
        "auto_topic_creation",
        lambda p: p.auto_topic_creation.to_json(),
        lambda p, v: p.replace(auto_topic_creation=AutoTopicCreation.from_json(v)),
        lambda p: p.replace(auto_topic_creation=AutoTopicCreation()),
        request_body(
            schemas.AutoTopicCreationOverride,
            "Pulsar AutoTopicCreationOverride",
            {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 4},
        ),
    )
    policy_routes(  # Folio's: the namespace's own statistics schedule (docs/decisions/0012)
        "analyticsInterval",
        "analytics_interval",
        lambda p: p.analytics_interval_seconds,
        lambda p, v: p.replace(analytics_interval_seconds=parse_analytics_interval(v)),
        lambda p: p.replace(analytics_interval_seconds=None),
        request_body(
            schemas.ANALYTICS_INTERVAL,
            "seconds between scheduled statistics runs of the namespace's topics "
            "(0 = on demand only; unset = the cluster's /admin/v2/analytics/settings)",
            60,
        ),
    )

    @router.get(
        "/namespaces/{tenant}/{namespace}/backlogQuotaMap",
        summary="Backlog quotas by type",
        tags=NAMESPACES,
        responses=READ,
    )
    async def get_backlog_quotas(store: Store, tenant: Tenant, namespace: Namespace) -> dict[str, Any]:
        policies = await store.get_policies(NamespaceName.of(tenant, namespace))
        return {kind: quota.to_json() for kind, quota in sorted(policies.backlog_quotas.items())}

    @router.post(
        "/namespaces/{tenant}/{namespace}/backlogQuota",
        status_code=204,
        summary="Set a backlog quota (412 if it exceeds the namespace's retention)",
        tags=NAMESPACES,
        responses=WRITE,
        openapi_extra=request_body(
            schemas.BacklogQuota,
            "Pulsar BacklogQuota",
            {"limitSize": 10737418240, "policy": "producer_request_hold"},
        ),
    )
    async def set_backlog_quota(
        store: Store,
        tenant: Tenant,
        namespace: Namespace,
        request: Request,
        quota_kind: QuotaTypeQuery = "destination_storage",
    ) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        quota = BacklogQuota.from_json(await read_json(request))
        await store.update_policies(
            ns, lambda p: p.replace(backlog_quotas={**p.backlog_quotas, quota_kind: quota})
        )
        return no_content()

    @router.delete(
        "/namespaces/{tenant}/{namespace}/backlogQuota",
        status_code=204,
        summary="Remove a backlog quota",
        tags=NAMESPACES,
        responses=WRITE,
    )
    async def remove_backlog_quota(
        store: Store,
        tenant: Tenant,
        namespace: Namespace,
        quota_kind: QuotaTypeQuery = "destination_storage",
    ) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        await store.update_policies(
            ns,
            lambda p: p.replace(
                backlog_quotas={k: q for k, q in p.backlog_quotas.items() if k != quota_kind}
            ),
        )
        return no_content()
