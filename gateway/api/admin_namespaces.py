"""Admin REST v2: tenants, namespaces, namespace policies, topic creation and partitions.

Owns: the HTTP shape of ``/admin/v2/tenants…`` and ``/admin/v2/namespaces/…``
(docs/compatibility.md §3.1), over a ``NamespaceStore``: policies, permissions,
bundles and unload.
Rule: the router is self-contained: its route class (``gateway.api.errors``) turns
every typed error (by ``code``) and every request-validation error into the one
``ErrorBody`` with Pulsar's status: 400 bad input, 404 unknown, 409 conflict, 412
invalid name or precondition, 503 etcd unavailable. Writes
answer 204 as Pulsar does. Bodies are read by ``admin_common.read_json`` (a body
sent without a JSON content type, curl's default, is JSON too) and parsed by
``gateway.meta.policies`` (so the rules live in one pure place); their schemas and
the admin parameters are documented by ``gateway.api.admin_schemas``. A body is
validated before the namespace is looked up (400 before 404), except a new
namespace's policies: its tenant is looked up first (404, as Pulsar), so the
412 of a backlog quota beyond the retention is a precondition of a real create.
"""

from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from gateway.api import admin_schemas as schemas
from gateway.api.admin_common import read_json
from gateway.api.admin_schemas import BundlePath, QuotaTypeQuery, RolePath, request_body
from gateway.api.errors import ErrorMappingRoute, responses
from gateway.api.paging import TOTAL_HEADER, PageParams
from gateway.api.route_docs import Namespace, Paging, Tenant
from gateway.meta.errors import NotFound
from gateway.meta.fields import bool_field
from gateway.meta.namespaces import NamespaceStore
from gateway.meta.persistence import ENSEMBLE_MAX, Persistence
from gateway.meta.policies import (
    AutoTopicCreation,
    BacklogQuota,
    Policies,
    Retention,
    TenantInfo,
    parse_actions,
    parse_enabled,
    parse_limit,
    parse_role,
    parse_strategy,
    parse_ttl_seconds,
)
from gateway.meta.schema_compat import Strategy
from gateway.names import NamespaceName, check_tenant

Force = Annotated[bool, Query(description="also delete what is inside")]
# unload(namespace, bundle or None for all) -> bundles asked to unload
Unloader = Callable[[NamespaceName, str | None], Awaitable[int]]

READ = responses(404, 412)
WRITE = responses(400, 404, 409, 412)
TENANT_EXAMPLE = {"adminRoles": [], "allowedClusters": ["folio"]}


def _no_content() -> Response:
    return Response(status_code=204)


def paged(response: Response, paging: PageParams, items: list[str]) -> list[str]:
    selected, total = paging.apply(items)
    response.headers[TOTAL_HEADER] = str(total)
    return selected


async def _no_unloader(_ns: NamespaceName, _bundle: str | None) -> int:
    return 0


