"""Deduplication and delayed delivery with real clients on real gateways.

Shows (docs/compatibility.md §1.5.2, §1.8, §4.9, §4.10; docs/architecture.md §4):
- with deduplication enabled on the namespace (admin API), a publish that
  repeats a producer's sequence id (or goes below it) is answered with
  message id -1:-1 and stored once - also after the producer reconnects, and
  over REST; ``"duplicate": true`` is added only for ``markDuplicates=true``,
  a plain Pulsar client gets exactly Pulsar's reply keys (and may send
  ``sequenceId`` as a decimal string, as Jackson reads a ``long``);
- ``deliverAfterMs`` / ``deliverAt`` hold a message back on Shared and
  Key_Shared until the time has come (later messages pass it), while an
  Exclusive subscription gets it at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from clusters import MessagingCluster
from wsclient import Collector, Producer, consumer_url, decode_id, module_cluster, unb64

from storage.formats.message_id import duplicate_id

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

POLICY_REFRESH_WAIT_S = 2.5  # gateways re-read namespace policies every second


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MessagingCluster]:
    async with module_cluster(etcd_endpoint, tmp_path_factory.mktemp("dedup")) as made:
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.post(
                f"{made.urls[0]}/admin/v2/namespaces/public/default/deduplication", json=True
            )
            assert response.status_code == 204, response.text
            policies = (
                await http.get(f"{made.urls[1]}/admin/v2/namespaces/public/default/deduplication")
            ).json()
            assert policies is True
        await asyncio.sleep(POLICY_REFRESH_WAIT_S)
        yield made


def texts(collector: Collector) -> list[str]:
    return [unb64(m["payload"]).decode() for m in collector.messages]


async def test_repeated_sequence_id_is_a_duplicate(cluster: MessagingCluster) -> None:
    topic = "dedup-ws"
    consumer = await Collector.connect(
        consumer_url(
            cluster.ws(1), topic, "s", "subscriptionType=Shared&subscriptionInitialPosition=Earliest"
        )
    )
    producer = await Producer.connect(cluster.ws(0), topic, "producerName=dedup-p&markDuplicates=true")
    first = await producer.send("one", sequenceId=5)
    assert first["result"] == "ok" and not first.get("duplicate")
    again = await producer.send("one-again", sequenceId=5)
    assert again["result"] == "ok"
    assert again.get("duplicate") is True
    dup_id = decode_id(again["messageId"])
    assert (dup_id.ledger_id, dup_id.entry_id) == (-1, -1)
    lower = await producer.send("older", sequenceId=3)
    assert lower.get("duplicate") is True
    second = await producer.send("two", sequenceId=6)
    assert second["result"] == "ok" and not second.get("duplicate")
    assert decode_id(second["messageId"]).ledger_id >= 0
    await producer.close()
    # the producer reconnects (same name) and retries: still a duplicate
    retry = await Producer.connect(cluster.ws(1), topic, "producerName=dedup-p&markDuplicates=true")
    replay = await retry.send("two-retry", sequenceId=6)
    assert replay.get("duplicate") is True
    # without an explicit sequence id the next one after the last stored is used
    fresh = await retry.send("three")
    assert fresh["result"] == "ok" and not fresh.get("duplicate")
    await retry.close()
    # another producer name has its own sequence
    other = await Producer.connect(cluster.ws(0), topic, "producerName=dedup-q")
    mine = await other.send("q5", sequenceId=5)
    assert not mine.get("duplicate")
    await other.close()

    await consumer.wait_messages(4)
    assert await consumer.nothing_for(0.8)
    assert texts(consumer) == ["one", "two", "three", "q5"]
    await consumer.close()


async def test_plain_pulsar_client_gets_pulsar_duplicate_reply(cluster: MessagingCluster) -> None:
    """No Folio query parameter: a repeat is answered exactly as Pulsar answers it."""
    topic = "dedup-plain"
    producer = await Producer.connect(cluster.ws(0), topic, "producerName=plain-p")
    first = await producer.send("p1", sequenceId="7")  # a decimal string, as Jackson accepts
    again = await producer.send("p1-again", sequenceId=7)
    await producer.close()
    pulsar_keys = {"result", "messageId", "context", "errorCode", "schemaVersion"}
    assert first["result"] == "ok" and set(first) == pulsar_keys, first
    assert set(again) == pulsar_keys, again
    assert again["result"] == "ok" and again["errorCode"] == 0
    assert again["messageId"] == duplicate_id().to_base64(), again
    url = f"{cluster.urls[1]}/topics/persistent/public/default/{topic}"
    body = {"producerName": "plain-p", "messages": [{"payload": "p1-rest", "sequenceId": 7}]}
    async with httpx.AsyncClient(timeout=10) as http:
        rest = (await http.post(url, json=body)).json()["messagePublishResults"][0]
    assert set(rest) == {"messageId", "errorCode", "schemaVersion"}, rest
    assert rest["errorCode"] == 0 and rest["messageId"].startswith("-1:-1"), rest
    reader = await Collector.connect(
        f"{cluster.ws(1)}/ws/v2/reader/persistent/public/default/{topic}?messageId=earliest"
    )
    await reader.wait_messages(1)
    assert await reader.nothing_for(0.6)
    assert texts(reader) == ["p1"]
    await reader.close()


async def test_rest_publish_with_sequence_id_is_deduplicated(cluster: MessagingCluster) -> None:
    topic = "dedup-rest"
    url = f"{cluster.urls[1]}/topics/persistent/public/default/{topic}?markDuplicates=true"
    body = {"producerName": "rest-p", "messages": [{"payload": "r1", "sequenceId": 1}]}
    async with httpx.AsyncClient(timeout=10) as http:
        first = (await http.post(url, json=body)).json()["messagePublishResults"][0]
        second = (await http.post(url, json=body)).json()["messagePublishResults"][0]
    assert first["errorCode"] == 0 and not first.get("duplicate")
    assert second["errorCode"] == 0 and second.get("duplicate") is True
    assert second["messageId"].startswith("-1:-1")
    reader = await Collector.connect(
        f"{cluster.ws(0)}/ws/v2/reader/persistent/public/default/{topic}?messageId=earliest"
    )
    await reader.wait_messages(1)
    assert await reader.nothing_for(0.6)
    assert texts(reader) == ["r1"]
    await reader.close()


async def test_an_id_skipped_before_a_move_is_refused_not_answered_as_a_duplicate(
    cluster: MessagingCluster,
) -> None:
    """Seq 1 failed on the old owner; seq 2, pipelined behind it, reached the new owner
    after the move and was stored. The resend of 1 used to be answered as a duplicate
    (acknowledged, never stored); now it is refused (409 ``sequence_abandoned``)."""
    topic = "dedup-move"
    url = f"{cluster.urls[0]}/topics/persistent/public/default/{topic}?markDuplicates=true"

    def body(seq: int) -> dict[str, object]:
        return {"producerName": "move-p", "messages": [{"payload": f"s{seq}", "sequenceId": seq}]}

    async with httpx.AsyncClient(timeout=10) as http:
        first = (await http.post(url, json=body(0))).json()["messagePublishResults"][0]
        assert first["errorCode"] == 0
        unload = f"{cluster.urls[1]}/admin/v2/persistent/public/default/{topic}/unload"
        assert (await http.put(unload)).status_code == 204
        after_move = (await http.post(url, json=body(2))).json()["messagePublishResults"][0]
        assert after_move["errorCode"] == 0 and not after_move.get("duplicate"), after_move
        resend = await http.post(url, json=body(1))
    result = resend.json()["messagePublishResults"][0] if resend.status_code == 200 else {}
    assert resend.status_code == 409 or result.get("errorCode", 0) != 0, resend.text
    assert not result.get("duplicate"), resend.text
    assert "sequence" in resend.text, resend.text
    reader = await Collector.connect(
        f"{cluster.ws(1)}/ws/v2/reader/persistent/public/default/{topic}?messageId=earliest"
    )
    await reader.wait_messages(2)
    assert await reader.nothing_for(0.6)
    assert texts(reader) == ["s0", "s2"]
    await reader.close()


@pytest.mark.parametrize("sub_type", ["Shared", "Key_Shared"])
async def test_delayed_delivery_waits_on_shared(cluster: MessagingCluster, sub_type: str) -> None:
    topic = f"delayed-{sub_type.lower()}"
    consumer = await Collector.connect(
        consumer_url(
            cluster.ws(1), topic, "s", f"subscriptionType={sub_type}&subscriptionInitialPosition=Earliest"
        )
    )
    producer = await Producer.connect(cluster.ws(0), topic)
    sent_at = time.monotonic()
    delayed = await producer.send("later", deliverAfterMs=1500, key="k")
    at = await producer.send("at", deliverAt=int(time.time() * 1000) + 1000, key="k2")
    now = await producer.send("now", key="k")
    assert delayed["result"] == at["result"] == now["result"] == "ok"
    first = await consumer.next(5)
    assert unb64(first["payload"]) == b"now"  # published after, delivered before
    second = await consumer.next(5)
    assert unb64(second["payload"]) == b"at"
    assert time.monotonic() - sent_at >= 0.95
    third = await consumer.next(5)
    elapsed = time.monotonic() - sent_at
    assert unb64(third["payload"]) == b"later"
    assert elapsed >= 1.45, elapsed  # never before the delay
    assert elapsed < 4.0, elapsed
    for m in consumer.messages:
        await consumer.ack(m["messageId"])
    await producer.close()
    await consumer.close()


async def test_delayed_message_goes_out_at_once_on_exclusive(cluster: MessagingCluster) -> None:
    topic = "delayed-exclusive"
    consumer = await Collector.connect(
        consumer_url(
            cluster.ws(0), topic, "s", "subscriptionType=Exclusive&subscriptionInitialPosition=Earliest"
        )
    )
    producer = await Producer.connect(cluster.ws(1), topic)
    sent_at = time.monotonic()
    reply = await producer.send("later", deliverAfterMs=5000)
    assert reply["result"] == "ok"
    frame = await consumer.next(3)
    assert unb64(frame["payload"]) == b"later"
    assert time.monotonic() - sent_at < 2.0
    await producer.close()
    await consumer.close()
