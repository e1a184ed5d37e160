"""Contract: lease sessions, leader election and membership, on MemoryStore and etcd.

Same harness as test_metadata_store.py: ``h.pass_time`` advances the manual clock
(memory) or lets real time pass (etcd). A "crash" is ``session.close(revoke=False)``:
keepalives stop and the lease runs out on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from contract_harness import EVENT_TIMEOUT_S, Harness

from coordination import keys
from coordination.election import Election, current_leader, observe_leader
from coordination.errors import AlreadyExists, LeaseLost
from coordination.membership import deregister, list_members, register, watch_members
from coordination.session import LeaseSession
from coordination.store import EventKind, MetadataStore
from coordination.watch_stream import close_watch

pytestmark = pytest.mark.contract


async def wait_for_put(store: MetadataStore, key: str, from_revision: int) -> None:
    """Readiness signal: block until ``key`` is written at or after ``from_revision``."""
    watch = store.watch_prefix(key, from_revision)
    async with asyncio.timeout(EVENT_TIMEOUT_S):
        async for event in watch:
            if event.key == key and event.kind is EventKind.PUT:
                break
    await close_watch(watch)


async def upto(it: AsyncIterator[object], timeout_s: float = EVENT_TIMEOUT_S) -> object:
    return await asyncio.wait_for(anext(it), timeout_s)


async def session(h: Harness, ttl_s: int) -> LeaseSession:
    return await LeaseSession(h.store, ttl_s, clock=h.clock).start()


async def test_session_keeps_its_lease_alive_and_close_revokes_it(h: Harness) -> None:
    s = await session(h, 2)
    await h.store.put("/s/k", b"v", lease=s.lease_id)
    if h.manual:
        for _ in range(4):  # 4 x 900 ms = 3.6 s of manual time, refreshed as it goes
            await h.pass_time(900)
            await s.refresh_now()
    else:
        await h.pass_time(3_000)  # the keepalive task refreshes every ttl/3 on its own
    assert await h.store.get("/s/k") is not None
    assert s.keepalives >= 3 and not s.lost.is_set() and s.is_valid()
    await s.close()
    assert s.lost.is_set() and not s.is_valid()
    assert await h.store.get("/s/k") is None
    with pytest.raises(LeaseLost):
        await h.store.refresh_lease(s.lease_id)


async def test_session_notices_a_lease_that_is_gone(h: Harness) -> None:
    s = await session(h, 30)
    await h.store.revoke_lease(s.lease_id)  # e.g. an operator, or expiry during a pause
    with pytest.raises(LeaseLost):
        await s.refresh_now()
    assert s.lost.is_set()
    await s.close()


async def test_election_lowest_revision_leads_and_a_dead_leader_is_replaced(h: Harness) -> None:
    name = "auditor"
    sa, sb = await session(h, 1), await session(h, 30)  # a will die; b must outlive the test
    a = Election(h.store, name, "a", sa)
    b = Election(h.store, name, "b", sb)
    observer = observe_leader(h.store, name)
    assert await upto(observer) is None

    await a.campaign()
    assert a.is_leader
    assert await upto(observer) == "a"
    revision = await h.store.revision()
    b_campaign = asyncio.create_task(b.campaign())
    await wait_for_put(h.store, b.key, revision)  # b is a candidate now
    assert await current_leader(h.store, name) == "a"
    assert not b_campaign.done() and not b.is_leader

    await sa.close(revoke=False)  # the leader crashes: no revoke, no more keepalives
    assert not a.is_leader
    await h.pass_time(1_000)
    await asyncio.wait_for(b_campaign, EVENT_TIMEOUT_S)
    assert b.is_leader
    assert await upto(observer) == "b"

    await b.resign()
    assert not b.is_leader
    assert await upto(observer) is None
    await observer.aclose()
    await sb.close()


async def test_resign_hands_leadership_to_the_next_candidate_in_order(h: Harness) -> None:
    sessions = [await session(h, 30) for _ in range(3)]
    elections = [Election(h.store, "lm", cid, s) for cid, s in zip("xyz", sessions, strict=True)]
    await elections[0].campaign()
    campaigns = []
    for e in elections[1:]:
        revision = await h.store.revision()
        campaigns.append(asyncio.create_task(e.campaign()))
        await wait_for_put(h.store, e.key, revision)
    await elections[0].resign()
    await asyncio.wait_for(campaigns[0], EVENT_TIMEOUT_S)
    assert elections[1].is_leader and not campaigns[1].done()
    assert await elections[2].leader() == "y"
    await elections[1].resign()
    await asyncio.wait_for(campaigns[1], EVENT_TIMEOUT_S)
    assert elections[2].is_leader
    for s in sessions:
        await s.close()


async def test_campaign_waits_out_an_earlier_incarnation_of_the_same_id(h: Harness) -> None:
    old_lease = await h.store.grant_lease(30)
    stale_key = keys.election("e") + "n1"
    await h.store.put(stale_key, b"old", lease=old_lease)
    s = await session(h, 30)
    campaign = asyncio.create_task(Election(h.store, "e", "n1", s).campaign())
    done, _ = await asyncio.wait({campaign}, timeout=0.3)
    assert not done  # blocked: the id is held under another lease
    kv = await h.store.get(stale_key)
    assert kv is not None and kv.lease == old_lease
    await h.store.revoke_lease(old_lease)
    await asyncio.wait_for(campaign, EVENT_TIMEOUT_S)
    kv = await h.store.get(stale_key)
    assert kv is not None and kv.lease == s.lease_id
    await s.close()


async def test_campaign_with_a_lost_session_raises_lease_lost(h: Harness) -> None:
    s = await session(h, 30)
    await s.close()
    with pytest.raises(LeaseLost):
        await Election(h.store, "e", "late", s).campaign()


async def test_membership_register_list_watch_and_expiry(h: Harness) -> None:
    s1, s2 = await session(h, 1), await session(h, 30)
    members = watch_members(h.store, keys.NODES)
    assert await upto(members) == {}

    await register(h.store, keys.node("n1"), b"v1", s1)
    assert await upto(members) == {"n1": b"v1"}
    await register(h.store, keys.node("n2"), b"v2", s2)
    assert await upto(members) == {"n1": b"v1", "n2": b"v2"}
    await register(h.store, keys.node("n1"), b"v1'", s1)  # same session: an update
    assert await upto(members) == {"n1": b"v1'", "n2": b"v2"}
    assert await list_members(h.store, keys.NODES) == {"n1": b"v1'", "n2": b"v2"}

    await s1.close(revoke=False)  # n1 crashes
    await h.pass_time(1_000)
    assert await upto(members) == {"n2": b"v2"}

    assert await deregister(h.store, keys.node("n2"), s2) is True
    assert await upto(members) == {}
    await members.aclose()
    await s2.close()


async def test_register_refuses_an_id_held_under_another_live_lease(h: Harness) -> None:
    owner, intruder = await session(h, 30), await session(h, 30)
    await register(h.store, keys.gateway("g1"), b"owner", owner)
    with pytest.raises(AlreadyExists):
        await register(h.store, keys.gateway("g1"), b"intruder", intruder, wait_timeout_s=0.2)
    assert await list_members(h.store, keys.GATEWAYS) == {"g1": b"owner"}
    await register(h.store, keys.gateway("g1"), b"intruder", intruder, takeover=True)
    kv = await h.store.get(keys.gateway("g1"))
    assert kv is not None and (kv.value, kv.lease) == (b"intruder", intruder.lease_id)
    assert await deregister(h.store, keys.gateway("g1"), owner) is False  # not owner's any more
    await owner.close()
    assert await list_members(h.store, keys.GATEWAYS) == {"g1": b"intruder"}
    await intruder.close()
    assert await list_members(h.store, keys.GATEWAYS) == {}


async def test_register_waits_for_a_stale_registration_to_expire(h: Harness) -> None:
    crashed, restarted = await session(h, 1), await session(h, 30)
    await register(h.store, keys.node("n9"), b"old", crashed)
    await crashed.close(revoke=False)
    registering = asyncio.create_task(register(h.store, keys.node("n9"), b"new", restarted))
    await h.pass_time(1_000)
    await asyncio.wait_for(registering, EVENT_TIMEOUT_S)
    assert await list_members(h.store, keys.NODES) == {"n9": b"new"}
    await restarted.close()


async def test_watch_members_recovers_from_watch_overflow_by_relisting(h: Harness) -> None:
    small = await h.other_store(watch_queue_size=2)
    s = await session(h, 30)
    members = watch_members(small, keys.NODES)
    assert await upto(members) == {}
    for i in range(10):  # 10 changes while the consumer is not reading: the watch overflows
        await register(h.store, keys.node(f"n{i}"), b"x", s)
    latest: object = None
    async with asyncio.timeout(EVENT_TIMEOUT_S):
        while not (isinstance(latest, dict) and len(latest) == 10):
            latest = await anext(members)
    assert latest == {f"n{i}": b"x" for i in range(10)}
    await members.aclose()
    await s.close()
