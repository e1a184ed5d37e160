"""MemoryStore specifics (the shared semantics are in tests/contract): bounded history,
lazy lease expiry, per-handle availability, watch bookkeeping, and a session that
loses its lease while the store is unreachable."""

from __future__ import annotations

import asyncio

import pytest

from coordination.clock import ManualClock
from coordination.errors import Compacted, LeaseLost, Unavailable, WatchOverflow
from coordination.memory_store import HISTORY_SIZE, MemoryStore
from coordination.prefix_view import follow_prefix
from coordination.session import LeaseSession
from coordination.store import EventKind
from coordination.watch_stream import WatchStream, close_watch

pytestmark = pytest.mark.unit


async def test_the_default_history_bound_compacts_the_oldest_events() -> None:
    store = MemoryStore(ManualClock())
    first = await store.put("/h", b"0")
    for i in range(HISTORY_SIZE):
        await store.put("/h", str(i).encode())
    with pytest.raises(Compacted) as err:
        await anext(store.watch_prefix("/h", first))
    assert err.value.compacted_revision == first + 1
    oldest = store.watch_prefix("/h", first + 1)
    assert (await anext(oldest)).value == b"0"
    assert len(store._state.history) == HISTORY_SIZE


async def test_leases_expire_lazily_on_any_call_and_in_deadline_order() -> None:
    clock = ManualClock(0)
    store = MemoryStore(clock)
    late, early = await store.grant_lease(3), await store.grant_lease(1)
    await store.put("/k/late", b"", lease=late)
    await store.put("/k/early", b"", lease=early)
    watch = store.watch_prefix("/k/")
    assert store.lease_deadline_ms(early) == 1000
    clock.advance(999)
    assert await store.get("/k/early") is not None
    clock.advance(1)
    assert await store.get("/k/early") is None  # expired by the call itself
    event = await anext(watch)
    assert (event.kind, event.key) == (EventKind.DELETE, "/k/early")
    clock.advance(5000)
    assert store.expire_leases() == [late]
    assert store.expire_leases() == []
    assert store.lease_deadline_ms(late) is None


async def test_watch_from_now_starts_at_the_call() -> None:
    store = MemoryStore(ManualClock())
    await store.put("/n/old", b"")
    watch = store.watch_prefix("/n/")
    await store.put("/n/new", b"")
    assert (await anext(watch)).key == "/n/new"


async def test_an_overflowed_watcher_is_dropped_by_the_store() -> None:
    store = MemoryStore(ManualClock(), watch_queue_size=2)
    watch = store.watch_prefix("/o/")
    for i in range(3):
        await store.put(f"/o/{i}", b"")
    assert store._state.watchers == []
    assert [(await anext(watch)).key for _ in range(2)] == ["/o/0", "/o/1"]
    with pytest.raises(WatchOverflow):
        await anext(watch)


async def test_follow_prefix_relists_after_an_overflow() -> None:
    store = MemoryStore(ManualClock(), watch_queue_size=2)
    views = follow_prefix(store, "/m/")
    assert await anext(views) == {}
    for i in range(5):
        await store.put(f"/m/{i}", b"")
    assert len(await anext(views)) == 1  # two queued events are delivered first...
    assert len(await anext(views)) == 2
    assert len(await anext(views)) == 5  # ...then the overflow makes it re-list
    await views.aclose()


async def test_an_unavailable_handle_fails_calls_and_watches_but_not_other_handles() -> None:
    store = MemoryStore(ManualClock())
    node = store.view()
    watch = node.watch_prefix("/a/")
    node.set_available(False)
    with pytest.raises(Unavailable):
        await node.get("/a/x")
    with pytest.raises(Unavailable):
        await anext(watch)
    with pytest.raises(Unavailable):
        await anext(node.watch_prefix("/a/"))
    await store.put("/a/x", b"1")  # the rest of the world carries on
    node.set_available(True)
    kv = await node.get("/a/x")
    assert kv is not None and kv.value == b"1"


async def test_closing_a_handle_ends_its_watches_only() -> None:
    store = MemoryStore(ManualClock())
    other = store.view()
    mine, theirs = store.watch_prefix("/c/"), other.watch_prefix("/c/")
    await store.close()
    with pytest.raises(StopAsyncIteration):
        await anext(mine)
    with pytest.raises(Unavailable):
        await store.get("/c/x")
    await other.put("/c/x", b"")
    assert (await anext(theirs)).key == "/c/x"


async def test_watch_stream_bound_and_context_manager() -> None:
    with pytest.raises(ValueError):
        WatchStream(bound=0)
    store = MemoryStore(ManualClock())
    async with store.watch_prefix("/w/") as watch:  # type: ignore[attr-defined]
        await store.put("/w/1", b"")
        assert (await anext(watch)).key == "/w/1"
    with pytest.raises(StopAsyncIteration):
        await anext(watch)
    await close_watch(watch)  # idempotent


async def test_session_declares_its_lease_lost_while_the_store_is_unreachable() -> None:
    clock = ManualClock(0)
    store = MemoryStore(clock)
    handle = store.view()
    session = await LeaseSession(handle, 2, clock=clock).start()  # lost at 2000 - 200 ms
    handle.set_available(False)
    clock.advance(1000)
    await session.refresh_now()  # fails: the lease may still be alive, keep trying
    assert not session.lost.is_set() and session.is_valid()
    clock.advance(800)
    with pytest.raises(LeaseLost):
        await session.refresh_now()
    assert session.lost.is_set() and not session.is_valid()
    assert store.lease_deadline_ms(session.lease_id) == 2000  # etcd's view ends later than ours
    await session.close()


async def test_concurrent_tasks_interleave_between_calls() -> None:
    store = MemoryStore(ManualClock())
    order: list[str] = []

    async def worker(name: str) -> None:
        for _ in range(2):
            await store.get("/x")
            order.append(name)

    await asyncio.gather(worker("a"), worker("b"))
    assert order == ["a", "b", "a", "b"]
