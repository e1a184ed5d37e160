"""Load never costs a gateway its lease (real etcd, real gateway processes).

The lease is renewed by a thread of its own (coordination/session_thread.py), so
an event loop kept busy by deliveries - or blocked outright - does not lose it;
a loop that does not run at all for ``stall_limit_ms`` (hung) stops the renewals.
The fan-out test is ``folio bench fanout`` at a smaller size: FOLIO_FANOUT_SECONDS
(default 15) of publishing; the full run is 60 s.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable

import pytest
from clusters import MessagingCluster

from coordination.etcd_store import connect
from coordination.session import LeaseSession
from coordination.session_thread import EtcdRefresher, ThreadLeaseSession
from folio.load_fanout import Watch, alive_of, mib, run_fanout

pytestmark = pytest.mark.component

MANY_SESSIONS = ("--sessions-per-role", "2000", "--load-manager-interval", "3600")  # 1,000 anonymous
# consumers and more; no bundle moved by load while a test measures

TTL_S = 2  # lost 1.8 s after the last refresh was sent


async def test_a_thread_kept_lease_outlives_an_event_loop_blocked_past_its_ttl(etcd_endpoint: str) -> None:
    store = await connect(etcd_endpoint)
    kept = await ThreadLeaseSession(store, TTL_S, EtcdRefresher(store.endpoints)).start()
    control = await LeaseSession(store, TTL_S).start()  # refreshed by a task of the blocked loop
    try:
        before = kept.keepalives
        time.sleep(2 * TTL_S)  # noqa: ASYNC251 - the event loop is busy: no task runs
        assert kept.is_valid(), "the thread-kept lease was lost while the loop was busy"
        assert kept.keepalives > before
        assert await store.lease_ttl(kept.lease_id) > 0
        await asyncio.sleep(0.1)  # the control's task runs now, finds its deadline passed
        assert control.lost.is_set(), "control: a task-kept lease survived a blocked loop"
        print(f"thread-kept lease: {kept.keepalives - before} refreshes while the loop was blocked 4 s")
    finally:
        await kept.close()
        await control.close()
        await store.close()


async def test_a_hung_event_loop_stops_the_renewals(etcd_endpoint: str) -> None:
    store = await connect(etcd_endpoint)
    session = await ThreadLeaseSession(
        store, TTL_S, EtcdRefresher(store.endpoints), stall_limit_ms=500
    ).start()
    try:
        time.sleep(2 * TTL_S)  # noqa: ASYNC251 - past the stall limit: hung, not busy
        assert not session.is_valid()
        await asyncio.sleep(0.1)
        assert session.lost.is_set()
        assert "ttl - margin" in session.lost_reason
    finally:
        await session.close()
        await store.close()


async def test_1000_relayed_consumers_at_10000_deliveries_per_s_keep_both_gateways(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=0, nodes=3)
    for _ in range(2):
        await cluster.add_gateway(*MANY_SESSIONS)
    pids = [g.pid for g in cluster.gateways]
    watch = Watch(pids, alive_of(pids)).start()
    seconds = float(os.environ.get("FOLIO_FANOUT_SECONDS", "15"))
    result = await run_fanout(cluster.urls, consumers=1000, rate=10, seconds=seconds, drain_s=45)
    await watch.stop()
    rss = ", ".join(f"{mib(watch.rss_max[p])}" for p in pids)
    print(
        f"fanout: {seconds:g} s, published={result.published} errors={result.publish_errors} "
        f"delivered={result.deliveries} missing={result.missing} complete={result.complete}/1000 "
        f"closes={dict(result.closes)} elapsed={result.seconds:.1f} s; gateway RSS max {rss}"
    )
    lease_lines = [line for g in cluster.gateways for line in g.log_text().splitlines() if "lease" in line]
    assert not watch.died, f"gateways died: {watch.died}; {lease_lines[-4:]}"
    assert result.publish_errors == 0
    assert result.published == int(10 * seconds)
    assert result.closes == {}
    assert result.missing == 0 and result.complete == 1000
