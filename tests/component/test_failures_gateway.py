"""Failure tests with real processes: etcd, 3 storage nodes, 2 gateways (docs/testing.md §2).

Each test runs a workload of reconnecting clients (wsclient.AtLeastOnceProducer:
resend every message whose ``ok`` was not received; wsclient.ReconnectingConsumer:
ack everything, reconnect through either gateway), injects one fault, heals and
checks the history with checkers.py:
- F5 kill -9 the owning gateway under Failover and Key_Shared consumers: every
  acked message is delivered at least once after the other gateway takes over,
  and first deliveries follow publish order per producer (Failover) and per
  producer and key (Key_Shared); sessions the surviving gateway relayed to the
  dead owner are closed with 4503, not dropped;
- F6 SIGSTOP the owner past its lease: the other gateway takes over (fencing
  the old ledger), and after SIGCONT the zombie acknowledges nothing it was
  sent after the stop (it steps down as soon as it sees its lease lost); every
  ok reply's message id is in the log as read from the earliest position;
- F1 kill -9 one storage node mid-stream: no send error at all (the ledger keeps
  writing to the two surviving members) and every acked message is consumed;
- C5 dedup on + fixed producer name + explicit sequence ids: retries after a
  gateway kill (and explicit re-sends of acked ids) store each sequence id once;
  CONTROL: with dedup off, the same re-sends are stored twice;
- CONTROL: the checkers flag loss, reordering, phantom reads and zombie acks in
  fabricated histories and in a mutated copy of every real history.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import httpx
import orjson
import pytest
import websockets
from checkers import (
    Delivered,
    Report,
    Sent,
    acked_ids_missing_from_log,
    by_producer,
    by_producer_and_key,
    check_history,
    decode_frame,
    id_key,
    stored_duplicates,
)
from clusters import GATEWAY_LEASE_TTL_S, MessagingCluster
from failover_clients import (
    AtLeastOnceProducer,
    Deliveries,
    ReconnectingConsumer,
    owner_of,
    read_log,
    wait_for_owner,
)
from wsclient import TOPIC_PATH, Consumer, b64

from storage.formats.message_id import MessageId

pytestmark = pytest.mark.component

Cluster = Callable[..., Awaitable[MessagingCluster]]
TAKEOVER_S = 15.0  # lease TTL (3 s) + takeover, with margin


async def until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


def lost_now(sent: list[Sent], deliveries: Deliveries) -> int:
    return len(check_history(sent, deliveries.items).lost)


def assert_checker_sees_mutations(sent: list[Sent], delivered: list[Delivered]) -> None:
    """Live control: the checker that passed on the real history must flag a copy of it
    with one acked message's deliveries removed, and one with two first deliveries swapped."""
    acked = [s for s in sent if s.acked]
    assert acked, "nothing was acked"
    victim = acked[len(acked) // 2]
    dropped = [d for d in delivered if (d.producer, d.seq) != (victim.producer, victim.seq)]
    assert check_history(sent, dropped).lost == [(victim.producer, victim.seq)]
    firsts: dict[tuple[str, int], Delivered] = {}
    for d in delivered:
        firsts.setdefault((d.producer, d.seq), d)
    mine = sorted((d for d in firsts.values() if d.producer == victim.producer), key=lambda d: d.index)
    if len(mine) >= 2:  # the producer's last message first delivered before its first one
        swap = {mine[0].index: mine[-1].index, mine[-1].index: mine[0].index}
        swapped = [replace(d, index=swap.get(d.index, d.index)) for d in delivered]
        assert check_history(sent, swapped).order_violations


def gateway_index(cluster: MessagingCluster, url: str) -> int:
    return cluster.urls.index(url)


async def retain_everything(ws_base: str, topic: str) -> None:
    """Create a durable subscription at the earliest position that never acks, so no
    ledger of ``topic`` is trimmed (with no subscription, consumed-by-nobody data goes)."""
    consumer = await Consumer.connect(ws_base, topic, "audit", "subscriptionInitialPosition=Earliest")
    await consumer.close()


# ------------------------------------------------------------------ F5: kill -9 the owner


async def test_kill9_owner_gateway_failover_and_key_shared(messaging_cluster: Cluster) -> None:
    cluster = await messaging_cluster(gateways=2)
    topic = "f5-kill-owner"
    owner = gateway_index(cluster, await owner_of(cluster.urls[0], topic))
    other = 1 - owner
    ws = [cluster.ws(0), cluster.ws(1)]
    stop_consumers = asyncio.Event()
    failover, key_shared = Deliveries(), Deliveries()
    consumers = [
        ReconnectingConsumer(
            ws,
            topic,
            sub,
            f"{sub}{i}",
            into,
            first_base=base,
            query=f"{query}&subscriptionInitialPosition=Earliest",
        )
        for sub, into, query in [
            ("fo", failover, "subscriptionType=Failover"),
            ("ks", key_shared, "subscriptionType=Key_Shared"),
        ]
        for i, base in enumerate((owner, other))  # one straight to the owner, one relayed
    ]
    consumer_tasks = [asyncio.create_task(c.run(stop_consumers)) for c in consumers]
    await until(lambda: all(c.connects for c in consumers), 15, "consumers to connect")

    stop_producers = asyncio.Event()
    producers = [
        AtLeastOnceProducer(ws, topic, f"p{i}", window=8, keys=8, interval_s=0.002, first_base=base)
        for i, base in enumerate((owner, other))
    ]
    producer_tasks = [asyncio.create_task(p.run(stop_producers)) for p in producers]
    try:
        await until(lambda: all(p.acked_count() >= 150 for p in producers), 20, "acks before the kill")
        killed_at = time.monotonic()
        cluster.gateways[owner].kill9()
        before = [p.acked_count() for p in producers]
        await until(
            lambda: all(p.acked_count() >= b + 100 for p, b in zip(producers, before, strict=True)),
            TAKEOVER_S,
            "publishing to resume through the surviving gateway",
        )
        resumed_after = time.monotonic() - killed_at
        await asyncio.sleep(1.0)
        stop_producers.set()
        await asyncio.wait_for(asyncio.gather(*producer_tasks), 40)
        sent = [s for p in producers for s in p.history()]
        assert all(not p.unacked for p in producers), "messages never acknowledged after the takeover"
        await until(
            lambda: lost_now(sent, failover) == 0 and lost_now(sent, key_shared) == 0,
            20,
            "every acked message to be delivered on both subscriptions",
        )
    finally:
        stop_producers.set()
        stop_consumers.set()
        await asyncio.gather(*producer_tasks, *consumer_tasks, return_exceptions=True)
    reports: dict[str, Report] = {
        "failover": check_history(sent, failover.items, by_producer),
        "key_shared": check_history(sent, key_shared.items, by_producer_and_key),
    }
    summary = {name: r.line() for name, r in reports.items()}
    print(f"F5 resumed_after={resumed_after:.1f}s {summary}")
    for name, report in reports.items():
        assert report.ok, f"{name}: {report.line()}"
        assert report.acked == len(sent)
    assert all(c.connects >= 2 for c in consumers), "a consumer never had to reconnect"
    # sessions the surviving gateway relayed to the dead owner are closed with 4503, not dropped
    relayed = [code for c in consumers for base, code in c.closes if base == ws[other]]
    assert relayed and set(relayed) == {4503}, [(c.name, c.closes, c.connect_errors[:3]) for c in consumers]
    assert_checker_sees_mutations(sent, failover.items)
    assert_checker_sees_mutations(sent, key_shared.items)


# ------------------------------------------------------------------ F6: zombie owner


async def test_sigstopped_owner_is_fenced_and_acks_nothing_after_takeover(messaging_cluster: Cluster) -> None:
    cluster = await messaging_cluster(gateways=2)
    topic = "f6-zombie"
    owner = gateway_index(cluster, await owner_of(cluster.urls[0], topic))
    other = 1 - owner
    zombie = cluster.gateways[owner]
    await retain_everything(cluster.ws(owner), topic)
    # P1: straight to the owner, sending every 3 ms regardless of replies, so adds are in
    # flight when it stops and frames sit in its socket buffer while it is stopped
    p1 = await websockets.connect(
        f"{cluster.ws(owner)}/ws/v2/producer/{TOPIC_PATH}/{topic}?producerName=p1",
        open_timeout=10,
        ping_interval=None,
        close_timeout=1,
    )
    sent_at: dict[int, float] = {}
    replies: dict[int, tuple[float, dict[str, Any]]] = {}
    p1_closed: list[float] = []
    stopped_at = resumed_at = float("inf")

    async def p1_send() -> None:
        seq = 0
        while seq < 4000 and (time.monotonic() - stopped_at) < 1.0:
            frame = {"payload": b64(orjson.dumps({"p": "p1", "s": seq})), "context": str(seq)}
            sent_at[seq] = time.monotonic()
            await p1.send(orjson.dumps(frame).decode())
            seq += 1
            await asyncio.sleep(0.003)

    async def p1_receive() -> None:
        try:
            async for raw in p1:
                reply = orjson.loads(raw)
                replies[int(reply["context"])] = (time.monotonic(), reply)
        except websockets.ConnectionClosed:
            pass
        p1_closed.append(time.monotonic())

    receiver = asyncio.create_task(p1_receive())
    sender = asyncio.create_task(p1_send())
    p2_ids: list[str] = []
    try:
        await until(lambda: len(replies) >= 200, 15, "P1 acks before the stop")
        os.kill(zombie.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        await asyncio.wait_for(sender, 10)  # keeps sending for 1 s into the stop
        await wait_for_owner(cluster.urls[other], topic, cluster.urls[other], TAKEOVER_S)
        p2 = await websockets.connect(
            f"{cluster.ws(other)}/ws/v2/producer/{TOPIC_PATH}/{topic}?producerName=p2", open_timeout=10
        )
        for seq in range(30):
            await p2.send(orjson.dumps({"payload": b64(orjson.dumps({"p": "p2", "s": seq}))}).decode())
            reply = orjson.loads(await asyncio.wait_for(p2.recv(), 10))
            assert reply["result"] == "ok", reply
            p2_ids.append(reply["messageId"])
        await p2.close()
        await asyncio.sleep(max(0.0, 2 * GATEWAY_LEASE_TTL_S - (time.monotonic() - stopped_at)))
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
        resumed_at = time.monotonic()
    try:
        await until(lambda: bool(p1_closed) or len(replies) == len(sent_at), 10, "the zombie to answer")
        await asyncio.sleep(0.5)
    finally:
        await p1.close()
        receiver.cancel()
    # (a gateway whose lease is lost steps down, dropping the topic, and rejoins)

    after_stop = {seq for seq, t in sent_at.items() if t >= stopped_at}
    assert after_stop, "nothing was sent to the stopped owner"
    zombie_oks = [seq for seq in after_stop if seq in replies and replies[seq][1]["result"] == "ok"]
    late_replies = [r for t, r in replies.values() if t >= resumed_at]
    acked_ids = [r["messageId"] for _, r in replies.values() if r["result"] == "ok"] + p2_ids
    log = await read_log(cluster.ws(other), topic, {id_key(i) for i in acked_ids}, timeout=20)
    log_ids = [f["messageId"] for f in log]
    missing = acked_ids_missing_from_log(acked_ids, log_ids)
    print(
        f"F6 p1_sent={len(sent_at)} sent_while_stopped={len(after_stop)} p1_acked={len(acked_ids) - 30} "
        f"late_replies={len(late_replies)} late_errors={sum(r['result'] != 'ok' for r in late_replies)} "
        f"zombie_acks={len(zombie_oks)} missing_from_log={len(missing)} log={len(log)}"
    )
    assert zombie_oks == [], f"the zombie acknowledged {len(zombie_oks)} messages sent after the stop"
    assert missing == [], f"{len(missing)} acknowledged messages are not in the log: {missing[:5]}"
    assert p1_closed or any(r["result"] != "ok" for r in late_replies), "the zombie was never fenced"
    # CONTROL: the same check flags an ack whose id the log does not hold
    fake = MessageId(10**9, 0, -1, -1, 0).to_base64()
    assert acked_ids_missing_from_log([*acked_ids, fake], log_ids) == [fake]


# ------------------------------------------------------------------ F1: kill -9 a storage node


async def test_kill9_storage_node_mid_stream(messaging_cluster: Cluster) -> None:
    cluster = await messaging_cluster(gateways=2)
    topic = "f1-kill-node"
    owner = gateway_index(cluster, await owner_of(cluster.urls[0], topic))
    ws = [cluster.ws(0), cluster.ws(1)]
    deliveries = Deliveries()
    stop_consumer, stop_producer = asyncio.Event(), asyncio.Event()
    consumer = ReconnectingConsumer(
        ws, topic, "s", "c", deliveries, first_base=1 - owner, query="subscriptionInitialPosition=Earliest"
    )
    consumer_task = asyncio.create_task(consumer.run(stop_consumer))
    await until(lambda: consumer.connects > 0, 15, "the consumer to connect")
    producer = AtLeastOnceProducer(ws, topic, "p", window=16, interval_s=0.001, first_base=owner)
    producer_task = asyncio.create_task(producer.run(stop_producer))
    try:
        await until(lambda: producer.acked_count() >= 500, 20, "acks before the kill")
        killed_at = time.monotonic()
        cluster.ledgers.nodes[0].kill9()
        before = producer.acked_count()
        await until(lambda: producer.acked_count() >= before + 1000, 20, "acks after the kill")
        resumed_after = time.monotonic() - killed_at
        stop_producer.set()
        await asyncio.wait_for(producer_task, 30)
        sent = producer.history()
        await until(lambda: lost_now(sent, deliveries) == 0, 20, "every acked message to be consumed")
    finally:
        stop_producer.set()
        stop_consumer.set()
        await asyncio.gather(producer_task, consumer_task, return_exceptions=True)
    report = check_history(sent, deliveries.items)
    print(f"F1 resumed_after={resumed_after:.2f}s errors={producer.errors[:3]} {report.line()}")
    assert producer.errors == [], f"send errors after a single node kill: {producer.errors[:5]}"
    assert report.ok, report.line()
    assert report.acked == len(sent)
    assert_checker_sees_mutations(sent, deliveries.items)


# ------------------------------------------------------------------ C5: dedup across a gateway kill


async def stored_pairs(base: str, topic: str) -> list[tuple[str, int]]:
    frames = await read_log(base, topic, timeout=20)
    return [(d.producer, d.seq) for d in (decode_frame(i, "log", f) for i, f in enumerate(frames))]


async def resend(base: str, topic: str, name: str, seqs: list[int]) -> list[dict[str, Any]]:
    """Re-send ``seqs`` of producer ``name`` (same payload and sequence id), one at a time."""
    async with websockets.connect(
        f"{base}/ws/v2/producer/{TOPIC_PATH}/{topic}?producerName={name}&markDuplicates=true", open_timeout=10
    ) as ws:
        out = []
        for seq in seqs:
            payload = orjson.dumps({"p": name, "s": seq, "k": None})
            await ws.send(orjson.dumps({"payload": b64(payload), "sequenceId": seq}).decode())
            out.append(orjson.loads(await asyncio.wait_for(ws.recv(), 10)))
        return out


async def test_dedup_stores_each_sequence_id_once_across_a_gateway_kill(messaging_cluster: Cluster) -> None:
    cluster = await messaging_cluster(gateways=2)
    ws = [cluster.ws(0), cluster.ws(1)]

    # CONTROL (dedup off): explicit re-sends of acked sequence ids ARE stored twice
    control = "c5-dedup-off"
    await retain_everything(cluster.ws(0), control)
    first = AtLeastOnceProducer(ws, control, "ctl", window=8, send_sequence_id=True)
    await asyncio.wait_for(first.run(asyncio.Event(), limit=20), 30)
    replies = await resend(cluster.ws(0), control, "ctl", list(range(10, 20)))
    assert all(r["result"] == "ok" and not r.get("duplicate") for r in replies), replies
    control_dups = stored_duplicates(await stored_pairs(cluster.ws(0), control))
    assert set(control_dups) == {("ctl", s) for s in range(10, 20)}, control_dups

    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(
            f"{cluster.urls[0]}/admin/v2/namespaces/public/default/deduplication", json=True
        )
        assert response.status_code in (200, 204), response.text
        policies = (await http.get(f"{cluster.urls[1]}/admin/v2/namespaces/public/default")).json()
        assert policies.get("deduplicationEnabled") is True, policies
    await asyncio.sleep(1.5)  # gateways refresh namespace policies every second

    topic = "c5-dedup-on"
    owner = gateway_index(cluster, await owner_of(cluster.urls[0], topic))
    await retain_everything(cluster.ws(owner), topic)
    other = 1 - owner
    stop = asyncio.Event()
    producer = AtLeastOnceProducer(
        ws, topic, "dd", window=16, send_sequence_id=True, interval_s=0.001, first_base=owner
    )
    task = asyncio.create_task(producer.run(stop))
    try:
        await until(lambda: producer.acked_count() >= 300, 20, "acks before the kill")
        cluster.gateways[owner].kill9()
        before = producer.acked_count()
        await until(lambda: producer.acked_count() >= before + 200, TAKEOVER_S, "acks after the takeover")
        stop.set()
        await asyncio.wait_for(task, 40)
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)
    assert not producer.unacked
    total = producer.next_seq
    # explicit retries of already-acked ids, through the new owner: all answered as duplicates
    retried = await resend(cluster.ws(other), topic, "dd", [*range(total - 10, total), 0, 1])
    assert all(r["result"] == "ok" and r.get("duplicate") is True for r in retried), retried
    stored = await stored_pairs(cluster.ws(other), topic)
    dups = stored_duplicates(stored)
    missing = sorted(set(range(total)) - {s for _, s in stored})
    print(
        f"C5 sent={total} reconnects={producer.connects - 1} "
        f"duplicate_replies={producer.duplicates} stored={len(stored)} stored_dup={len(dups)} "
        f"missing={len(missing)} control_stored_dup={len(control_dups)}"
    )
    assert dups == {}, f"stored duplicates with dedup on: {sorted(dups.items())[:10]}"
    assert missing == [], f"acked sequence ids missing from the log: {missing[:10]}"
    assert producer.connects >= 2, "the producer never had to reconnect"


# ------------------------------------------------------------------ CONTROL: the checkers can fail


def _history(n: int = 6) -> tuple[list[Sent], list[Delivered]]:
    sent = [Sent("p", s, None, (MessageId(7, s, -1, -1, 0).to_base64(),)) for s in range(n)]
    delivered = [Delivered(s, "c", "p", s, None, sent[s].ok_ids[0]) for s in range(n)]
    return sent, delivered


def test_control_checker_reports_loss_reorder_phantoms_and_zombie_acks() -> None:
    sent, delivered = _history()
    assert check_history(sent, delivered).ok
    # an acked message never delivered: lost
    report = check_history(sent, [d for d in delivered if d.seq != 3])
    assert report.lost == [("p", 3)] and not report.ok
    # redelivery of an earlier message is a duplicate, not an order violation
    again = [*delivered, replace(delivered[1], index=99)]
    report = check_history(sent, again)
    assert report.ok and report.duplicates == 1
    # first deliveries out of publish order: an order violation
    swapped = [replace(d, index={2: 3, 3: 2}.get(d.index, d.index)) for d in delivered]
    assert check_history(sent, swapped).order_violations == [("p", 3, 2)]
    # per key: order across keys is free, within a key it is not
    keyed = [Sent("p", s, f"k{s % 2}", ("x",)) for s in range(4)]
    got = [Delivered(i, "c", "p", s, f"k{s % 2}", "x") for i, s in enumerate([1, 0, 3, 2])]
    assert check_history(keyed, got, by_producer_and_key).ok
    assert check_history(keyed, got, by_producer).order_violations
    # a value nobody published: a phantom read; an unacked one that shows up: recovered
    phantom = [*delivered, Delivered(50, "c", "ghost", 1, None, "x")]
    assert check_history(sent, phantom).unexpected == [("ghost", 1)]
    unacked = [*sent, Sent("p", 6)]
    assert check_history(unacked, [*delivered, Delivered(60, "c", "p", 6, None, "y")]).recovered == 1
    # an ok reply whose id the log does not hold (a zombie's ack), in either id encoding
    log_ids = [str(MessageId(7, s, -1, -1, 0)) for s in range(5)]
    assert acked_ids_missing_from_log([s.ok_ids[0] for s in sent], log_ids) == [sent[5].ok_ids[0]]
    # stored duplicates
    assert stored_duplicates([("p", 1), ("p", 2), ("p", 1)]) == {("p", 1): 2}
