"""The policy cache over the in-memory store: re-list after overflow, fall back to reads
while the store is unreachable, and follow again afterwards."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from coordination import keys
from coordination.clock import ManualClock
from coordination.errors import Unavailable
from coordination.memory_store import MemoryStore
from gateway.meta import NamespaceStore, Policies
from gateway.meta import policy_cache as policy_cache_module
from gateway.names import NamespaceName

pytestmark = pytest.mark.unit

NS = NamespaceName("public", "default")
KEY = keys.namespace(NS.tenant, NS.namespace)


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 2.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not await check():
            await asyncio.sleep(0.005)


async def test_cache_relists_after_its_watch_overflows(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=policy_cache_module.__name__)
    store = MemoryStore(ManualClock(), watch_queue_size=2)
    meta = NamespaceStore(store)
    await meta.ensure_defaults()
    await meta.start()
    try:
        # a burst the watcher cannot drain: its queue overflows
        await asyncio.gather(
            *(store.put(KEY, Policies(message_ttl_seconds=t).encode()) for t in range(1, 21))
        )

        async def caught_up() -> bool:
            return meta.cache_following and (await meta.policies(NS)).message_ttl_seconds == 20

        await eventually(caught_up)
        assert "re-listing after watch_overflow" in caplog.text
    finally:
        await meta.close()


async def test_cache_falls_back_to_the_store_while_it_is_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy_cache_module, "RETRY_S", 0.01)
    store = MemoryStore(ManualClock())
    node = store.view()
    meta = NamespaceStore(node)
    await meta.ensure_defaults()
    await meta.start()
    try:
        assert meta.cache_following
        node.set_available(False)

        async def stopped_following() -> bool:
            return not meta.cache_following

        await eventually(stopped_following)
        with pytest.raises(Unavailable):  # never a silently stale answer
            await meta.policies(NS)
        await store.put(KEY, Policies(message_ttl_seconds=9).encode())  # changed meanwhile
        node.set_available(True)

        async def fresh() -> bool:
            return meta.cache_following and (await meta.policies(NS)).message_ttl_seconds == 9

        await eventually(fresh)
    finally:
        await meta.close()
    assert not meta.cache_following
