"""Admin REST v2: namespaces, their topics, permissions and unload.

Owns: the HTTP shape of ``/admin/v2/namespaces/{tenant}[/{namespace}]`` (create,
read, delete, bundles, topic list, permissions, unload; docs/compatibility.md
§3.1) over a ``NamespaceStore``, and ``make_router``, the whole namespace admin
API: these routes with the tenant routes (``admin_tenants``) and the policy routes
(``admin_namespace_policies``). Rule: as every admin router, typed errors map to
Pulsar's statuses in ``gateway.api.errors``; writes answer 204; a body is
validated before the namespace is looked up (400 before 404), except a new
namespace's policies: its tenant is looked up first (404, as Pulsar), so the 412
of a backlog quota beyond the retention is a precondition of a real create.
"""

from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from gateway.api import admin_models, admin_namespace_policies, admin_tenants
from gateway.api.admin_common import NamespacePath, no_content, paged, read_json
from gateway.api.admin_models import BundlePath, RolePath, request_body
from gateway.api.admin_tenants import READ, WRITE, Force
from gateway.api.errors import ErrorMappingRoute
from gateway.api.route_docs import Namespace, Paging, Tenant
from gateway.meta.errors import NotFound
from gateway.meta.namespaces import NamespaceStore
from gateway.meta.policies import Policies, parse_actions, parse_role
from gateway.names import NamespaceName

# unload(namespace, bundle or None for all) -> bundles asked to unload
Unloader = Callable[[NamespaceName, str | None], Awaitable[int]]


async def _no_unloader(_ns: NamespaceName, _bundle: str | None) -> int:
    return 0


def make_router(get_store: Callable[[], NamespaceStore], unload: Unloader = _no_unloader) -> APIRouter:
    """The namespace admin API under ``/admin/v2``: tenants, namespaces and their
    policies; ``get_store`` is its dependency and ``unload`` asks the owners of a
    namespace's bundles to unload them."""
    router = APIRouter(prefix="/admin/v2", route_class=ErrorMappingRoute)
    admin_tenants.add_routes(router, get_store)
    _add_namespace_routes(router, get_store, unload)
    admin_namespace_policies.add_routes(router, get_store)
    return router


def _add_namespace_routes(
    router: APIRouter, get_store: Callable[[], NamespaceStore], unload: Unloader
) -> None:
    Store = Annotated[NamespaceStore, Depends(get_store)]
    NAMESPACES: list[str | Enum] = ["admin-namespaces"]

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
            admin_models.Policies,
            "Pulsar Policies of the new namespace (optional)",
            {"bundles": {"numBundles": 8}},
            required=False,
        ),
    )
    async def create_namespace(store: Store, ns: NamespacePath, request: Request) -> Response:
        payload = await read_json(request, required=False)
        await store.get_tenant(ns.tenant)  # 404 first, as Pulsar: the policies' 412 is a real precondition
        await store.create_namespace(ns, None if payload is None else Policies.from_json(payload))
        return no_content()

    @router.get(
        "/namespaces/{tenant}/{namespace}",
        summary="Get a namespace's policies",
        tags=NAMESPACES,
        responses=READ,
    )
    async def get_policies(store: Store, ns: NamespacePath) -> dict[str, Any]:
        return (await store.get_policies(ns)).to_json()

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
        return no_content()

    @router.get(
        "/namespaces/{tenant}/{namespace}/bundles",
        summary="Bundle boundaries",
        tags=NAMESPACES,
        responses=READ,
    )
    async def get_bundles(store: Store, ns: NamespacePath) -> dict[str, Any]:
        return (await store.get_policies(ns)).bundles.to_json()

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
    async def get_permissions(store: Store, ns: NamespacePath) -> dict[str, list[str]]:
        policies = await store.get_policies(ns)
        return {role: list(actions) for role, actions in sorted(policies.permissions.items())}

    @router.post(
        "/namespaces/{tenant}/{namespace}/permissions/{role}",
        status_code=204,
        summary="Grant actions (produce, consume, …) to a role",
        tags=NAMESPACES,
        responses=WRITE,
        openapi_extra=request_body(admin_models.ACTIONS, "the actions granted", ["produce", "consume"]),
    )
    async def grant_permission(
        store: Store, tenant: Tenant, namespace: Namespace, role: RolePath, request: Request
    ) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        name, actions = parse_role(role), parse_actions(await read_json(request))
        await store.update_policies(ns, lambda p: p.grant(name, actions))
        return no_content()

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
        return no_content()

    @router.put(
        "/namespaces/{tenant}/{namespace}/unload",
        status_code=204,
        summary="Unload every bundle of the namespace (its topics move on next use)",
        tags=NAMESPACES,
        responses=WRITE,
    )
    async def unload_namespace(store: Store, ns: NamespacePath) -> Response:
        await store.get_policies(ns)  # 404 for an unknown namespace
        await unload(ns, None)
        return no_content()

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
        return no_content()
