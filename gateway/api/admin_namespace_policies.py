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
from dataclasses import dataclass
from enum import Enum
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from gateway.api import admin_models
from gateway.api.admin_common import NamespacePath, no_content, read_json
from gateway.api.admin_models import QuotaTypeQuery, request_body
from gateway.api.admin_tenants import READ, WRITE
from gateway.api.route_docs import Namespace, Tenant
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
from gateway.meta.policy_fields import bool_field
from gateway.meta.schema_compat import Strategy
from gateway.names import NamespaceName


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """One single-valued namespace policy: its URL segment ``path``, its route name
    stem ``name``, the ``Policies`` field it lives in, the pure ``parse`` of a body,
    the ``reset`` value DELETE restores, the POST's ``openapi_extra`` ``body``, and
    whether PUT sets it too (Pulsar's verb for some)."""

    path: str
    name: str
    field: str
    parse: Callable[[Any], Any]
    reset: Any
    body: dict[str, Any]
    put: bool = False

    def read(self, policies: Policies) -> Any:
        """The policy's JSON value: parts by ``to_json``, enums by value."""
        value = getattr(policies, self.field)
        if isinstance(value, Enum):
            return value.value
        return value.to_json() if hasattr(value, "to_json") else value

    def write(self, policies: Policies, value: Any) -> Policies:
        return policies.replace(**{self.field: self.parse(value)})

    def remove(self, policies: Policies) -> Policies:
        return policies.replace(**{self.field: self.reset})


def _limit(path: str, field: str, description: str, example: int) -> PolicySpec:
    """A most-of-something limit (0 = no limit); unset when removed."""
    return PolicySpec(
        path,
        field,
        field,
        partial(parse_limit, what=path),
        None,
        request_body(admin_models.LIMIT, description, example),
    )


POLICIES: tuple[PolicySpec, ...] = (
    PolicySpec(
        "retention",
        "retention",
        "retention",
        Retention.from_json,
        Retention(),
        request_body(
            admin_models.RetentionPolicies,
            "Pulsar RetentionPolicies (412 if a backlog quota would outlive it)",
            {"retentionTimeInMinutes": 60, "retentionSizeInMB": 1024},
        ),
    ),
    PolicySpec(
        "messageTTL",
        "message_ttl",
        "message_ttl_seconds",
        parse_ttl_seconds,
        None,
        request_body(
            admin_models.TTL_SECONDS, "seconds a message may stay unacknowledged (0 = no TTL)", 3600
        ),
    ),
    PolicySpec(
        "deduplication",
        "deduplication",
        "deduplication_enabled",
        partial(parse_enabled, what="deduplication"),
        None,
        request_body(admin_models.ENABLED, "whether producers' sequence ids deduplicate messages", True),
    ),
    _limit(
        "maxConsumersPerSubscription",
        "max_consumers_per_subscription",
        "most consumers of one subscription (0 = no limit)",
        10,
    ),
    _limit(
        "maxProducersPerTopic", "max_producers_per_topic", "most producers of one topic (0 = no limit)", 10
    ),
    _limit(
        "maxConsumersPerTopic",
        "max_consumers_per_topic",
        "most consumers and readers of one topic (0 = no limit)",
        100,
    ),
    _limit(
        "maxSubscriptionsPerTopic",
        "max_subscriptions_per_topic",
        "most durable subscriptions of one topic (0 = no limit)",
        100,
    ),
    _limit(
        "maxTopicsPerNamespace",
        "max_topics_per_namespace",
        "most topics of the namespace, partitions counted (0 = no limit)",
        1000,
    ),
    PolicySpec(
        "persistence",
        "persistence",
        "persistence",
        Persistence.from_json,
        None,
        request_body(
            admin_models.PersistencePolicies,
            "Pulsar PersistencePolicies: the quorums of the namespace's topics' next ledgers "
            f"(400 unless 1 <= ack <= write <= ensemble <= {ENSEMBLE_MAX})",
            {
                "bookkeeperEnsemble": 3,
                "bookkeeperWriteQuorum": 2,
                "bookkeeperAckQuorum": 2,
                "managedLedgerMaxMarkDeleteRate": 0.0,
            },
        ),
    ),
    PolicySpec(
        "schemaCompatibilityStrategy",
        "schema_compatibility_strategy",
        "schema_compatibility_strategy",
        parse_strategy,
        Strategy.UNDEFINED,
        request_body(
            admin_models.SCHEMA_STRATEGY,
            "Pulsar SchemaCompatibilityStrategy of the namespace's topics (UNDEFINED means FULL)",
            "BACKWARD",
        ),
        put=True,
    ),
    PolicySpec(
        "isAllowAutoUpdateSchema",
        "is_allow_auto_update_schema",
        "is_allow_auto_update_schema",
        partial(bool_field, what="isAllowAutoUpdateSchema"),
        True,
        request_body(admin_models.ENABLED, "whether producers may add schema versions (default true)", False),
    ),
    PolicySpec(
        "autoTopicCreation",
        "auto_topic_creation",
        "auto_topic_creation",
        AutoTopicCreation.from_json,
        AutoTopicCreation(),
        request_body(
            admin_models.AutoTopicCreationOverride,
            "Pulsar AutoTopicCreationOverride",
            {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 4},
        ),
    ),
    PolicySpec(  # Folio's: the namespace's own statistics schedule (docs/decisions/0012)
        "analyticsInterval",
        "analytics_interval",
        "analytics_interval_seconds",
        parse_analytics_interval,
        None,
        request_body(
            admin_models.ANALYTICS_INTERVAL,
            "seconds between scheduled statistics runs of the namespace's topics "
            "(0 = on demand only; unset = the cluster's /admin/v2/analytics/settings)",
            60,
        ),
    ),
)


