"""The contract suite's harness: every test runs against MemoryStore and real etcd.

``h`` (fixture ``harness``) hides the one real difference between the two: time.
The in-memory store runs on a ``ManualClock`` (``h.pass_time`` advances it and
expires due leases); etcd runs on real time (``h.pass_time`` sleeps, because the
passing of real time is what is under test, e.g. a lease TTL).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from coordination.clock import Clock, ManualClock
from coordination.etcd_store import EtcdStore, connect
from coordination.memory_store import MemoryStore
from coordination.store import MetadataStore, WatchEvent

EVENT_TIMEOUT_S = 10.0  # generous bound for etcd lease expiry + watch delivery


@dataclass
class Harness:
    kind: str
    store: MetadataStore
    clock: Clock
    etcd_endpoint: str = ""
    extra: list[MetadataStore] = field(default_factory=list)

    @property
    def manual(self) -> bool:
        return isinstance(self.clock, ManualClock)

    async def pass_time(self, ms: int) -> None:
        """Let ``ms`` of lease time pass (manual clock: advance + expire due leases)."""
        if isinstance(self.clock, ManualClock):
            self.clock.advance(ms)
            assert isinstance(self.store, MemoryStore)
            self.store.expire_leases()
        else:
            await asyncio.sleep(ms / 1000)

    async def compact(self, revision: int) -> None:
        if isinstance(self.store, EtcdStore):
            await self.store.compact(revision)
        else:
            assert isinstance(self.store, MemoryStore)
            self.store.compact(revision)

    async def other_store(self, *, watch_queue_size: int) -> MetadataStore:
        """Another client on the same data, with a different watch queue bound."""
        store: MetadataStore
        if isinstance(self.store, MemoryStore):
            store = self.store.view(watch_queue_size=watch_queue_size)
        else:
            assert isinstance(self.store, EtcdStore)
            store = await connect(
                self.etcd_endpoint, namespace=self.store.namespace, watch_queue_size=watch_queue_size
            )
        self.extra.append(store)
        return store


async def next_event(watch: AsyncIterator[WatchEvent], timeout_s: float = EVENT_TIMEOUT_S) -> WatchEvent:
    return await asyncio.wait_for(anext(watch), timeout_s)
