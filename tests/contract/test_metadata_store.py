"""Contract: MemoryStore and EtcdStore behave the same (KV, CAS, leases, watches).

Each test runs twice (fixture ``h``: memory / etcd). Recipes built on the store
(sessions, election, membership) are in test_coordination_recipes.py.
"""

from __future__ import annotations

import asyncio

import pytest
from contract_harness import Harness, next_event

from coordination.errors import Compacted, CompareFailed, LeaseLost, WatchOverflow
from coordination.store import EventKind, WatchEvent, update_with_retry
from coordination.watch_stream import close_watch

pytestmark = pytest.mark.contract


async def test_put_get_delete_track_revisions_and_versions(h: Harness) -> None:
    s = h.store
    assert await s.get("/t/a") is None
    r1 = await s.put("/t/a", b"1")
    kv = await s.get("/t/a")
    assert kv is not None
    assert (kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease) == (
        "/t/a",
        b"1",
        r1,
        r1,
        1,
        0,
    )
    r2 = await s.put("/t/a", b"2")
    assert r2 > r1
    kv = await s.get("/t/a")
    assert kv is not None and (kv.value, kv.create_revision, kv.mod_revision, kv.version) == (b"2", r1, r2, 2)
    assert await s.revision() == r2

    assert await s.delete("/t/a") is True
    assert await s.get("/t/a") is None
    after_delete = await s.revision()
    assert after_delete == r2 + 1
    assert await s.delete("/t/a") is False
    assert await s.revision() == after_delete  # deleting nothing writes nothing

    r3 = await s.put("/t/a", b"3")
    kv = await s.get("/t/a")
    assert kv is not None and (kv.create_revision, kv.version) == (r3, 1)  # a new life


async def test_list_prefix_is_sorted_and_exact_and_delete_prefix_is_one_revision(h: Harness) -> None:
    s = h.store
    for key in ["/t/b", "/t/a/x", "/u/a", "/t/ab", "/t/a", "/s", "/t/"]:
        await s.put(key, key.encode())
    assert [kv.key for kv in await s.list_prefix("/t/a")] == ["/t/a", "/t/a/x", "/t/ab"]
    assert [kv.key for kv in await s.list_prefix("/t/")] == ["/t/", "/t/a", "/t/a/x", "/t/ab", "/t/b"]
    assert [kv.value for kv in await s.list_prefix("/t/a/")] == [b"/t/a/x"]
    assert await s.list_prefix("/nothing/") == []

    before = await s.revision()
    assert await s.delete_prefix("/t/a") == 3
    assert await s.revision() == before + 1
    assert [kv.key for kv in await s.list_prefix("/")] == ["/s", "/t/", "/t/b", "/u/a"]
    assert await s.delete_prefix("/t/a") == 0
    assert await s.revision() == before + 1


async def test_compare_and_swap_and_compare_and_delete(h: Harness) -> None:
    s = h.store
    r1 = await s.compare_and_swap("/c/k", b"first", 0)
    assert r1 is not None
    assert await s.compare_and_swap("/c/k", b"again", 0) is None  # create-if-absent lost
    assert await s.compare_and_swap("/c/missing", b"x", r1) is None  # must exist with that revision
    r2 = await s.compare_and_swap("/c/k", b"second", r1)
    assert r2 is not None and r2 > r1
    assert await s.compare_and_swap("/c/k", b"stale", r1) is None
    kv = await s.get("/c/k")
    assert kv is not None and (kv.value, kv.mod_revision, kv.version) == (b"second", r2, 2)

    assert await s.compare_and_delete("/c/k", r1) is False
    assert await s.compare_and_delete("/c/k", 0) is False
    assert await s.compare_and_delete("/c/k", r2) is True
    assert await s.get("/c/k") is None
    assert await s.compare_and_delete("/c/k", r2) is False


async def test_put_guarded_writes_only_while_every_guard_holds(h: Harness) -> None:
    s = h.store
    leader = await s.put("/g/leader", b"a")
    assert await s.put_guarded("/g/result", b"1", [("/g/leader", leader)]) is not None
    assert await s.put_guarded("/g/result", b"x", [("/g/leader", leader), ("/g/absent", 0)]) is not None
    assert await s.put_guarded("/g/result", b"2", [("/g/leader", leader + 100)]) is None
    assert await s.delete("/g/leader")
    assert await s.put_guarded("/g/result", b"3", [("/g/leader", leader)]) is None  # the leader is gone
    kv = await s.get("/g/result")
    assert kv is not None and kv.value == b"x"


async def test_update_with_retry_under_concurrent_writers_loses_no_increment(h: Harness) -> None:
    writers, rounds = 10, 3
    calls = 0

    def increment(old: bytes | None) -> bytes:
        nonlocal calls
        calls += 1
        return str(int(old or b"0") + 1).encode()

    async def writer() -> None:
        for _ in range(rounds):
            await update_with_retry(h.store, "/counter", increment)

    await asyncio.gather(*(writer() for _ in range(writers)))
    kv = await h.store.get("/counter")
    assert kv is not None and int(kv.value) == writers * rounds
    assert kv.version == writers * rounds
    assert calls > writers * rounds  # the writers really raced (some CAS lost and retried)


async def test_update_with_retry_gives_up_after_its_attempt_budget(h: Harness) -> None:
    async def always_overtaken(old: bytes | None) -> bytes:
        await h.store.put("/contended", b"someone else")  # a faster writer, every time
        return b"mine"

    with pytest.raises(CompareFailed):
        await update_with_retry(h.store, "/contended", always_overtaken, attempts=3)
    kv = await h.store.get("/contended")
    assert kv is not None and kv.value == b"someone else"

    # and None from modify leaves the key alone
    value, revision = await update_with_retry(h.store, "/contended", lambda old: None)
    assert (value, revision) == (b"someone else", kv.mod_revision)


