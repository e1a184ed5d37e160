"""A gateway's tenure over the in-memory store: etcd failing at any step of the start
is waited out, and a lost lease is stepped down from and rejoined in the same object."""

from __future__ import annotations

import asyncio
import time

import pytest

from coordination import keys
from coordination.clock import SystemClock
from coordination.errors import Unavailable
from coordination.memory_store import MemoryStore
from gateway.names import TopicName
from gateway.ownership.errors import OwnershipSessionLost
from gateway.process import Gateway, GatewayConfig

TOPIC = TopicName.parse("persistent://public/default/tenure")


class FlakyStore(MemoryStore):
    """Calls number ``first`` .. ``first + count - 1`` (from 1) raise ``Unavailable``."""

    def __init__(self, first: int, count: int) -> None:
        super().__init__(SystemClock())
        self.first, self.count = first, count
        self.calls = self.failed = 0

    async def _enter(self):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.first <= self.calls < self.first + self.count:
            self.failed += 1
            await asyncio.sleep(0)
            raise Unavailable("etcd away (test)")
        return await super()._enter()


async def until(condition: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not (condition() if callable(condition) else False):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("first", [1, 2, 3, 5, 8, 12])
async def test_etcd_failing_at_any_step_of_the_start_is_waited_out(first: int) -> None:
    store = FlakyStore(first, 2)
    gateway = Gateway(store, GatewayConfig("g1", "http://127.0.0.1:1", lease_ttl_s=2))
    try:
        await asyncio.wait_for(gateway.start(), 20)
        assert store.failed == 2  # the failures met the start, which waited them out
        registered = await store.get(keys.gateway("g1"))
        assert registered is not None and registered.lease == gateway.session.lease_id
        assert (await gateway.router.owner(TOPIC)).is_self
    finally:
        await gateway.close()


async def test_a_lost_lease_is_stepped_down_from_and_rejoined() -> None:
    data = MemoryStore(SystemClock())
    store = data.view()
    gateway = Gateway(store, GatewayConfig("g1", "http://127.0.0.1:1", lease_ttl_s=1))
    try:
        await gateway.start()
        assert (await gateway.router.owner(TOPIC)).is_self
        first = gateway.session
        old_lease = first.lease_id
        assert gateway.ownership.owned_bundles()

        store.set_available(False)  # etcd away, past the lease
        await until(first.lost.is_set, 5, "the lease is lost")
        await asyncio.sleep(0.05)
        assert not gateway.ownership.owned_bundles()  # stepped down: nothing owned
        with pytest.raises(OwnershipSessionLost):  # a 503 (retryable) at the edge
            await gateway.ownership.lookup(TOPIC)

        store.set_available(True)
        await until(lambda: gateway.tenure.rejoins == 1, 10, "the gateway rejoins")
        assert gateway.session is not first and gateway.session.lease_id != old_lease
        registered = await data.get(keys.gateway("g1"))
        assert registered is not None and registered.lease == gateway.session.lease_id
        assert data.lease_deadline_ms(old_lease) is None  # the old lease is gone
        assert (await gateway.router.owner(TOPIC)).is_self  # owns bundles again
        assert gateway.ownership.owned_bundles()
    finally:
        await gateway.close()


async def test_without_a_lease_a_topic_another_gateway_owns_is_still_relayed() -> None:
    data = MemoryStore(SystemClock())
    a_store = data.view()
    a = Gateway(a_store, GatewayConfig("a", "http://127.0.0.1:1", lease_ttl_s=1))
    b = Gateway(data.view(), GatewayConfig("b", "http://127.0.0.1:2", lease_ttl_s=1))
    try:
        await a.start()
        await b.start()
        assert (await b.router.owner(TOPIC, authoritative=True)).is_self
        await until(lambda: a.ownership.owner_of(TOPIC) == "b" and "b" in a.registry.live(), 5, "a sees b")
        a_store.set_available(False)
        await until(a.session.lost.is_set, 5, "a's lease is lost")
        relayed = await a.ownership.lookup(TOPIC)
        assert (relayed.gateway_id, relayed.http_url, relayed.is_self) == ("b", "http://127.0.0.1:2", False)
        unowned = next(
            name
            for name in (TopicName.parse(f"persistent://public/default/other-{i}") for i in range(100))
            if a.ownership.owner_of(name) is None
        )
        with pytest.raises(OwnershipSessionLost):
            await a.ownership.lookup(unowned)
    finally:
        await a.close()
        await b.close()
