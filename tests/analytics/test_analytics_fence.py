"""A paused former analytics leader cannot overwrite newer results (real etcd, no Spark).

Two services share one etcd: A is elected and writes; A's lease then expires as
it would while A is paused (revoked here), B is elected and writes newer results.
A's writes - a topic's record, the summary, the run record, a SQL answer - are refused by etcd
(``Fenced``), and B's stay. The control shows the hazard the fence closes: the
same write made without the election guard goes through.
"""

from __future__ import annotations

import orjson
import pytest
from folio_analytics.fence import Fenced
from folio_analytics.job import LogRef
from folio_analytics.profile import fold_messages
from folio_analytics.service import AnalyticsService
from folio_analytics.sql import SqlRunner

from coordination import analytics_run as run_core
from coordination import keys
from coordination.etcd_store import EtcdStore
from tests.unit.test_analytics_core import messages

LOG = LogRef("persistent/public/default/fenced", "persistent://public/default/fenced", -1, (10, 11, 12))


async def write(service: AnalyticsService, run_id: int, count: int) -> None:
    partial = {LOG.path: fold_messages(messages(count, run_id))}
    await service._write(run_id, [LOG], {}, {}, partial, {}, [])


async def stored_run(store: EtcdStore) -> int:
    kv = await store.get(keys.analytics_topic(LOG.path))
    assert kv is not None
    return int(orjson.loads(kv.value)["runId"])


@pytest.mark.timeout(60)
async def test_a_stale_leaders_writes_are_refused(etcd_store: EtcdStore) -> None:
    a = AnalyticsService(etcd_store, "svc-a", {}, lease_ttl_s=2)
    b = AnalyticsService(etcd_store, "svc-b", {}, lease_ttl_s=6)
    try:
        await a.elect()
        await a._update(lambda r: run_core.take(run_core.request(r, 0)[0], "svc-a", 1))
        await write(a, 1, 100)
        assert await stored_run(etcd_store) == 1

        await etcd_store.revoke_lease(a.session.lease_id)  # A paused past its lease
        await b.elect()
        await b._update(lambda r: run_core.adopt(r, "svc-b", 2))
        await b._update(lambda r: run_core.take(r, "svc-b", 3))
        await write(b, 2, 200)
        assert await stored_run(etcd_store) == 2

        with pytest.raises(Fenced):  # A wakes up and finishes its run 1
            await write(a, 1, 100)
        with pytest.raises(Fenced):
            await a._update(lambda r: run_core.request(r, 4, "scheduled", ("a/b",))[0])
        assert await stored_run(etcd_store) == 2
        summary = await etcd_store.get(keys.ANALYTICS_SUMMARY)
        assert summary is not None and orjson.loads(summary.value)["messages"] == 200
        run = await etcd_store.get(keys.ANALYTICS_RUN)
        record = run_core.RunRecord.from_json(run.value if run else None)
        assert (record.run_id, record.service, record.queued_scope) == (2, "svc-b", ())

        query = keys.analytics_query(1)  # a SQL query B has not answered yet: A may not take it
        await etcd_store.put(query, orjson.dumps({"id": 1, "query": "SELECT 1", "state": "pending"}))
        pending = await etcd_store.get(query)
        assert pending is not None
        with pytest.raises(Fenced):
            await SqlRunner(None, etcd_store, {}, a.clock, a.fence)._answer(query, pending.mod_revision, {})
        assert (await etcd_store.get(query) or pending).mod_revision == pending.mod_revision

        # control: the same stale write without the election guard overwrites B's results
        key = keys.analytics_topic(LOG.path)
        await etcd_store.put(key, orjson.dumps({"runId": 1}))
        assert await stored_run(etcd_store) == 1
    finally:
        await a.session.close()
        await b.session.close()