async def test_lease_expiry_deletes_its_keys_in_one_revision_with_delete_events(h: Harness) -> None:
    s = h.store
    lease = await s.grant_lease(1)
    await s.put("/l/a", b"a", lease=lease)
    await s.put("/l/b", b"b", lease=lease)
    await s.put("/l/keep", b"k")
    kv = await s.get("/l/a")
    assert kv is not None and kv.lease == lease
    watch = s.watch_prefix("/l/", await s.revision() + 1)

    await h.pass_time(1_000)  # nobody refreshes
    events = [await next_event(watch), await next_event(watch)]
    assert [(e.kind, e.key) for e in events] == [(EventKind.DELETE, "/l/a"), (EventKind.DELETE, "/l/b")]
    assert events[0].mod_revision == events[1].mod_revision
    assert await s.get("/l/a") is None
    assert [kv.key for kv in await s.list_prefix("/l/")] == ["/l/keep"]
    with pytest.raises(LeaseLost):
        await s.refresh_lease(lease)
    with pytest.raises(LeaseLost):
        await s.put("/l/c", b"c", lease=lease)
    with pytest.raises(LeaseLost):
        await s.compare_and_swap("/l/c", b"c", 0, lease=lease)
    await s.revoke_lease(lease)  # revoking a gone lease is a no-op
    await close_watch(watch)


async def test_refreshed_lease_outlives_its_ttl_and_revoke_deletes_at_once(h: Harness) -> None:
    s = h.store
    lease = await s.grant_lease(2)
    await s.put("/r/k", b"v", lease=lease)
    await h.pass_time(1_200)
    await s.refresh_lease(lease)
    await h.pass_time(1_200)  # 2.4 s after the grant, 1.2 s after the refresh
    assert await s.get("/r/k") is not None
    await s.revoke_lease(lease)
    assert await s.get("/r/k") is None
    with pytest.raises(LeaseLost):
        await s.refresh_lease(lease)


async def test_put_under_a_lease_that_never_existed_is_refused(h: Harness) -> None:
    with pytest.raises(LeaseLost):
        await h.store.put("/x", b"", lease=0x5EED_0000_0BAD)
    assert await h.store.get("/x") is None


async def test_watch_delivers_prefix_events_in_revision_order(h: Harness) -> None:
    s = h.store
    start = await s.revision() + 1
    watch = s.watch_prefix("/w/", start)
    r = [
        await s.put("/w/a", b"1"),
        await s.put("/w/b", b"2"),
        await s.put("/other", b"-"),
        await s.put("/w/a", b"3"),
    ]
    await s.delete("/w/b")
    await s.delete_prefix("/w/")
    got = [await next_event(watch) for _ in range(5)]
    assert got == [
        WatchEvent(EventKind.PUT, "/w/a", b"1", r[0]),
        WatchEvent(EventKind.PUT, "/w/b", b"2", r[1]),
        WatchEvent(EventKind.PUT, "/w/a", b"3", r[3]),
        WatchEvent(EventKind.DELETE, "/w/b", b"", r[3] + 1),
        WatchEvent(EventKind.DELETE, "/w/a", b"", r[3] + 2),
    ]
    await close_watch(watch)
    with pytest.raises(StopAsyncIteration):
        await anext(watch)


async def test_watch_resumes_from_a_past_revision(h: Harness) -> None:
    s = h.store
    revisions = [await s.put(f"/res/{i}", str(i).encode()) for i in range(4)]
    watch = s.watch_prefix("/res/", revisions[2])
    assert [(await next_event(watch)).key for _ in range(2)] == ["/res/2", "/res/3"]
    live = await s.put("/res/4", b"4")
    event = await next_event(watch)
    assert (event.key, event.mod_revision) == ("/res/4", live)
    await close_watch(watch)


async def test_watch_from_a_compacted_revision_raises_compacted(h: Harness) -> None:
    s = h.store
    first = await s.put("/cmp/k", b"1")
    await s.put("/cmp/k", b"2")
    last = await s.put("/cmp/k", b"3")
    await h.compact(last)
    watch = s.watch_prefix("/cmp/", first)
    with pytest.raises(Compacted) as err:
        await next_event(watch)
    assert err.value.compacted_revision in (0, last)
    ok = s.watch_prefix("/cmp/", last)  # the compaction revision itself is still there
    assert (await next_event(ok)).value == b"3"
    await close_watch(ok)


async def test_slow_watcher_overflows_its_bounded_queue_then_resumes(h: Harness) -> None:
    bound = 4
    small = await h.other_store(watch_queue_size=bound)
    watch = small.watch_prefix("/o/", await h.store.revision() + 1)
    revisions = [await h.store.put(f"/o/{i:02d}", b"x") for i in range(10)]

    delivered = [(await next_event(watch)).mod_revision for _ in range(bound)]
    assert delivered == revisions[:bound]  # everything before the overflow, in order
    with pytest.raises(WatchOverflow) as err:
        await next_event(watch)
    assert err.value.resume_revision == revisions[bound]
    assert err.value.bound == bound
    with pytest.raises(StopAsyncIteration):
        await anext(watch)

    resumed = h.store.watch_prefix("/o/", err.value.resume_revision)
    assert [(await next_event(resumed)).mod_revision for _ in range(6)] == revisions[bound:]
    await close_watch(resumed)
