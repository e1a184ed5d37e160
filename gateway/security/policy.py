"""Who may do what: the authorization decision for one request (pure).

Owns: ``Need`` (what a route requires), ``Grants`` (what the store says about the
resource: the tenant's admin roles, the namespace's grants) and ``decide``.
Rules (Pulsar's model, docs/decisions/0009-security-model.md):
- deny by default: a request with no identity gets 401 unless the route is
  public; an identity without the needed right gets 403;
- superusers (and the gateways' internal role) may do everything;
- a tenant's admin roles may do everything inside that tenant, including
  producing and consuming; managing tenants and the cluster is for superusers;
- a namespace grant of ``produce`` / ``consume`` to a role allows those data
  actions on every topic (and every partition) of the namespace; ``LOOKUP``
  (metadata, stats, listing a namespace's topics) needs either;
- the decision never depends on whether the named resource exists, so a 403
  says nothing about names in other tenants.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from dataclasses import dataclass

from gateway.security.tokens import Identity


class Need(enum.Enum):
    PUBLIC = "public"  # anyone, no token (health, documents, the dashboard's login page)
    AUTHENTICATED = "authenticated"  # any valid token
    SUPERUSER = "superuser"
    TENANT_ADMIN = "tenant-admin"
    PRODUCE = "produce"
    CONSUME = "consume"
    LOOKUP = "lookup"  # produce or consume


class Verdict(enum.Enum):
    ALLOW = 200
    UNAUTHENTICATED = 401
    FORBIDDEN = 403


NEEDS_TENANT = frozenset({Need.TENANT_ADMIN, Need.PRODUCE, Need.CONSUME, Need.LOOKUP})
NEEDS_NAMESPACE = frozenset({Need.PRODUCE, Need.CONSUME, Need.LOOKUP})


@dataclass(frozen=True, slots=True)
class Grants:
    """What the metadata says about one resource for one role."""

    tenant_admins: Collection[str] = ()
    namespace_actions: Collection[str] = ()  # the role's actions in the namespace (and on the topic)


def is_superuser(identity: Identity, superusers: Collection[str]) -> bool:
    return identity.internal or identity.role in superusers


def decide(need: Need, identity: Identity | None, superusers: Collection[str], grants: Grants) -> Verdict:
    if need is Need.PUBLIC:
        return Verdict.ALLOW
    if identity is None:
        return Verdict.UNAUTHENTICATED
    if need is Need.AUTHENTICATED or is_superuser(identity, superusers):
        return Verdict.ALLOW
    if need is Need.SUPERUSER:
        return Verdict.FORBIDDEN
    if identity.role in grants.tenant_admins:
        return Verdict.ALLOW
    actions = grants.namespace_actions
    if need is Need.PRODUCE and "produce" in actions:
        return Verdict.ALLOW
    if need is Need.CONSUME and "consume" in actions:
        return Verdict.ALLOW
    if need is Need.LOOKUP and ("produce" in actions or "consume" in actions):
        return Verdict.ALLOW
    return Verdict.FORBIDDEN
