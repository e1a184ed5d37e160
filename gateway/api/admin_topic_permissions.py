"""Admin REST v2 of topic-level grants: ``…/{topic}/permissions`` (asyncio shell).

Owns: the HTTP shape of Pulsar's topic permission routes, for persistent and
non-persistent topics alike: ``GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/permissions``
(every role's actions on the topic: its namespace grants joined with its own),
``POST …/permissions/{role}`` (grant: a JSON array of actions) and
``DELETE …/permissions/{role}`` (revoke). Rules (docs/decisions/0009-security-model.md):
- a grant is stored in the namespace's policies (Pulsar's ``destination_auth``)
  under the topic's full name; on a partitioned topic it covers every partition,
  and a partition's own name cannot be granted (412: grant the partitioned topic);
- a grant does not need the topic to exist (it may be created later by a producer);
  deleting the topic removes its grants;
- revoking a role that has no grant on the topic itself is 412, as Pulsar
  ("Permissions are not set at the topic level");
- errors are ``ErrorBody`` with statuses from ``gateway.api.errors``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.api import admin_models, errors
from gateway.api.admin_common import AdminRoute, no_content, read_json
from gateway.api.admin_models import RolePath, request_body
from gateway.api.route_docs import Namespace, Tenant, TopicPart
from gateway.meta.errors import PreconditionFailed
from gateway.meta.namespaces import NamespaceStore
from gateway.meta.policies import parse_actions, parse_role
from gateway.names import DOMAINS, TopicName

TAGS: list[Any] = ["admin-topics"]


def grantable(domain: str, tenant: str, namespace: str, topic: str) -> TopicName:
    name = TopicName.of(domain, tenant, namespace, topic)
    if name.is_partition:
        raise PreconditionFailed(f"grant permissions on the partitioned topic {name.base}, not on {name}")
    return name


def make_router(get_store: Callable[[], NamespaceStore]) -> APIRouter:
    router = APIRouter(tags=TAGS, route_class=AdminRoute)
    for domain in DOMAINS:
        _routes(router, domain, get_store)
    return router


def _routes(router: APIRouter, domain: str, get_store: Callable[[], NamespaceStore]) -> None:
    path = f"/admin/v2/{domain}/{{tenant}}/{{namespace}}/{{topic}}/permissions"
    suffix = domain.replace("-", "_")

    @router.get(
        path,
        summary=f"Roles and their actions on a {domain} topic (namespace and topic grants)",
        operation_id=f"get_topic_permissions_{suffix}",
        responses=errors.responses(404, 412),
    )
    async def get_permissions(tenant: Tenant, namespace: Namespace, topic: TopicPart) -> dict[str, list[str]]:
        name = TopicName.of(domain, tenant, namespace, topic)
        policies = await get_store().get_policies(name.namespace_name)
        merged = {role: set(actions) for role, actions in policies.permissions.items()}
        for role, actions in policies.topic_permissions.get(str(name.base), {}).items():
            merged.setdefault(role, set()).update(actions)
        return {role: sorted(actions) for role, actions in sorted(merged.items())}

    @router.post(
        f"{path}/{{role}}",
        status_code=204,
        summary=f"Grant actions (produce, consume) on a {domain} topic to a role",
        operation_id=f"grant_topic_permission_{suffix}",
        responses=errors.responses(400, 404, 412),
        openapi_extra=request_body(admin_models.ACTIONS, "the actions granted", ["produce", "consume"]),
    )
    async def grant(
        tenant: Tenant, namespace: Namespace, topic: TopicPart, role: RolePath, request: Request
    ) -> Response:
        name = grantable(domain, tenant, namespace, topic)
        who, actions = parse_role(role), parse_actions(await read_json(request))
        await get_store().update_policies(
            name.namespace_name, lambda p: p.grant_on_topic(str(name), who, actions)
        )
        return no_content()

    @router.delete(
        f"{path}/{{role}}",
        status_code=204,
        summary=f"Revoke a role's grant on a {domain} topic",
        operation_id=f"revoke_topic_permission_{suffix}",
        responses=errors.responses(400, 404, 412),
    )
    async def revoke(tenant: Tenant, namespace: Namespace, topic: TopicPart, role: RolePath) -> Response:
        name = grantable(domain, tenant, namespace, topic)
        who = parse_role(role)
        store = get_store()
        if not (await store.get_policies(name.namespace_name)).topic_actions(str(name), who):
            raise PreconditionFailed(f"Permissions are not set at the topic level for role {who} on {name}")
        await store.update_policies(name.namespace_name, lambda p: p.revoke_on_topic(str(name), who))
        return no_content()
