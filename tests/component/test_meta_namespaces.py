"""NamespaceStore on a real etcd: tenants, namespaces, policies, topic metadata, races, cache."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import orjson
import pytest

from coordination import keys
from coordination.etcd_store import EtcdStore
from gateway.meta import (
    AlreadyExists,
    BacklogQuota,
    Conflict,
    InvalidArgument,
    NamespaceStore,
    NotEmpty,
    NotFound,
    Policies,
    PreconditionFailed,
    Retention,
    TenantInfo,
)
from gateway.names import InvalidName, NamespaceName, TopicName

pytestmark = pytest.mark.component

NS = NamespaceName("acme", "orders")


def topic(local: str, ns: NamespaceName = NS) -> TopicName:
    return TopicName.of("persistent", ns.tenant, ns.namespace, local)


@pytest.fixture
async def meta(etcd_store: EtcdStore) -> AsyncIterator[NamespaceStore]:
    store = NamespaceStore(etcd_store, wall_ms=lambda: 1_700_000_000_000)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def ns(meta: NamespaceStore) -> NamespaceName:
    await meta.create_tenant(NS.tenant)
    await meta.create_namespace(NS)
    return NS


# ---------------------------------------------------------------- tenants


async def test_tenant_crud_and_conflicts(meta: NamespaceStore) -> None:
    assert await meta.list_tenants() == []
    await meta.create_tenant("acme", TenantInfo(("ops",), ("c1",)))
    with pytest.raises(AlreadyExists, match="acme already exists"):
        await meta.create_tenant("acme")
    assert await meta.get_tenant("acme") == TenantInfo(("ops",), ("c1",))
    await meta.create_tenant("zeta")
    assert await meta.list_tenants() == ["acme", "zeta"]
    await meta.update_tenant("acme", TenantInfo(("root",)))
    assert (await meta.get_tenant("acme")).admin_roles == ("root",)
    with pytest.raises(NotFound):
        await meta.update_tenant("nobody", TenantInfo())
    with pytest.raises(NotFound):
        await meta.get_tenant("nobody")
    with pytest.raises(InvalidName):
        await meta.create_tenant("bad/name")
    await meta.delete_tenant("zeta")
    assert await meta.list_tenants() == ["acme"]
    with pytest.raises(NotFound):
        await meta.delete_tenant("zeta")


async def test_tenant_with_namespaces_is_deleted_only_with_force(
    meta: NamespaceStore, ns: NamespaceName
) -> None:
    await meta.create_topic(topic("t"))
    with pytest.raises(NotEmpty, match="acme/orders"):
        await meta.delete_tenant("acme")
    assert await meta.get_tenant("acme") == TenantInfo()  # the deletion mark was undone
    assert await meta.list_namespaces("acme") == ["acme/orders"]
    await meta.delete_tenant("acme", force=True)
    assert await meta.list_tenants() == []
    with pytest.raises(NotFound):
        await meta.get_policies(ns)
    assert not await meta.topic_exists(topic("t"))


# ---------------------------------------------------------------- namespaces


async def test_namespace_crud_and_conflicts(meta: NamespaceStore) -> None:
    with pytest.raises(NotFound, match="Tenant acme"):
        await meta.create_namespace(NS)
    await meta.create_tenant("acme")
    await meta.create_namespace(NS, Policies.from_json({"bundles": {"numBundles": 8}}))
    with pytest.raises(AlreadyExists, match="acme/orders already exists"):
        await meta.create_namespace(NS)
    await meta.create_namespace(NamespaceName("acme", "billing"))
    assert await meta.list_namespaces("acme") == ["acme/billing", "acme/orders"]
    with pytest.raises(NotFound):
        await meta.list_namespaces("nobody")
    assert (await meta.get_policies(NS)).bundles.count == 8
    assert (await meta.get_policies(NamespaceName("acme", "billing"))).bundles.count == 4

    updated = await meta.update_policies(NS, lambda p: p.replace(message_ttl_seconds=60))
    assert updated.message_ttl_seconds == 60
    assert (await meta.get_policies(NS)).message_ttl_seconds == 60
    with pytest.raises(PreconditionFailed):
        await meta.update_policies(
            NS,
            lambda p: p.replace(
                retention=Retention(10, 1),
                backlog_quotas={"destination_storage": BacklogQuota(limit_size=10 << 20)},
            ),
        )
    with pytest.raises(NotFound):
        await meta.update_policies(NamespaceName("acme", "none"), lambda p: p)

    await meta.delete_namespace(NamespaceName("acme", "billing"))
    assert await meta.list_namespaces("acme") == ["acme/orders"]
    with pytest.raises(NotFound):
        await meta.delete_namespace(NamespaceName("acme", "billing"))


async def test_namespace_with_topics_is_deleted_only_with_force(
    meta: NamespaceStore, ns: NamespaceName, etcd_store: EtcdStore
) -> None:
    await meta.create_partitioned(topic("p"), 2)
    await etcd_store.put(keys.cursor(topic("p-partition-0").path, "sub"), b"{}")
    with pytest.raises(NotEmpty, match="still has topics"):
        await meta.delete_namespace(ns)
    assert await meta.namespace_exists(ns)  # mark undone
    await meta.create_topic(topic("after"))  # and usable again
    await meta.delete_namespace(ns, force=True)
    assert not await meta.namespace_exists(ns)
    for family in (keys.PARTITIONED, keys.MANAGED_LOGS, keys.CURSORS):
        assert await etcd_store.list_prefix(family) == []


async def test_ensure_defaults_is_idempotent_under_concurrent_calls(meta: NamespaceStore) -> None:
    await asyncio.gather(*(meta.ensure_defaults() for _ in range(5)))
    await meta.ensure_defaults()
    assert await meta.list_tenants() == ["public"]
    assert await meta.list_namespaces("public") == ["public/default"]
    assert await meta.get_policies(NamespaceName("public", "default")) == Policies()


# ---------------------------------------------------------------- topics


async def test_partitioned_topic_create_increase_and_refused_decrease(
    meta: NamespaceStore, ns: NamespaceName, etcd_store: EtcdStore
) -> None:
    t = topic("p")
    assert await meta.get_partitions(t) == 0
    await meta.create_partitioned(t, 3)
    assert await meta.get_partitions(t) == 3
    log = orjson.loads((await etcd_store.get(keys.managed_log(t.partition(2).path))).value)  # type: ignore[union-attr]
    assert log == {"ledgers": [], "createdMs": 1_700_000_000_000}
    with pytest.raises(AlreadyExists, match="Partitioned topic"):
        await meta.create_partitioned(t, 3)
    with pytest.raises(AlreadyExists, match="as a partitioned topic"):
        await meta.create_topic(t)

    await meta.update_partitions(t, 12)
    assert await meta.get_partitions(t) == 12
    assert await meta.topic_exists(t.partition(11))
    with pytest.raises(PreconditionFailed, match="only be increased"):
        await meta.update_partitions(t, 5)
    await meta.update_partitions(t, 12)  # same count: no-op
    assert await meta.get_partitions(t) == 12
    with pytest.raises(Conflict, match="not a partitioned topic"):
        await meta.update_partitions(topic("plain"), 4)

    for bad in (0, 1025, True):
        with pytest.raises(InvalidArgument):
            await meta.create_partitioned(topic("q"), bad)
    with pytest.raises(InvalidName, match="-partition-"):
        await meta.create_partitioned(topic("x-partition-1"), 2)
    long = topic("l" * 243)  # "<name>-partition-9" is 255 characters, "-partition-10" one more
    with pytest.raises(InvalidName):
        await meta.create_partitioned(long, 11)
    assert await meta.get_partitions(long) == 0  # nothing left behind
    await meta.create_partitioned(long, 10)
    with pytest.raises(InvalidName):
        await meta.update_partitions(long, 11)
    assert await meta.get_partitions(long) == 10
    with pytest.raises(NotFound):
        await meta.create_partitioned(topic("p", NamespaceName("acme", "none")), 2)

    await meta.delete_partitioned(t)
    assert await meta.get_partitions(t) == 0
    with pytest.raises(NotFound):
        await meta.delete_partitioned(t)


async def test_non_partitioned_topics_existence_and_listing(
    meta: NamespaceStore, ns: NamespaceName, etcd_store: EtcdStore
) -> None:
    await meta.create_topic(topic("b"))
    await meta.create_topic(topic("a"))
    with pytest.raises(AlreadyExists, match="already exists"):
        await meta.create_topic(topic("a"))
    with pytest.raises(AlreadyExists, match="non-partitioned"):
        await meta.create_partitioned(topic("a"), 2)
    with pytest.raises(NotFound):
        await meta.create_topic(topic("a", NamespaceName("acme", "none")))
    await meta.create_partitioned(topic("p"), 11)
    with pytest.raises(PreconditionFailed, match="beyond the 11 partitions"):
        await meta.create_topic(topic("p-partition-11"))
    with pytest.raises(AlreadyExists):
        await meta.create_topic(topic("p-partition-3"))  # created with the partitioned topic

    # a topic in a namespace whose name extends ours must not leak into our listing
    await meta.create_namespace(NamespaceName("acme", "orders2"))
    await meta.create_topic(topic("other", NamespaceName("acme", "orders2")))

    listed = await meta.list_topics(ns)
    assert listed == [
        "persistent://acme/orders/a",
        "persistent://acme/orders/b",
        *(f"persistent://acme/orders/p-partition-{i}" for i in range(11)),
    ]
    assert await meta.list_partitioned(ns) == ["persistent://acme/orders/p"]
    assert await meta.topic_exists(topic("a"))
    assert not await meta.topic_exists(topic("zzz"))
    with pytest.raises(NotFound):
        await meta.list_topics(NamespaceName("acme", "none"))

    await etcd_store.put(keys.cursor(topic("a").path, "s1"), b"{}")
    await etcd_store.put(keys.dedup(topic("a").path), b"{}")
    await etcd_store.put(keys.cursor(topic("ab", NS).path, "s1"), b"{}")  # a neighbour's cursor stays
    assert await meta.delete_topic_metadata(topic("a"))
    assert not await meta.topic_exists(topic("a"))
    assert await etcd_store.get(keys.dedup(topic("a").path)) is None
    assert [kv.key for kv in await etcd_store.list_prefix(keys.CURSORS)] == [
        keys.cursor(topic("ab").path, "s1")
    ]
    assert not await meta.delete_topic_metadata(topic("a"))


async def test_racing_creates_of_one_name_leave_at_most_one_kind(
    meta: NamespaceStore, ns: NamespaceName, etcd_store: EtcdStore
) -> None:
    other = NamespaceStore(etcd_store)
    for i in range(8):
        t = topic(f"race{i}")
        results = await asyncio.gather(
            meta.create_topic(t), other.create_partitioned(t, 2), return_exceptions=True
        )
        assert all(r is None or isinstance(r, AlreadyExists) for r in results), results
        assert not all(r is None for r in results)
        plain = await etcd_store.get(keys.managed_log(t.path)) is not None
        partitioned = await meta.get_partitions(t) > 0
        assert not (plain and partitioned)


async def test_deleting_a_namespace_while_topics_are_created_leaves_no_orphans(
    meta: NamespaceStore, etcd_store: EtcdStore
) -> None:
    await meta.create_tenant("acme")
    other = NamespaceStore(etcd_store)
    for i in range(6):
        ns = NamespaceName("acme", f"n{i}")
        await meta.create_namespace(ns)
        results = await asyncio.gather(
            other.create_topic(topic("t", ns)), meta.delete_namespace(ns), return_exceptions=True
        )
        assert all(r is None or isinstance(r, NotFound | NotEmpty) for r in results), results
        if not await meta.namespace_exists(ns):
            prefix = keys.managed_log(f"persistent/acme/n{i}/")
            assert await etcd_store.list_prefix(prefix) == [], results


# ---------------------------------------------------------------- hot-path cache


async def test_cache_sees_a_policy_change_by_another_gateway_within_a_second(
    meta: NamespaceStore, ns: NamespaceName, etcd_store: EtcdStore
) -> None:
    assert not meta.cache_following
    await meta.start()
    assert meta.cache_following
    assert (await meta.policies(ns)).message_ttl_seconds is None
    other = NamespaceStore(etcd_store)  # another gateway: no local note of the write
    await other.update_policies(ns, lambda p: p.replace(message_ttl_seconds=30, deduplication_enabled=True))
    started = time.monotonic()
    while (await meta.policies(ns)).message_ttl_seconds != 30:
        assert time.monotonic() - started < 1.5, "cached policies did not follow the change"
        await asyncio.sleep(0.01)
    assert (await meta.policies(ns)).deduplication

    # served from the cache: a raw write is seen only through the watch, never stale for long
    await etcd_store.put(keys.namespace(ns.tenant, ns.namespace), Policies(message_ttl_seconds=7).encode())
    started = time.monotonic()
    while (await meta.policies(ns)).message_ttl_seconds != 7:
        assert time.monotonic() - started < 1.5
        await asyncio.sleep(0.01)

    # own writes are visible at once
    await meta.update_policies(ns, lambda p: p.replace(max_producers_per_topic=3))
    assert (await meta.policies(ns)).max_producers_per_topic == 3

    # a namespace created elsewhere is found (cache miss -> etcd), a missing one is NotFound
    await other.create_namespace(NamespaceName("acme", "fresh"))
    assert (await meta.policies(NamespaceName("acme", "fresh"))).bundles.count == 4
    with pytest.raises(NotFound):
        await meta.policies(NamespaceName("acme", "none"))


async def test_policies_without_start_read_etcd(meta: NamespaceStore, ns: NamespaceName) -> None:
    await meta.update_policies(ns, lambda p: p.replace(message_ttl_seconds=5))
    assert (await meta.policies(ns)).message_ttl_seconds == 5
