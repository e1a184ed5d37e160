"""Admin REST v2: tenants (``/admin/v2/tenants…``).

Owns: the HTTP shape of the tenant routes (docs/compatibility.md §3.1) over a
``NamespaceStore``, and the status sets (``READ``, ``WRITE``) the namespace and
policy routers share. Rule: as every admin router, its route class
(``gateway.api.errors``) turns typed errors and request-validation errors into the
one ``ErrorBody`` with Pulsar's status (400 bad input, 404 unknown, 409 conflict,
412 invalid name or precondition, 503 etcd unavailable); writes answer 204 as
Pulsar does; bodies are read by ``admin_common.read_json`` and parsed by
``gateway.meta.policies``.
"""

from collections.abc import Callable
from enum import Enum
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from gateway.api import admin_models
from gateway.api.admin_common import no_content, paged, read_json
from gateway.api.admin_models import request_body
from gateway.api.errors import responses
from gateway.api.route_docs import Paging, Tenant
from gateway.meta.namespaces import NamespaceStore
from gateway.meta.tenant_info import TenantInfo
from gateway.names import check_tenant

Force = Annotated[bool, Query(description="also delete what is inside")]

READ = responses(404, 412)
WRITE = responses(400, 404, 409, 412)
TENANT_EXAMPLE = {"adminRoles": [], "allowedClusters": ["folio"]}


def add_routes(router: APIRouter, get_store: Callable[[], NamespaceStore]) -> None:
    """Add the tenant routes to ``router`` (prefix ``/admin/v2``); ``get_store`` is their dependency."""
    Store = Annotated[NamespaceStore, Depends(get_store)]
    TENANTS: list[str | Enum] = ["admin-tenants"]

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
        openapi_extra=request_body(
            admin_models.TenantInfo, "Pulsar TenantInfo", TENANT_EXAMPLE, required=False
        ),
    )
    async def create_tenant(store: Store, tenant: Tenant, request: Request) -> Response:
        check_tenant(tenant)
        info = TenantInfo.from_json(await read_json(request, required=False))
        await store.create_tenant(tenant, info)
        return no_content()

    @router.post(
        "/tenants/{tenant}",
        status_code=204,
        summary="Update a tenant's info",
        tags=TENANTS,
        responses=WRITE,
        openapi_extra=request_body(admin_models.TenantInfo, "Pulsar TenantInfo", TENANT_EXAMPLE),
    )
    async def update_tenant(store: Store, tenant: Tenant, request: Request) -> Response:
        check_tenant(tenant)
        await store.update_tenant(tenant, TenantInfo.from_json(await read_json(request)))
        return no_content()

    @router.delete(
        "/tenants/{tenant}",
        status_code=204,
        summary="Delete a tenant (409 if it has namespaces)",
        tags=TENANTS,
        responses=WRITE,
    )
    async def delete_tenant(store: Store, tenant: Tenant, force: Force = False) -> Response:
        await store.delete_tenant(tenant, force=force)
        return no_content()
