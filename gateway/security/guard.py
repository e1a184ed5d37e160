"""The security settings of one gateway and the metadata reads behind a decision (asyncio shell).

Owns: ``SecurityConfig`` (token rules or open mode, superusers, allowed origins
and hosts) and ``Guard``: authenticating a token at the injected clock's time,
and reading what ``policy.decide`` needs (a tenant's admin roles, a role's
grants in a namespace) from the namespace store, tenants cached for
``TENANT_CACHE_S``. A data need on a topic is met by the role's namespace
grant or by its grant on the topic (on a partitioned topic for each of its
partitions: the grant is looked up under the base name). Rule: any failure to
read (missing tenant or namespace, bad metadata) reads as "no grants", so it is
a 403, never a 404 or 500 that would tell a caller what exists.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from coordination.clock import wall_ms
from gateway.errors import GatewayError
from gateway.meta.namespaces import NamespaceStore
from gateway.names import NamespaceName, TopicName
from gateway.security import tokens
from gateway.security.policy import NEEDS_NAMESPACE, NEEDS_TENANT, Grants, Need, Verdict, decide, is_superuser
from gateway.security.throttle import FailureLimiter, SessionCounts
from gateway.security.tokens import AuthFailed, Identity, TokenRules

log = logging.getLogger(__name__)

TENANT_CACHE_S = 2.0
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    tokens: TokenRules | None = None  # None: open (no authentication; loopback only)
    superusers: frozenset[str] = frozenset()
    allowed_origins: tuple[str, ...] = ()  # cross-origin browser apps allowed (CORS, WebSocket)
    cluster_secret: bytes | None = None  # proves this gateway to storage nodes and other gateways
    auth_failures_max: int = 20  # failed authentications per client address and window: 429 beyond
    auth_failure_window_s: float = 60.0
    sessions_per_role: int = 1_000  # open WebSockets and event streams of one role: 429 beyond
    # Host header names served ("*": any); a gateway process always names them (settings.py)
    allowed_hosts: tuple[str, ...] = ("*",)

    @property
    def open(self) -> bool:
        return self.tokens is None


class Forbidden(GatewayError):
    """A handler's own check of a further resource the request names (403)."""

    code = "forbidden"


class Guard:
    def __init__(
        self,
        config: SecurityConfig,
        namespaces: Callable[[], NamespaceStore],
        *,
        clock: Callable[[], float] = lambda: wall_ms() / 1000,  # token expiry: wall time
        peer_urls: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        self.config = config
        self._namespaces = namespaces
        self._peer_urls = peer_urls
        self._clock = clock
        self._tenants: dict[str, tuple[tuple[str, ...], float]] = {}
        self.failures = FailureLimiter(config.auth_failures_max, config.auth_failure_window_s)
        self.sessions = SessionCounts(config.sessions_per_role)

    def namespaces(self) -> NamespaceStore:
        return self._namespaces()

    def now_s(self) -> float:
        return self._clock()

    def origin_allowed(self, origin: str) -> bool:
        """An allowed cross-origin caller: the operator's list, or another gateway of
        this cluster (the dashboard moves to a live gateway when its own one dies)."""
        return origin in self.config.allowed_origins or origin in self.peer_origins()

    def peer_origins(self) -> list[str]:
        return [url.rstrip("/") for url in self._peer_urls()]

    def authenticate(self, token: str | None) -> Identity:
        """The caller's identity; ``AuthFailed`` for a missing or bad token."""
        assert self.config.tokens is not None
        return tokens.verify(token or "", self.config.tokens, self.now_s())

    async def _tenant_admins(self, tenant: str) -> tuple[str, ...]:
        now = time.monotonic()  # a cache's age: a stepped wall clock must not stretch it
        cached = self._tenants.get(tenant)
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            admins = tuple((await self._namespaces().get_tenant(tenant)).admin_roles)
        except GatewayError:
            admins = ()
        if len(self._tenants) > 10_000:
            self._tenants.clear()
        self._tenants[tenant] = (admins, now + TENANT_CACHE_S)
        return admins

    async def _namespace_actions(
        self, tenant: str, namespace: str, role: str, topic: TopicName | None
    ) -> tuple[str, ...]:
        try:
            policies = await self._namespaces().policies(NamespaceName.of(tenant, namespace))
        except GatewayError:  # InvalidName too
            return ()
        actions = tuple(policies.permissions.get(role, ()))
        if topic is not None and (topic.tenant, topic.namespace) == (tenant, namespace):
            actions += policies.topic_actions(str(topic.base), role)
        return actions

    async def authorize(
        self,
        need: Need,
        identity: Identity | None,
        tenant: str | None,
        namespace: str | None,
        topic: TopicName | None = None,
    ) -> Verdict:
        """The verdict for ``identity`` on a resource of ``tenant``/``namespace``
        (and of ``topic`` in it, whose own grants count too)."""
        superusers = self.config.superusers
        if identity is None or need not in NEEDS_TENANT or is_superuser(identity, superusers):
            return decide(need, identity, superusers, Grants())
        if tenant is None:  # a tenant-scoped need on a route without a tenant: superusers only
            return Verdict.FORBIDDEN
        admins = await self._tenant_admins(tenant)
        actions: tuple[str, ...] = ()
        if identity.role not in admins and need in NEEDS_NAMESPACE and namespace is not None:
            actions = await self._namespace_actions(tenant, namespace, identity.role, topic)
        return decide(need, identity, superusers, Grants(admins, actions))

    async def require(self, need: Need, identity: Identity | None, topic: TopicName) -> None:
        """For a handler: ``Forbidden`` unless ``identity`` may ``need`` on ``topic``
        (open mode allows everything)."""
        if self.config.open:
            return
        if await self.authorize(need, identity, topic.tenant, topic.namespace, topic) is not Verdict.ALLOW:
            raise Forbidden(f"not authorized to {need.value} on {topic}")


__all__ = ["AuthFailed", "Forbidden", "Guard", "SecurityConfig"]
