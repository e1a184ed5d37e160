"""Tenants, namespaces and their policies in etcd (asyncio shell over ``MetadataStore``).

Owns: the values at ``keys.tenant`` and ``keys.namespace`` (docs/decisions/0005),
the policy cache the hot path reads, and ``ensure_defaults``. Topic metadata
(partitioned counts, topic existence) is in ``topics.py``; ``NamespaceStore``
combines both.
Rule: every write that depends on a read is a compare-and-swap (create = CAS on
revision 0, updates through ``update_with_retry``). Parent/child races between
gateways are closed without locks: a delete first *marks* the parent
(``deleted``), then looks for children; a create writes the child, then re-reads
the parent and undoes its write if the parent is gone or marked. With etcd's
linearizable reads at least one of two racing requests sees the other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from coordination import keys
from coordination.clock import wall_ms as system_wall_ms
from coordination.store import MetadataStore, update_with_retry
from gateway.meta.errors import (
    AlreadyExists,
    CorruptMetadata,
    InvalidPolicy,
    NotEmpty,
    NotFound,
    PreconditionFailed,
)
from gateway.meta.policies import Policies, check_quotas_within_retention
from gateway.meta.policy_cache import PolicyCache
from gateway.meta.tenant_info import TenantInfo
from gateway.meta.topics import TopicMetadata
from gateway.names import DOMAINS, NamespaceName, TopicName, check_tenant
from gateway.quotas import Quota, refused

log = logging.getLogger(__name__)

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = NamespaceName(DEFAULT_TENANT, "default")


_Stored = TypeVar("_Stored", TenantInfo, Policies)  # the values a delete marks


def _decode(kind: type[_Stored], key: str, value: bytes) -> _Stored:
    """The value stored at ``key``; ``CorruptMetadata`` naming the key if it does not decode."""
    try:
        return kind.decode(value)
    except InvalidPolicy as exc:
        raise CorruptMetadata(f"{key}: {exc}") from exc


def _decode_tenant(key: str, value: bytes) -> TenantInfo:
    return _decode(TenantInfo, key, value)


def _decode_policies(key: str, value: bytes) -> Policies:
    return _decode(Policies, key, value)


class NamespaceStore(TopicMetadata):
    """Tenants, namespaces, policies and topic metadata of one Folio cluster."""

    def __init__(
        self,
        store: MetadataStore,
        *,
        wall_ms: Callable[[], int] = system_wall_ms,
        max_tenants: int = 0,
        max_namespaces_per_tenant: int = 0,
        max_topics_per_namespace: int = 0,
    ) -> None:
        super().__init__(store, wall_ms=wall_ms)
        self._cache = PolicyCache(store)
        # quotas (0: none); checked before a create, so gateways creating at the same
        # moment may each pass once: a bound on abuse, not an exact count
        self.max_tenants = max_tenants
        self.max_namespaces_per_tenant = max_namespaces_per_tenant
        self.max_topics_per_namespace = max_topics_per_namespace  # a namespace's policy overrides it

    async def start(self) -> None:
        """Start the policy cache's watch (optional: without it every read goes to etcd)."""
        await self._cache.start()

    async def close(self) -> None:
        await self._cache.close()

    @property
    def cache_following(self) -> bool:
        """True while ``policies()`` is served from the watched cache."""
        return self._cache.following

    async def ensure_defaults(self) -> None:
        """Create tenant ``public`` and namespace ``public/default`` unless they exist.
        Idempotent and safe when several gateways run it at once."""
        try:
            await self.create_tenant(DEFAULT_TENANT)
        except AlreadyExists:
            pass
        try:
            await self.create_namespace(DEFAULT_NAMESPACE)
        except AlreadyExists:
            pass

    # ------------------------------------------------------------ tenants

    async def create_tenant(self, tenant: str, info: TenantInfo | None = None) -> None:
        check_tenant(tenant)
        if self.max_tenants and len(await self.list_tenants()) >= self.max_tenants:
            refused(Quota.TENANTS)
            raise PreconditionFailed(f"the cluster has {self.max_tenants} tenants (maxTenants)")
        info = info or TenantInfo()
        value = TenantInfo(info.admin_roles, info.allowed_clusters).encode()
        if await self._store.compare_and_swap(keys.tenant(tenant), value, 0) is None:
            raise AlreadyExists(f"Tenant {tenant} already exists")

    async def get_tenant(self, tenant: str) -> TenantInfo:
        check_tenant(tenant)
        info = await self._tenant(tenant)
        if info is None:
            raise NotFound(f"Tenant {tenant} does not exist")
        return info

    async def list_tenants(self) -> list[str]:
        names = []
        for kv in await self._store.list_prefix(keys.TENANTS):
            name = kv.key[len(keys.TENANTS) :]
            if "/" not in name and not _decode_tenant(kv.key, kv.value).deleted:
                names.append(name)
        return names

    async def update_tenant(self, tenant: str, info: TenantInfo) -> None:
        check_tenant(tenant)
        key = keys.tenant(tenant)
        new = TenantInfo(info.admin_roles, info.allowed_clusters).encode()

        def modify(old: bytes | None) -> bytes | None:
            if old is None or _decode_tenant(key, old).deleted:
                raise NotFound(f"Tenant {tenant} does not exist")
            return None if old == new else new

        await update_with_retry(self._store, key, modify)

    async def delete_tenant(self, tenant: str, *, force: bool = False) -> None:
        """Delete a tenant; with namespaces left it is ``NotEmpty`` unless ``force``
        (which deletes them, as ``delete_namespace(force=True)``)."""
        check_tenant(tenant)
        key = keys.tenant(tenant)
        await self._mark_tenant(tenant, deleted=True)
        namespaces = await self._namespace_names(tenant)
        if namespaces and not force:
            await self._mark_tenant(tenant, deleted=False)
            shown = ", ".join(str(ns) for ns in namespaces[:5])
            raise NotEmpty(f"Tenant {tenant} still has namespaces ({shown}); delete them first or use force")
        for ns in namespaces:
            try:
                await self.delete_namespace(ns, force=True)
            except NotFound:
                pass  # deleted meanwhile
        await self._store.delete(key)

    async def _tenant(self, tenant: str) -> TenantInfo | None:
        """The tenant's info, or None if it does not exist or is being deleted."""
        key = keys.tenant(tenant)
        kv = await self._store.get(key)
        if kv is None:
            return None
        info = _decode_tenant(key, kv.value)
        return None if info.deleted else info

    async def _mark_tenant(self, tenant: str, *, deleted: bool) -> None:
        await self._mark(TenantInfo, keys.tenant(tenant), f"Tenant {tenant}", deleted=deleted)

    async def _mark(
        self, kind: type[_Stored], key: str, what: str, *, deleted: bool
    ) -> tuple[bytes | None, int]:
        """Set the ``deleted`` mark of the ``kind`` value at ``key`` (``what`` names it in
        ``NotFound`` when a mark is set on nothing); no write when it already says so."""

        def modify(old: bytes | None) -> bytes | None:
            if old is None:
                if deleted:
                    raise NotFound(f"{what} does not exist")
                return None
            current = _decode(kind, key, old)
            return None if current.deleted == deleted else replace(current, deleted=deleted).encode()

        return await update_with_retry(self._store, key, modify)

    # ------------------------------------------------------------ namespaces

    async def create_namespace(self, ns: NamespaceName, policies: Policies | None = None) -> None:
        """Create ``ns`` with ``policies`` (defaults: 4 bundles, ...). ``NotFound`` if the
        tenant is missing, ``AlreadyExists`` if the namespace exists."""
        check_quotas_within_retention(policies or Policies())
        if await self._tenant(ns.tenant) is None:
            raise NotFound(f"Tenant {ns.tenant} does not exist")
        limit = self.max_namespaces_per_tenant
        if limit and len(await self._namespace_names(ns.tenant)) >= limit:
            refused(Quota.NAMESPACES_PER_TENANT)
            raise PreconditionFailed(f"tenant {ns.tenant} has {limit} namespaces (maxNamespacesPerTenant)")
        key = keys.namespace(ns.tenant, ns.namespace)
        value = (policies or Policies()).replace(deleted=False).encode()
        revision = await self._store.compare_and_swap(key, value, 0)
        if revision is None:
            raise AlreadyExists(f"Namespace {ns} already exists")
        if await self._tenant(ns.tenant) is None:  # deleted while we created: undo
            await self._store.compare_and_delete(key, revision)
            raise NotFound(f"Tenant {ns.tenant} does not exist")
        self._cache.note(key, value, revision)

    async def get_policies(self, ns: NamespaceName) -> Policies:
        """The namespace's policies, read from etcd (admin path)."""
        policies = await self._read_policies(ns)
        if policies is None or policies.deleted:
            raise NotFound(f"Namespace {ns} does not exist")
        return policies

    async def policies(self, ns: NamespaceName) -> Policies:
        """The namespace's policies for the hot path: from the watched cache when it is
        following etcd, else from etcd. May carry ``deleted=True`` while the namespace
        is being deleted. ``NotFound`` if it does not exist."""
        cached = self._cache.get(keys.namespace(ns.tenant, ns.namespace))
        if cached is not None:
            return cached
        policies = await self._read_policies(ns)
        if policies is None:
            raise NotFound(f"Namespace {ns} does not exist")
        return policies

    async def namespace_exists(self, ns: NamespaceName) -> bool:
        policies = await self._read_policies(ns)
        return policies is not None and not policies.deleted

    async def list_namespaces(self, tenant: str) -> list[str]:
        """``["tenant/ns", ...]``; ``NotFound`` if the tenant does not exist."""
        check_tenant(tenant)
        if await self._tenant(tenant) is None:
            raise NotFound(f"Tenant {tenant} does not exist")
        return [str(ns) for ns in await self._namespace_names(tenant, live_only=True)]

    async def update_policies(self, ns: NamespaceName, change: Callable[[Policies], Policies]) -> Policies:
        """Apply ``change`` to the current policies with CAS retries; returns the result.
        ``change`` may raise (e.g. ``InvalidPolicy``) to refuse."""
        key = keys.namespace(ns.tenant, ns.namespace)

        def modify(old: bytes | None) -> bytes | None:
            current = None if old is None else _decode_policies(key, old)
            if current is None or current.deleted:
                raise NotFound(f"Namespace {ns} does not exist")
            new = change(current).replace(deleted=False)
            check_quotas_within_retention(new)
            return None if new == current else new.encode()

        value, revision = await update_with_retry(self._store, key, modify)
        assert value is not None
        self._cache.note(key, value, revision)
        return _decode_policies(key, value)

    async def delete_namespace(self, ns: NamespaceName, *, force: bool = False) -> None:
        """Delete a namespace; with topics left it is ``NotEmpty`` unless ``force``.
        ``force`` removes the metadata of its topics (partitioned counts, managed-log,
        cursor and dedup keys) but not their ledgers: delete topics through the
        broker first where ledgers matter."""
        key = keys.namespace(ns.tenant, ns.namespace)
        await self._mark_namespace(ns, deleted=True)
        topic = await self._any_topic(ns)
        if topic is not None and not force:
            await self._mark_namespace(ns, deleted=False)
            raise NotEmpty(f"Namespace {ns} still has topics (e.g. {topic}); delete them first or use force")
        if force:
            for domain in DOMAINS:
                path = f"{domain}/{ns.tenant}/{ns.namespace}/"
                for family in (keys.PARTITIONED, keys.MANAGED_LOGS, keys.CURSORS, keys.DEDUP):
                    await self._store.delete_prefix(family + path)
        await self._store.delete(key)

    # ------------------------------------------------------------ a deleted topic's grants

    async def delete_topic_metadata(self, topic: TopicName) -> bool:
        existed = await super().delete_topic_metadata(topic)
        if not topic.is_partition:
            await self._drop_topic_grants(topic)
        return existed

    async def delete_partitioned(self, topic: TopicName) -> None:
        await super().delete_partitioned(topic)
        await self._drop_topic_grants(topic)

    async def _drop_topic_grants(self, topic: TopicName) -> None:
        """A topic created again under the same name starts without grants."""
        try:
            if str(topic) in (await self.policies(topic.namespace_name)).topic_permissions:
                await self.update_policies(topic.namespace_name, lambda p: p.revoke_on_topic(str(topic)))
        except NotFound:
            pass

    async def _read_policies(self, ns: NamespaceName) -> Policies | None:
        key = keys.namespace(ns.tenant, ns.namespace)
        kv = await self._store.get(key)
        return None if kv is None else _decode_policies(key, kv.value)

    async def _namespace_live(self, ns: NamespaceName) -> bool:
        return await self.namespace_exists(ns)

    async def _topics_limit(self, ns: NamespaceName) -> int:
        try:
            limit = (await self.policies(ns)).max_topics_per_namespace
        except NotFound:
            return 0  # the create answers that
        return self.max_topics_per_namespace if limit is None else limit

    async def _namespace_names(self, tenant: str, *, live_only: bool = False) -> list[NamespaceName]:
        prefix = f"{keys.NAMESPACES}{tenant}/"
        names = []
        for kv in await self._store.list_prefix(prefix):
            local = kv.key[len(prefix) :]
            if "/" in local or (live_only and _decode_policies(kv.key, kv.value).deleted):
                continue
            names.append(NamespaceName(tenant, local))
        return names

    async def _mark_namespace(self, ns: NamespaceName, *, deleted: bool) -> None:
        key = keys.namespace(ns.tenant, ns.namespace)
        value, revision = await self._mark(Policies, key, f"Namespace {ns}", deleted=deleted)
        if value is not None:
            self._cache.note(key, value, revision)
