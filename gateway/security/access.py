"""``GET /admin/v2/whoami``: what the caller's token lets it do (asyncio shell).

Owns: the one route that tells a caller (the dashboard) its role and rights, so
a page shows only what the role can do: whether security is on, the role,
whether it is a superuser, the tenants it administers, its grants per namespace
and its grants per topic (full name of a topic or partitioned topic). Rule: it
reports the caller's own rights and nothing else (no other role's grants, no
tenant it has no right in); in open mode everything is allowed and it says so.
Bounded: at most ``NAMESPACES_MAX`` namespaces are read.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from gateway.errors import GatewayError
from gateway.names import NamespaceName
from gateway.security.guard import Guard
from gateway.security.policy import is_superuser
from gateway.security.tokens import Identity

NAMESPACES_MAX = 1000
IDENTITY = "folio.identity"
NONE: dict[str, Any] = {
    "securityOn": True,
    "role": None,
    "superuser": False,
    "tenantAdmin": [],
    "grants": {},
    "topicGrants": {},
}


async def access_of(guard: Guard, identity: Identity | None) -> dict[str, Any]:
    if guard.config.open:
        return {**NONE, "securityOn": False, "superuser": True}
    if identity is None:
        return dict(NONE)
    if is_superuser(identity, guard.config.superusers):
        return {**NONE, "role": identity.role, "superuser": True}
    store = guard.namespaces()
    admin: list[str] = []
    grants: dict[str, list[str]] = {}
    topic_grants: dict[str, list[str]] = {}
    read = 0
    for tenant in await store.list_tenants():
        try:
            if identity.role in (await store.get_tenant(tenant)).admin_roles:
                admin.append(tenant)
                continue
            for full in await store.list_namespaces(tenant):
                read += 1
                if read > NAMESPACES_MAX:
                    break
                policies = await store.policies(NamespaceName.parse(full))
                actions = policies.permissions.get(identity.role)
                if actions:
                    grants[full] = list(actions)
                for topic, roles in policies.topic_permissions.items():
                    if roles.get(identity.role):
                        topic_grants[topic] = list(roles[identity.role])
        except GatewayError:
            continue  # deleted meanwhile
    return {
        "securityOn": True,
        "role": identity.role,
        "superuser": False,
        "tenantAdmin": admin,
        "grants": grants,
        "topicGrants": topic_grants,
    }


def make_router(guard: Guard) -> APIRouter:
    router = APIRouter()

    @router.get("/admin/v2/whoami", include_in_schema=False)
    async def whoami(request: Request) -> dict[str, Any]:
        """The caller's role and rights (Folio; the dashboard shows only what they allow)."""
        return await access_of(guard, request.scope.get(IDENTITY))

    return router
