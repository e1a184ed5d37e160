"""Key_Shared semantics with real WebSocket consumers on real gateways.

Shows (docs/compatibility.md §4.5; docs/architecture.md §5):
- a per-key order checker over every delivery (not a sample): several
  producers publish keyed messages while consumers join and leave; for every
  key the first deliveries, across all consumers, are in log (publish) order,
  and a key is never delivered to a consumer while an earlier message of it
  is unacknowledged at another consumer; nothing is lost, and a message is
  delivered twice only as a redelivery;
- STICKY: consumers get exactly the keys whose Murmur3 slot is in their
  ``stickyRanges``; uncovered slots wait for a consumer that covers them; an
  overlapping range is refused with HTTP 409.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from clusters import MessagingCluster
from wsclient import (
    Collector,
    PipelinedProducer,
    consumer_url,
    eventually,
    handshake_status,
    id_order,
    module_cluster,
    publish_pipelined,
    unb64,
)

from storage.formats.key_hash import key_slot

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

KEYS = [f"key-{i}" for i in range(30)]
PRODUCERS = 3
PER_PRODUCER = 800
CHUNK = 20


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MessagingCluster]:
    async with module_cluster(etcd_endpoint, tmp_path_factory.mktemp("keyshared")) as made:
        yield made


@dataclass
class OrderChecker:
    """Client-side record of every delivery and ack, checked as it happens.

    Causality makes the client's view sufficient: the gateway may hand a key
    to consumer B only after it has seen A's ack (sent - and recorded here -
    before) or A's disconnect (recorded before the socket is closed)."""

    unacked: dict[str, dict[str, set[str]]] = field(default_factory=lambda: defaultdict(dict))
    first: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    delivered: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    acked: set[str] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)
    closing: set[str] = field(default_factory=set)
    per_consumer: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def on_message(self, consumer: str, frame: dict[str, Any]) -> None:
        key, mid = frame["key"], frame["messageId"]
        holders = self.unacked[key]
        others = {c: ids for c, ids in holders.items() if c != consumer and ids}
        if others:
            self.violations.append(f"{key}: {mid} to {consumer} while unacked at {sorted(others)}")
        holders.setdefault(consumer, set()).add(mid)
        if self.delivered[mid] == 0:
            self.first[key].append(mid)
        elif frame["redeliveryCount"] < 1:
            self.violations.append(f"{mid} delivered again with redeliveryCount 0")
        self.delivered[mid] += 1
        self.per_consumer[consumer] += 1

    def on_ack(self, consumer: str, key: str, mid: str) -> None:
        self.unacked[key].get(consumer, set()).discard(mid)
        self.acked.add(mid)

    def on_close(self, consumer: str) -> None:
        self.closing.add(consumer)
        for holders in self.unacked.values():
            holders.pop(consumer, None)


class KeyedConsumer:
    """A Key_Shared consumer that acks every message after a short random delay."""

    def __init__(self, collector: Collector, name: str, checker: OrderChecker, rng: random.Random) -> None:
        self.collector = collector
        self.name = name
        self.checker = checker
        self.rng = rng
        self.tasks: set[asyncio.Task[None]] = set()
        collector.on_message = self._on_message

    def _on_message(self, _c: Collector, frame: dict[str, Any]) -> None:
        self.checker.on_message(self.name, frame)
        task = asyncio.get_running_loop().create_task(self._ack_later(frame["key"], frame["messageId"]))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _ack_later(self, key: str, mid: str) -> None:
        await asyncio.sleep(self.rng.uniform(0, 0.03))
        if self.name in self.checker.closing:
            return
        self.checker.on_ack(self.name, key, mid)
        await self.collector.ack(mid)

    async def close(self) -> None:
        self.checker.on_close(self.name)
        for task in list(self.tasks):
            task.cancel()
        await self.collector.close()


