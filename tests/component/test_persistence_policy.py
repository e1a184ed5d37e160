"""The namespace persistence policy decides the quorums of a topic's next ledgers.

With real processes (etcd, 3 storage nodes, a gateway): POST …/persistence
E=3/Qw=2/Qa=2 on a namespace, publish, and the topic's ledger - as its metadata
in etcd says - has write quorum 2, while a topic of another namespace keeps the
gateway's 3/3/2; a bad body is 400; after DELETE the next ledger (opened when
the topic is loaded again) has 3/3/2 again and the earlier ledger keeps 3/2/2;
an ensemble larger than the storage nodes fails like any ledger without enough
nodes (503 ``not_enough_nodes``). In-process over real storage nodes: a rollover
takes the quorums of that moment, and unset means the log's ``LogConfig``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from clusters import LedgerCluster, MessagingCluster

from coordination import keys
from coordination.clock import WallClock
from gateway.broker.log_state import LogConfig, Quorums
from gateway.broker.managed_log import ManagedLog
from storage.client.api import LedgerClient
from storage.client.metadata import LedgerMetadataStore
from storage.formats.log_record import encode_state
from storage.types import LedgerMetadata

pytestmark = pytest.mark.component

A = "/admin/v2"
QUORUM_2 = {
    "bookkeeperEnsemble": 3,
    "bookkeeperWriteQuorum": 2,
    "bookkeeperAckQuorum": 2,
    "managedLedgerMaxMarkDeleteRate": 0.0,
}
RELOAD_TIMEOUT_S = 20.0  # gateways re-read namespace policies every second


def quorums(metadata: LedgerMetadata) -> tuple[int, int, int]:
    return metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum


async def publish(http: httpx.AsyncClient, topic: str) -> httpx.Response:
    return await http.post(f"/topics/persistent/{topic}", json={"messages": [{"payload": "aGk="}]})


async def published(http: httpx.AsyncClient, topic: str) -> None:
    response = await publish(http, topic)
    assert response.status_code == 200, response.text
    assert response.json()["messagePublishResults"][0]["errorCode"] == 0, response.text


async def ledger_ids(http: httpx.AsyncClient, topic: str) -> list[int]:
    stats = await http.get(f"{A}/persistent/{topic}/internalStats")
    assert stats.status_code == 200, stats.text
    ledgers: list[dict[str, Any]] = stats.json()["ledgers"]
    return [int(ledger["ledgerId"]) for ledger in ledgers]


async def test_namespace_quorums_apply_to_its_topics_next_ledgers(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=1, nodes=3)
    metadata = LedgerMetadataStore(await cluster.ledgers.store())
    async with httpx.AsyncClient(base_url=cluster.urls[0], timeout=15) as http:
        for ns in ("q2", "wide"):
            assert (await http.put(f"{A}/namespaces/public/{ns}")).status_code == 204
        keep = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}  # no trimming of closed ledgers
        assert (await http.post(f"{A}/namespaces/public/q2/retention", json=keep)).status_code == 204
        url = f"{A}/namespaces/public/q2/persistence"
        assert (await http.get(url)).json() is None
        bad = await http.post(url, json={**QUORUM_2, "bookkeeperAckQuorum": 3})
        assert bad.status_code == 400, bad.text
        assert bad.json()["code"] == "invalid_policy"
        assert "bookkeeperAckQuorum 3 is more than bookkeeperWriteQuorum 2" in bad.json()["reason"]
        assert (await http.post(url, json=QUORUM_2)).status_code == 204
        assert (await http.get(url)).json() == QUORUM_2

        await published(http, "public/q2/orders")
        await published(http, "public/default/other")
        [first] = await ledger_ids(http, "public/q2/orders")
        assert quorums(await metadata.read(first)) == (3, 2, 2)
        [other] = await ledger_ids(http, "public/default/other")
        assert quorums(await metadata.read(other)) == (3, 3, 2)

        # unset again: the ledger opened when the topic is next loaded has the defaults
        assert (await http.delete(url)).status_code == 204
        assert (await http.get(url)).json() is None
        newest = first
        async with asyncio.timeout(RELOAD_TIMEOUT_S):
            while quorums(await metadata.read(newest)) != (3, 3, 2):
                assert (await http.put(f"{A}/persistent/public/q2/orders/unload")).status_code == 204
                await published(http, "public/q2/orders")
                newest = (await ledger_ids(http, "public/q2/orders"))[-1]
                await asyncio.sleep(0.2)
        assert first in await ledger_ids(http, "public/q2/orders")
        assert quorums(await metadata.read(first)) == (3, 2, 2)  # existing ledgers keep theirs

        # more storage nodes than there are: no ledger, as without enough nodes
        wide = {**QUORUM_2, "bookkeeperEnsemble": 4}
        assert (await http.post(f"{A}/namespaces/public/wide/persistence", json=wide)).status_code == 204
        refused = await publish(http, "public/wide/t")
        assert refused.status_code == 503, refused.text
        assert refused.json()["code"] == "not_enough_nodes"


async def test_rollover_takes_the_quorums_of_that_moment(
    ledger_cluster: Callable[[int], Awaitable[LedgerCluster]],
) -> None:
    cluster = await ledger_cluster(3)
    store = await cluster.store()
    client = LedgerClient(store)
    path = "persistent/public/default/rolling"
    assert await store.compare_and_swap(keys.managed_log(path), encode_state([], 0, {}), 0) is not None
    now: list[Quorums | None] = [Quorums(3, 2, 2)]
    log = await ManagedLog.open(path, store, client, WallClock(), LogConfig(), quorums=lambda: now[0])
    try:
        first = log.current_ledger_id
        await log.append(b"a")
        now[0] = Quorums(2, 2, 1)  # applies from the next ledger, not to the open one
        assert quorums(await log.ledger_metadata(first)) == (3, 2, 2)
        await log.roll()
        second = log.current_ledger_id
        assert second != first
        assert quorums(await log.ledger_metadata(second)) == (2, 2, 1)
        await log.append(b"b")
        now[0] = None  # unset: the log's LogConfig
        await log.roll()
        assert quorums(await log.ledger_metadata(log.current_ledger_id)) == (3, 3, 2)
        assert quorums(await client.metadata.read(first)) == (3, 2, 2)
        assert quorums(await client.metadata.read(second)) == (2, 2, 1)
    finally:
        await log.close()
        await client.close()
