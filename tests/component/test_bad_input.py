"""Bad input over WebSocket against real gateways (docs/testing.md §4; docs/compatibility.md §1.3-1.8).

One cluster for the module (etcd, 3 storage nodes, 2 gateways). Shows:
- WS producer: malformed JSON -> ``send-error:3`` and the session stays open;
  bad base64 -> ``send-error:7`` (context echoed); a payload of exactly the
  configured limit is stored byte for byte, limit + 1 is a ``send-error`` reply;
  a frame above the WebSocket max size closes with 1009; the gateways' RSS
  stays bounded through repeated oversize attempts; a seeded sweep of garbage
  frames gets one reply per frame and never kills the session;
- WS handshakes: unknown / badly cased subscriptionType and receiverQueueSize
  abc / -5 / 10^7 / 2^31 -> 400 (through the owner and through the relay);
- acks with garbage ids (random base64, ``1:2:3``, ids of another topic,
  foreign ledgers) move no cursor: on reconnect every unacked message comes
  again (CONTROL: a real ack does move it); garbage JSON closes with 4003;
- data already accepted is not disturbed by bad neighbour requests (REST too).
REST bodies, names and path traversal: test_bad_input_rest.py.
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio
import websockets
from badinput import BAD_JSON_BODIES, assert_gateways_survived
from clusters import MessagingCluster
from failover_clients import owner_of
from websockets.exceptions import ConnectionClosed, InvalidStatus
from wsclient import (
    TOPIC_PATH,
    Consumer,
    Producer,
    b64,
    consumer_url,
    handshake_status,
    module_cluster,
    publish_each,
    unb64,
)

from gateway.process import GatewayConfig
from storage.formats.message_id import MessageId

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

LIMIT = GatewayConfig("x", "x").max_message_bytes  # the gateways run with the default config
RSS_GROWTH_MAX_KB = 300 * 1024
WS_MAX_SIZE = 16 * 1024 * 1024  # uvicorn ws_max_size in gateway/main.py


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MessagingCluster]:
    async with module_cluster(etcd_endpoint, tmp_path_factory.mktemp("badinput")) as made:
        yield made


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30.0) as client:
        yield client


async def owner_index(cluster: MessagingCluster, topic: str) -> int:
    return cluster.urls.index(await owner_of(cluster.urls[0], topic))


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


async def reply_to(ws: Any, frame: str | bytes, timeout: float = 15.0) -> dict[str, Any]:
    await ws.send(frame)
    reply: dict[str, Any] = orjson.loads(await asyncio.wait_for(ws.recv(), timeout))
    return reply


async def still_publishes(producer: Producer, text: str = "still-open") -> str:
    reply = await producer.send(text)
    assert reply["result"] == "ok", reply
    return str(reply["messageId"])


# ------------------------------------------------------------------ WS producer frames


async def test_ws_producer_malformed_json_gets_send_error_3_and_session_stays_open(
    cluster: MessagingCluster,
) -> None:
    producer = await Producer.connect(cluster.ws(0), "bad-json")
    try:
        await still_publishes(producer, "first")
        bad_frames: list[str | bytes] = [
            "{not json",
            '{"payload": "YQ==", "context": "c"',  # truncated
            '{"payload": "YQ=="} trailing',
            "\ufeff" + '{"payload": "YQ=="}',  # BOM
            '{"payload": NaN}',
            "[" * 100_000 + "]" * 100_000,  # nesting bomb
            "[]",
            "null",
            "42",
            '"just a string"',
            "",
            '{"payload": 5, "context": "n"}',  # wrong type: still a deserialisation error
            '{"payload": "YQ==", "sequenceId": 99999999999999999999999}',
            '{"payload": "YQ==", "properties": {"k": 1}}',
            '{"payload": "YQ==", "context": "\\ud800"}',
            b"\xff\xfe{not utf-8",  # binary frames too
            b'{"payload": "YQ=="',
        ]
        for frame in bad_frames:
            reply = await reply_to(producer.ws, frame)
            assert reply["result"] == "send-error:3", (frame[:60], reply)
            assert reply.get("errorMsg"), reply
        await still_publishes(producer, "after")
    finally:
        await producer.close()


async def test_ws_producer_invalid_base64_gets_send_error_7_with_context(cluster: MessagingCluster) -> None:
    producer = await Producer.connect(cluster.ws(1), "bad-base64")
    try:
        for i, payload in enumerate(
            ["!!!!", "YQ", "YWJjZA=", "YW Jj", "YWJj\n", "-_-_", "YQ===", "Y", "=YQ="]
        ):
            frame = orjson.dumps({"payload": payload, "context": f"c{i}"}).decode()
            reply = await reply_to(producer.ws, frame)
            if payload == "YQ":  # padding is optional (Java's basic decoder): valid
                assert reply["result"] == "ok", reply
                continue
            assert reply["result"] == "send-error:7", (payload, reply)
            assert reply["context"] == f"c{i}", reply
            assert "Base64" in reply["errorMsg"], reply
        missing = await reply_to(producer.ws, '{"context": "m"}')
        assert missing["result"] == "send-error:7" and missing["context"] == "m", missing
        await still_publishes(producer)
    finally:
        await producer.close()


async def test_ws_payload_limit_exact_ok_plus_one_refused_and_rss_bounded(cluster: MessagingCluster) -> None:
    topic = "payload-limit"
    owner = await owner_index(cluster, topic)
    other = 1 - owner
    at_limit = os.urandom(LIMIT)
    consumer = Consumer(
        await websockets.connect(
            consumer_url(cluster.ws(other), topic, "s", "subscriptionInitialPosition=Earliest"),
            max_size=None,
            open_timeout=15,
        )
    )
    producer = await Producer.connect(cluster.ws(owner), topic)
    try:
        ok = await producer.send(at_limit, timeout=30)
        assert ok["result"] == "ok", {k: v for k, v in ok.items() if k != "payload"}
        got = await consumer.receive(30)
        assert unb64(got["payload"]) == at_limit and got["messageId"] == ok["messageId"]
        await consumer.ack(got["messageId"])
        pids = [g.pid for g in cluster.gateways]
        baseline = [rss_kb(pid) for pid in pids]
        over = b64(at_limit + b"x")
        for i in range(5):
            reply = await reply_to(
                producer.ws, orjson.dumps({"payload": over, "context": f"o{i}"}).decode(), 30
            )
            assert reply["result"].startswith("send-error:"), reply
            assert reply["context"] == f"o{i}" and str(LIMIT) in reply["errorMsg"], reply
        # 10x the limit over the relay and straight to the owner: above the WebSocket max size -> 1009
        huge = orjson.dumps({"payload": b64(os.urandom(3 * LIMIT))}).decode()
        assert len(huge) > WS_MAX_SIZE
        for gateway in (owner, other):
            for _ in range(2):
                ws = await websockets.connect(
                    f"{cluster.ws(gateway)}/ws/v2/producer/{TOPIC_PATH}/{topic}",
                    max_size=None,
                    open_timeout=10,
                )
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.send(huge)
                    await asyncio.wait_for(ws.recv(), 15)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009, closed.value
        growth = [rss_kb(pid) - base for pid, base in zip(pids, baseline, strict=True)]
        print(f"B4 limit={LIMIT} rss_growth_kb={growth} baseline_kb={baseline}")
        assert max(growth) < RSS_GROWTH_MAX_KB, growth
        # the session survived the oversize attempts; nothing oversize was stored
        mid = await still_publishes(producer, "after-oversize")
        after = await consumer.receive(15)
        assert after["messageId"] == mid and unb64(after["payload"]) == b"after-oversize"
    finally:
        await producer.close()
        await consumer.close()


async def test_ws_producer_garbage_sweep_one_reply_per_frame(cluster: MessagingCluster) -> None:
    rng = random.Random(20251122)
    atoms: list[Any] = [None, True, 0, -1, 2**63, 1.5, "", "YQ==", "!", [], {}, "\u202e", "x" * 300]
    fields = [
        "payload",
        "context",
        "key",
        "properties",
        "eventTime",
        "deliverAt",
        "deliverAfterMs",
        "sequenceId",
    ]
    producer = await Producer.connect(cluster.ws(0), "garbage-sweep")
    results: dict[str, int] = {}
    try:
        for i in range(300):
            obj = {rng.choice(fields): rng.choice(atoms) for _ in range(rng.randint(0, 4))}
            obj["context"] = f"g{i}"
            text = orjson.dumps(obj).decode()
            if rng.random() < 0.3:
                cut = rng.randint(0, len(text))
                text = text[:cut] + rng.choice(["", "}", "\x00", "]]", '"', "\\"]) + text[cut:]
            reply = await reply_to(producer.ws, text)
            results[reply["result"]] = results.get(reply["result"], 0) + 1
            assert reply["result"] == "ok" or reply["result"] in (
                "send-error:3",
                "send-error:7",
                "send-error:8",
            )
        await still_publishes(producer)
    finally:
        await producer.close()
    print(f"B1-B3 ws cases=300 results={results}")
    assert results.get("send-error:3", 0) > 0 and results.get("send-error:7", 0) > 0


# ------------------------------------------------------------------ WS handshake parameters


@pytest.mark.parametrize(
    "query",
    [
        "subscriptionType=Foo",
        "subscriptionType=key_shared",
        "subscriptionType=KeyShared",
        "subscriptionType=exclusive",
        "subscriptionType=",
        "subscriptionType=Exclusive%20",
        "subscriptionType=Shared%00",
        "receiverQueueSize=abc",
        "receiverQueueSize=-5",
        "receiverQueueSize=10000000",
        "receiverQueueSize=2147483648",
        "receiverQueueSize=99999999999999999999",
        "receiverQueueSize=1e3",
        "receiverQueueSize=",
        "subscriptionInitialPosition=Oldest",
        "ackTimeoutMillis=-1",
        "pullMode=maybe",
    ],
)
async def test_ws_consumer_bad_query_params_are_400(cluster: MessagingCluster, query: str) -> None:
    for gateway in (0, 1):
        url = consumer_url(cluster.ws(gateway), "bad-params", "s", query)
        try:
            ws = await websockets.connect(url, open_timeout=15)
        except InvalidStatus as exc:
            assert exc.response.status_code == 400, (query, exc.response.status_code)
            reason = orjson.loads(exc.response.body or b"{}").get("reason", "")
            assert reason.startswith("Invalid query params: "), reason
            continue
        await ws.close()
        raise AssertionError(f"{query} was accepted through gateway {gateway}")


# ------------------------------------------------------------------ acks with garbage ids


async def connect_consumer(base: str, topic: str, sub: str, query: str) -> Consumer:
    """Connect, retrying while the previous Exclusive consumer is still registered (409)."""
    for _ in range(100):
        try:
            return await Consumer.connect(base, topic, sub, query)
        except InvalidStatus as exc:
            if exc.response.status_code != 409:
                raise
            await asyncio.sleep(0.1)
    raise AssertionError("the subscription stayed busy")


async def test_garbage_acks_move_no_cursor(cluster: MessagingCluster) -> None:
    topic, query = "garbage-acks", "subscriptionType=Exclusive&subscriptionInitialPosition=Earliest"
    ids = await publish_each(cluster.ws(0), topic, [f"m{i}" for i in range(5)])
    foreign = await publish_each(cluster.ws(1), "garbage-acks-other", ["x", "y"])
    mine = MessageId.from_base64(ids[0])
    acks: list[Any] = [
        "1:2:3",
        f"{mine.ledger_id}:{mine.entry_id}:7",  # this ledger, another partition
        f"{mine.ledger_id}:{mine.entry_id + 1000}:-1",  # past the end of the log
        MessageId(987654321, 0, -1, -1, 0).to_base64(),  # a ledger nobody has
        MessageId(mine.ledger_id, mine.entry_id, 3, -1, 0).to_base64(),
        *foreign,  # real ids of another topic
    ]
    consumer = await connect_consumer(cluster.ws(1), topic, "s", query)
    got = await consumer.receive_n(5, ack=False)
    assert [m["messageId"] for m in got] == ids
    for message_id in acks:
        await consumer.ack(message_id)
    await consumer.send({"type": "negativeAcknowledge", "messageId": "1:2:3"})
    await consumer.send({"messageIds": ["1:2:3", foreign[0]], "type": "ack"})
    assert await consumer.nothing_for(0.3)
    await consumer.close()

    # random base64 and other undecodable ids: the session may be closed (4003), nothing moves
    rng = random.Random(3)
    for garbage in [
        base64.b64encode(bytes(rng.randrange(256) for _ in range(12))).decode(),
        b64(b"\xff\xff\xff\xff"),
        "not-an-id",
        "CAMQADAA" * 50,
        12345,
        None,
        ["CAMQADAA"],
    ]:
        again = await connect_consumer(cluster.ws(0), topic, "s", query)
        redelivered = await again.receive_n(5, ack=False)
        assert [m["messageId"] for m in redelivered] == ids, f"cursor moved after acking {garbage!r}"
        await again.send({"messageId": garbage})
        await asyncio.sleep(0.1)
        await again.close()

    # garbage JSON closes the session with 4003
    again = await connect_consumer(cluster.ws(1), topic, "s", query)
    await again.receive_n(5, ack=False)
    for frame in ("{oops", "[1, 2]", "[" * 100_000):
        with pytest.raises(ConnectionClosed) as closed:
            await again.ws.send(frame)
            while True:
                await asyncio.wait_for(again.ws.recv(), 10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4003, closed.value
        again = await connect_consumer(cluster.ws(0), topic, "s", query)
        assert [m["messageId"] for m in await again.receive_n(5, ack=False)] == ids

    # CONTROL: a real ack does move the cursor, so the check above can see movement
    await again.ack(ids[0])
    await asyncio.sleep(0.3)
    await again.close()
    last = await connect_consumer(cluster.ws(1), topic, "s", query)
    rest = await last.receive_n(4, ack=False)
    assert [m["messageId"] for m in rest] == ids[1:]
    assert await last.nothing_for(0.3)
    await last.close()


async def test_an_id_acked_twice_in_one_frame_counts_once(cluster: MessagingCluster) -> None:
    """A batched ack naming an id twice acks it once; the session goes on (it is not a defect)."""
    topic, query = "double-ack", "subscriptionType=Exclusive&subscriptionInitialPosition=Earliest"
    ids = await publish_each(cluster.ws(0), topic, ["a", "b", "c"])
    consumer = await connect_consumer(cluster.ws(0), topic, "s", query)
    assert [m["messageId"] for m in await consumer.receive_n(3, ack=False)] == ids
    await consumer.send({"type": "ack", "messageIds": [ids[0], ids[0], ids[1]]})
    await consumer.ack(ids[2])
    assert await consumer.nothing_for(0.3)  # still open: a closed session raises here
    await consumer.close()
    again = await connect_consumer(cluster.ws(1), topic, "s", query)
    assert await again.nothing_for(0.5)  # all three acked
    await again.close()


# ------------------------------------------------------------------ bad neighbours


async def test_bad_neighbour_requests_do_not_disturb_accepted_data(
    cluster: MessagingCluster, http: httpx.AsyncClient
) -> None:
    topic = "bad-neighbour"
    owner = await owner_index(cluster, topic)
    subscribe = await Consumer.connect(
        cluster.ws(owner), topic, "keep", "subscriptionInitialPosition=Earliest"
    )
    await subscribe.close()
    good = [f"good-{i}-{secrets.token_hex(4)}" for i in range(10)]
    ids = await publish_each(cluster.ws(owner), topic, good[:5])
    rest_url = f"{cluster.urls[1 - owner]}/topics/{TOPIC_PATH}/{topic}"
    # bad neighbours on the same topic: REST, producer frames, consumer frames, handshakes
    for body in BAD_JSON_BODIES[:12]:
        response = await http.post(rest_url, content=body, headers={"content-type": "application/json"})
        assert response.status_code == 400
    half_bad = {"messages": [{"payload": "would-be-stored"}, {"payload": 5}]}  # all or nothing
    assert (await http.post(rest_url, json=half_bad)).status_code == 400
    too_big = await http.post(rest_url, content=b"z" * (LIMIT + 1), headers={"content-type": "text/plain"})
    assert too_big.status_code == 413
    producer = await Producer.connect(cluster.ws(1 - owner), topic)
    for frame in ('{"payload": "!!"}', "{x", '{"payload": "' + b64(b"q" * (LIMIT + 1)) + '"}'):
        reply = await reply_to(producer.ws, frame)
        assert reply["result"].startswith("send-error:")
    ids += [(await producer.send(p))["messageId"] for p in good[5:]]
    await producer.close()
    assert await handshake_status(consumer_url(cluster.ws(0), topic, "keep", "subscriptionType=Nope")) == 400
    noisy = await Consumer.connect(cluster.ws(0), topic, "noisy", "subscriptionInitialPosition=Earliest")
    with pytest.raises(ConnectionClosed) as closed:
        await noisy.ws.send("{garbage")
        while True:  # message frames may come first
            await asyncio.wait_for(noisy.ws.recv(), 10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4003
    # the accepted data is intact, in order, and nothing else was stored
    keep = await connect_consumer(cluster.ws(1), topic, "keep", "subscriptionInitialPosition=Earliest")
    got = await keep.receive_n(10)
    assert [unb64(m["payload"]).decode() for m in got] == good
    assert [m["messageId"] for m in got] == ids
    assert await keep.nothing_for(0.5)
    await keep.close()


# ------------------------------------------------------------------ afterwards


async def test_gateways_survived_every_bad_input(cluster: MessagingCluster, http: httpx.AsyncClient) -> None:
    await assert_gateways_survived(cluster, http)