async def test_per_key_order_while_consumers_join_and_leave(cluster: MessagingCluster) -> None:
    topic = "ks-order"
    rng = random.Random(20240607)
    checker = OrderChecker()
    query = "subscriptionType=Key_Shared&subscriptionInitialPosition=Earliest&receiverQueueSize=20"
    consumers: dict[str, KeyedConsumer] = {}
    joined = 0

    async def join() -> None:
        nonlocal joined
        name = f"ks-{joined}"
        url = consumer_url(cluster.ws(joined % 2), topic, "s", f"{query}&consumerName={name}")
        consumers[name] = KeyedConsumer(await Collector.connect(url), name, checker, rng)
        joined += 1

    async def leave(name: str) -> None:
        await consumers.pop(name).close()

    await join()
    await join()

    replies: list[list[dict[str, Any]]] = [[] for _ in range(PRODUCERS)]
    sent: list[list[dict[str, Any]]] = [[] for _ in range(PRODUCERS)]
    # membership changes while messages flow: step n runs once n/7 of the messages
    # are published, and producers do not get past (n+1)/7 before it is done
    steps = ("join", "leave ks-0", "join", "leave ks-1", "join", "leave ks-2")
    segments = len(steps) + 1
    done = [asyncio.Event() for _ in steps]

    async def produce(p: int) -> None:
        prng = random.Random(p)
        messages = [
            {"payload": f"p{p}:{i}", "key": prng.choice(KEYS), "properties": {"p": str(p), "i": str(i)}}
            for i in range(PER_PRODUCER)
        ]
        sent[p] = messages
        producer = await PipelinedProducer.connect(cluster.ws(p % 2), topic)
        for start in range(0, PER_PRODUCER, CHUNK):
            segment = start * segments // PER_PRODUCER
            if segment >= 2:
                await done[segment - 2].wait()
            replies[p] += await producer.publish(messages[start : start + CHUNK], window=CHUNK)
            await asyncio.sleep(0.02)
        await producer.close()

    def published() -> int:
        return sum(len(r) for r in replies)

    total = PRODUCERS * PER_PRODUCER
    producers = [asyncio.get_running_loop().create_task(produce(p)) for p in range(PRODUCERS)]
    for n, step in enumerate(steps, 1):
        await eventually(lambda n=n: published() >= n * total // segments, 30)
        if step == "join":
            await join()
        else:
            await leave(step.split()[1])
        done[n - 1].set()
    await asyncio.gather(*producers)

    all_ids = [r["messageId"] for rs in replies for r in rs]
    assert all(r["result"] == "ok" for rs in replies for r in rs)
    assert len(set(all_ids)) == total
    try:
        await eventually(lambda: len(checker.acked) >= total or bool(checker.violations), 60, 0.1)
    finally:
        for name in list(consumers):
            await leave(name)

    assert not checker.violations, checker.violations[:10]
    assert checker.acked == set(all_ids)
    # log order of each key = the order its messages were stored; first deliveries follow it
    key_of = {
        r["messageId"]: m["key"] for p in range(PRODUCERS) for m, r in zip(sent[p], replies[p], strict=True)
    }
    for key in KEYS:
        stored = sorted((mid for mid, k in key_of.items() if k == key), key=id_order)
        assert checker.first[key] == stored, key
    # and each producer's messages of a key were stored in the order it sent them
    for p in range(PRODUCERS):
        ids = [r["messageId"] for r in replies[p]]
        assert ids == sorted(ids, key=id_order)
    assert joined == 5
    # every consumer got a share: keys really moved between consumers
    assert len(checker.per_consumer) == 5 and min(checker.per_consumer.values()) > 0, checker.per_consumer

    # all acked: a new consumer of the subscription gets nothing
    late = await Collector.connect(consumer_url(cluster.ws(0), topic, "s", query))
    assert await late.nothing_for(1.0)
    await late.close()


async def test_sticky_ranges_route_by_murmur3_slot(cluster: MessagingCluster) -> None:
    topic = "ks-sticky"
    base = (
        "subscriptionType=Key_Shared&subscriptionInitialPosition=Earliest&keySharedMode=STICKY&notices=true"
    )
    low = await Collector.connect(consumer_url(cluster.ws(0), topic, "s", f"{base}&stickyRanges=0-32767"))
    keys = [f"sticky-{i}" for i in range(40)]
    lower = {k for k in keys if key_slot(k.encode()) <= 32767}
    upper = set(keys) - lower
    assert lower and upper
    messages = [{"payload": f"{k}#{n}", "key": k} for n in range(3) for k in keys]
    await publish_pipelined(cluster.ws(1), topic, messages)
    await low.wait_messages(3 * len(lower))
    assert await low.nothing_for(0.8)  # the upper half is covered by nobody: it waits
    assert {m["key"] for m in low.messages} == lower

    # an overlapping STICKY range is refused, through either gateway
    for gateway in (0, 1):
        url = consumer_url(cluster.ws(gateway), topic, "s", f"{base}&stickyRanges=30000-40000")
        assert await handshake_status(url) == 409
    # as is an AUTO_SPLIT consumer on a STICKY subscription
    auto = consumer_url(cluster.ws(1), topic, "s", "subscriptionType=Key_Shared")
    assert await handshake_status(auto) != 101

    high = await Collector.connect(
        consumer_url(cluster.ws(1), topic, "s", f"{base}&stickyRanges=32768-65535")
    )
    await high.wait_messages(3 * len(upper))
    assert {m["key"] for m in high.messages} == upper
    for c in (low, high):
        for m in c.messages:
            await c.ack(m["messageId"])
    # per key, in publish order
    for c in (low, high):
        by_key: dict[str, list[int]] = defaultdict(list)
        for m in c.messages:
            by_key[m["key"]].append(int(unb64(m["payload"]).decode().split("#")[1]))
        assert all(v == [0, 1, 2] for v in by_key.values()), by_key

    more = [{"payload": f"{k}#late", "key": k} for k in keys]
    await publish_pipelined(cluster.ws(0), topic, more)
    await low.wait_messages(4 * len(lower))
    await high.wait_messages(4 * len(upper))
    assert await low.nothing_for(0.3) and await high.nothing_for(0.1)
    assert {m["key"] for m in low.messages[3 * len(lower) :]} == lower
    assert {m["key"] for m in high.messages[3 * len(upper) :]} == upper
    # ranges notices tell each consumer its own ranges
    assert [[0, 32767]] in [n.get("ranges") for n in low.notices if n.get("type") == "ranges"]
    assert [[32768, 65535]] in [n.get("ranges") for n in high.notices if n.get("type") == "ranges"]
    await low.close()
    await high.close()