def add_routes(router: APIRouter, get_store: Callable[[], NamespaceStore]) -> None:
    """Add the namespace policy routes to ``router`` (prefix ``/admin/v2``);
    ``get_store`` is their dependency."""
    Store = Annotated[NamespaceStore, Depends(get_store)]
    NAMESPACES: list[str | Enum] = ["admin-namespaces"]
    for spec in POLICIES:
        _add_policy_routes(router, get_store, NAMESPACES, spec)

    @router.get(
        "/namespaces/{tenant}/{namespace}/backlogQuotaMap",
        summary="Backlog quotas by type",
        tags=NAMESPACES,
        responses=READ,
    )
    async def get_backlog_quotas(store: Store, ns: NamespacePath) -> dict[str, Any]:
        policies = await store.get_policies(ns)
        return {kind: quota.to_json() for kind, quota in sorted(policies.backlog_quotas.items())}

    @router.post(
        "/namespaces/{tenant}/{namespace}/backlogQuota",
        status_code=204,
        summary="Set a backlog quota (412 if it exceeds the namespace's retention)",
        tags=NAMESPACES,
        responses=WRITE,
        openapi_extra=request_body(
            admin_models.BacklogQuota,
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


def _add_policy_routes(
    router: APIRouter, get_store: Callable[[], NamespaceStore], tags: list[str | Enum], spec: PolicySpec
) -> None:
    """GET / POST (and PUT if ``spec.put``) / DELETE of ``spec``'s policy at ``…/{spec.path}``."""
    Store = Annotated[NamespaceStore, Depends(get_store)]
    route = f"/namespaces/{{tenant}}/{{namespace}}/{spec.path}"

    async def get(store: Store, ns: NamespacePath) -> Any:
        return spec.read(await store.get_policies(ns))

    async def post(store: Store, ns: NamespacePath, request: Request) -> Response:
        value = await read_json(request)
        spec.write(Policies(), value)  # validate before touching etcd
        await store.update_policies(ns, lambda p: spec.write(p, value))
        return no_content()

    async def delete(store: Store, ns: NamespacePath) -> Response:
        await store.update_policies(ns, spec.remove)
        return no_content()

    writes: dict[str, Any] = {"status_code": 204, "responses": WRITE, "tags": tags}
    summary = f"Set {spec.path}"
    router.add_api_route(
        route,
        get,
        methods=["GET"],
        name=f"get_{spec.name}",
        summary=f"Get {spec.path}",
        responses=READ,
        tags=tags,
    )
    router.add_api_route(
        route,
        post,
        methods=["POST"],
        name=f"set_{spec.name}",
        summary=summary,
        openapi_extra=spec.body,
        **writes,
    )
    if spec.put:
        router.add_api_route(
            route,
            post,
            methods=["PUT"],
            name=f"put_{spec.name}",
            summary=summary,
            openapi_extra=spec.body,
            **writes,
        )
    router.add_api_route(
        route, delete, methods=["DELETE"], name=f"remove_{spec.name}", summary=f"Remove {spec.path}", **writes
    )