def make_router(get_store: Callable[[], NamespaceStore], unload: Unloader = _no_unloader) -> APIRouter:
    """The admin router (prefix ``/admin/v2``); ``get_store`` is its dependency and
    ``unload`` asks the owners of a namespace's bundles to unload them."""
    router = APIRouter(prefix="/admin/v2", route_class=ErrorMappingRoute)
    Store = Annotated[NamespaceStore, Depends(get_store)]
    TENANTS: list[str | Enum] = ["admin-tenants"]
    NAMESPACES: list[str | Enum] = ["admin-namespaces"]

    # ------------------------------------------------------------ tenants

    @router.get("/tenants", summary="List tenants", tags=TENANTS, responses=READ)
    async def list_tenants(store: Store, paging: Paging, response: Response) -> list[str]:
        """Tenants; with ``search``/``offset``/``limit`` a page of them (total in X-Total-Count)."""
        return paged(response, paging, await store.list_tenants())

    @router.get("/tenants/{tenant}", summary="Get a tenant's info", tags=TENANTS, responses=READ)
    async def get_tenant(store: Store, tenant: Tenant) -> dict[str, Any]:
        return (await store.get_tenant(tenant)).to_json()

    @router.put(
        "/tenants/{tenant}",
        status_code=204,
        summary="Create a tenant (409 if it exists)",
        tags=TENANTS,
        responses=WRITE,
        openapi_extra=request_body(schemas.TenantInfo, "Pulsar TenantInfo", TENANT_EXAMPLE, required=False),
    )
    async def create_tenant(store: Store, tenant: Tenant, request: Request) -> Response:
        check_tenant(tenant)
        info = TenantInfo.from_json(await read_json(request, required=False))
        await store.create_tenant(tenant, info)
        return _no_content()

    @router.post(
        "/tenants/{tenant}",
        status_code=204,
        summary="Update a tenant's info",
        tags=TENANTS,
        responses=WRITE,
        openapi_extra=request_body(schemas.TenantInfo, "Pulsar TenantInfo", TENANT_EXAMPLE),
    )
    async def update_tenant(store: Store, tenant: Tenant, request: Request) -> Response:
        check_tenant(tenant)
        await store.update_tenant(tenant, TenantInfo.from_json(await read_json(request)))
        return _no_content()

    @router.delete(
        "/tenants/{tenant}",
        status_code=204,
        summary="Delete a tenant (409 if it has namespaces)",
        tags=TENANTS,
        responses=WRITE,
    )
    async def delete_tenant(store: Store, tenant: Tenant, force: Force = False) -> Response:
        await store.delete_tenant(tenant, force=force)
        return _no_content()

    # ------------------------------------------------------------ namespaces

    @router.get(
        "/namespaces/{tenant}",
        summary="List a tenant's namespaces",
        tags=NAMESPACES,
        responses=READ,
    )
    async def list_namespaces(store: Store, tenant: Tenant, paging: Paging, response: Response) -> list[str]:
        """Namespaces; with ``search``/``offset``/``limit`` a page of them (total in X-Total-Count)."""
        return paged(response, paging, await store.list_namespaces(tenant))

    @router.put(
        "/namespaces/{tenant}/{namespace}",
        status_code=204,
        summary="Create a namespace (body: optional Policies; 404 unknown tenant, 409 if it exists)",
        tags=NAMESPACES,
        responses=WRITE,
        openapi_extra=request_body(
            schemas.Policies,
            "Pulsar Policies of the new namespace (optional)",
            {"bundles": {"numBundles": 8}},
            required=False,
        ),
    )
    async def create_namespace(
        store: Store, tenant: Tenant, namespace: Namespace, request: Request
    ) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        payload = await read_json(request, required=False)
        await store.get_tenant(tenant)  # 404 first, as Pulsar: the policies' 412 is a real precondition
        await store.create_namespace(ns, None if payload is None else Policies.from_json(payload))
        return _no_content()

    @router.get(
        "/namespaces/{tenant}/{namespace}",
        summary="Get a namespace's policies",
        tags=NAMESPACES,
        responses=READ,
    )
    async def get_policies(store: Store, tenant: Tenant, namespace: Namespace) -> dict[str, Any]:
        return (await store.get_policies(NamespaceName.of(tenant, namespace))).to_json()

    @router.delete(
        "/namespaces/{tenant}/{namespace}",
        status_code=204,
        summary="Delete a namespace",
        tags=NAMESPACES,
        responses=WRITE,
    )
    async def delete_namespace(
        store: Store, tenant: Tenant, namespace: Namespace, force: Force = False
    ) -> Response:
        await store.delete_namespace(NamespaceName.of(tenant, namespace), force=force)
        return _no_content()

    @router.get(
        "/namespaces/{tenant}/{namespace}/bundles",
        summary="Bundle boundaries",
        tags=NAMESPACES,
        responses=READ,
    )
    async def get_bundles(store: Store, tenant: Tenant, namespace: Namespace) -> dict[str, Any]:
        return (await store.get_policies(NamespaceName.of(tenant, namespace))).bundles.to_json()

    @router.get(
        "/namespaces/{tenant}/{namespace}/topics",
        summary="Persistent topics, partitions included",
        tags=NAMESPACES,
        responses=READ,
    )
    async def namespace_topics(
        store: Store, tenant: Tenant, namespace: Namespace, paging: Paging, response: Response
    ) -> list[str]:
        """Topics; with ``search``/``offset``/``limit`` a page of them (total in X-Total-Count)."""
        return paged(response, paging, await store.list_topics(NamespaceName.of(tenant, namespace)))

    # ------------------------------------------------------------ permissions and unload

    @router.get(
        "/namespaces/{tenant}/{namespace}/permissions",
        summary="Roles and the actions granted to them",
        tags=NAMESPACES,
        responses=READ,
    )
    async def get_permissions(store: Store, tenant: Tenant, namespace: Namespace) -> dict[str, list[str]]:
        policies = await store.get_policies(NamespaceName.of(tenant, namespace))
        return {role: list(actions) for role, actions in sorted(policies.permissions.items())}

    @router.post(
        "/namespaces/{tenant}/{namespace}/permissions/{role}",
        status_code=204,
        summary="Grant actions (produce, consume, …) to a role",
        tags=NAMESPACES,
        responses=WRITE,
        openapi_extra=request_body(schemas.ACTIONS, "the actions granted", ["produce", "consume"]),
    )
    async def grant_permission(
        store: Store, tenant: Tenant, namespace: Namespace, role: RolePath, request: Request
    ) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        name, actions = parse_role(role), parse_actions(await read_json(request))
        await store.update_policies(ns, lambda p: p.grant(name, actions))
        return _no_content()

    @router.delete(
        "/namespaces/{tenant}/{namespace}/permissions/{role}",
        status_code=204,
        summary="Revoke a role's permissions",
        tags=NAMESPACES,
        responses=WRITE,
    )
    async def revoke_permission(
        store: Store, tenant: Tenant, namespace: Namespace, role: RolePath
    ) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        parse_role(role)
        if role not in (await store.get_policies(ns)).permissions:
            raise NotFound(f"role {role} has no permissions on {ns}")
        await store.update_policies(ns, lambda p: p.revoke(role))
        return _no_content()

    @router.put(
        "/namespaces/{tenant}/{namespace}/unload",
        status_code=204,
        summary="Unload every bundle of the namespace (its topics move on next use)",
        tags=NAMESPACES,
        responses=WRITE,
    )
    async def unload_namespace(store: Store, tenant: Tenant, namespace: Namespace) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        await store.get_policies(ns)  # 404 for an unknown namespace
        await unload(ns, None)
        return _no_content()

    @router.put(
        "/namespaces/{tenant}/{namespace}/{bundle:bundle}/unload",
        status_code=204,
        summary="Unload one bundle, named like 0x00000000_0x40000000",
        tags=NAMESPACES,
        responses=WRITE,
    )
    async def unload_namespace_bundle(
        store: Store, tenant: Tenant, namespace: Namespace, bundle: BundlePath
    ) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        names = (await store.get_policies(ns)).bundles.ranges()
        if bundle not in names:
            raise NotFound(f"{ns} has no bundle {bundle} (bundles: {', '.join(names)})")
        await unload(ns, bundle)
        return _no_content()

    # ------------------------------------------------------------ policies

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
            return _no_content()

        async def delete(store: Store, tenant: Tenant, namespace: Namespace) -> Response:
            await store.update_policies(NamespaceName.of(tenant, namespace), reset)
            return _no_content()

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
        return _no_content()

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
        return _no_content()

    return router
