"""Real WebSocket frames of a live cluster validate against openapi/asyncapi.json.

One cluster for the module (etcd, 3 storage nodes, 2 gateways). Frames are
captured over real sockets, through the topic's owner and through the other
gateway (relayed), and validated with ``jsonschema`` against the committed
AsyncAPI document: producer replies (single, batch, errors), consumer
deliveries (single and batched), notices (active, ranges, error), end-of-topic
replies and reader frames. Frames the gateway refuses (a publish without a
payload, a permit without a count) are refused by the schemas too.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio
import websockets
from clusters import MessagingCluster
from jsonschema import Draft7Validator
from websockets.asyncio.client import ClientConnection
from wsclient import TOPIC_PATH, b64, consumer_url, module_cluster, reader_url

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

DOCUMENT = orjson.loads((Path(__file__).resolve().parents[2] / "openapi" / "asyncapi.json").read_bytes())
_topics = itertools.count()


def validator(name: str) -> Draft7Validator:
    return Draft7Validator({"$ref": f"#/components/schemas/{name}", "components": DOCUMENT["components"]})


def assert_valid(name: str, frame: Any) -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator(name).iter_errors(frame)]
    assert not errors, (name, frame, errors)


def topic() -> str:
    return f"asyncapi-{next(_topics)}"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MessagingCluster]:
    async with module_cluster(etcd_endpoint, tmp_path_factory.mktemp("asyncapi")) as made:
        yield made


async def recv(ws: ClientConnection, timeout: float = 15.0) -> dict[str, Any]:
    frame: dict[str, Any] = orjson.loads(await asyncio.wait_for(ws.recv(), timeout))
    return frame


async def publish_all(base: str, name: str, count: int, **fields: Any) -> list[dict[str, Any]]:
    async with websockets.connect(f"{base}/ws/v2/producer/{TOPIC_PATH}/{name}", open_timeout=15) as ws:
        replies = []
        for i in range(count):
            await ws.send(orjson.dumps({"payload": b64(f"m{i}"), "context": str(i), **fields}).decode())
            replies.append(await recv(ws))
    return replies


async def test_producer_replies_validate(cluster: MessagingCluster) -> None:
    name = topic()
    for base in (cluster.ws(0), cluster.ws(1)):  # owner or relay, whichever each gateway is
        async with websockets.connect(f"{base}/ws/v2/producer/{TOPIC_PATH}/{name}", open_timeout=15) as ws:
            sent = [
                {"payload": b64("hello"), "context": "a", "key": "k", "properties": {"p": "v"}},
                {"payload": b64(b"\x00\xff"), "eventTime": "2024-01-02T03:04:05.6+01:00", "sequenceId": 9},
                {"type": "batch", "context": "b", "messages": [{"payload": b64("x")}, {"payload": b64("y")}]},
            ]
            for frame in sent:
                assert_valid("PublishBatch" if frame.get("type") == "batch" else "PublishRequest", frame)
                await ws.send(orjson.dumps(frame).decode())
            replies = [await recv(ws) for _ in sent]
            by_context = {r.get("context"): r for r in replies}
            assert by_context["a"]["result"] == "ok" and by_context["b"]["type"] == "batch"
            assert len(by_context["b"]["results"]) == 2
            for reply in replies:
                assert_valid("PublishBatchReply" if reply.get("type") == "batch" else "PublishReply", reply)

            refused = [
                {"context": "no-payload"},
                {"payload": "abc=d", "context": "bad-b64"},
                {"payload": b64("x"), "context": "bad-time", "eventTime": 1700000000000},
                {
                    "type": "batch",
                    "context": "bad-batch",
                    "messages": [{"payload": b64("x")}, {"payload": 5}],
                },
            ]
            for frame in refused:
                schema = "PublishBatch" if frame.get("type") == "batch" else "PublishRequest"
                assert not validator(schema).is_valid(frame), frame
                await ws.send(orjson.dumps(frame).decode())
                reply = await recv(ws)
                assert reply["result"].startswith("send-error:") and reply["context"] == frame["context"]
                assert_valid("PublishReply", reply)
            await ws.send("{not json")
            reply = await recv(ws)
            assert reply["result"] == "send-error:3" and "context" not in reply
            assert_valid("PublishReply", reply)


async def test_consumer_deliveries_and_replies_validate(cluster: MessagingCluster) -> None:
    name = topic()
    query = "subscriptionInitialPosition=Earliest&subscriptionType=Shared"
    await publish_all(cluster.ws(0), name, 3, key="user-1", properties={"a": "b"})
    async with websockets.connect(consumer_url(cluster.ws(1), name, "single", query), open_timeout=15) as ws:
        messages = [await recv(ws) for _ in range(3)]
        for message in messages:
            assert_valid("ConsumerMessage", message)
            assert message["key"] == "user-1" and message["properties"] == {"a": "b"}
        commands: list[dict[str, Any]] = [
            {"messageId": messages[0]["messageId"]},
            {"type": "ack", "messageIds": [messages[1]["messageId"]]},
            {"type": "negativeAcknowledge", "messageId": messages[2]["messageId"]},
            {"type": "ackCumulative", "messageId": messages[2]["messageId"]},  # Shared: refused
            {"type": "isEndOfTopic"},
        ]
        for command in commands:
            assert_valid("ConsumerCommand", command)
            await ws.send(orjson.dumps(command).decode())
        replies = [await recv(ws) for _ in range(2)]
        kinds = {("error" if r.get("type") == "error" else "eot"): r for r in replies}
        assert_valid("ErrorNotice", kinds["error"])
        assert_valid("EndOfTopicReply", kinds["eot"])
        assert kinds["eot"] == {"endOfTopic": False}

    batched = f"{query}&batchDelivery=true"
    async with websockets.connect(
        consumer_url(cluster.ws(0), name, "batched", batched), open_timeout=15
    ) as ws:
        got: list[dict[str, Any]] = []
        while len(got) < 3:
            frame = await recv(ws)
            assert_valid("MessagesBatch", frame)
            got.extend(frame["messages"])
        assert [m["payload"] for m in got] == [b64(f"m{i}") for i in range(3)]


async def test_notices_validate(cluster: MessagingCluster) -> None:
    name = topic()
    await publish_all(cluster.ws(0), name, 1)
    url = consumer_url(cluster.ws(1), name, "fo", "subscriptionType=Failover&consumerName=c1&notices=true")
    async with websockets.connect(url, open_timeout=15) as ws:
        notice = await recv(ws)
        assert notice == {"type": "active", "active": True}
        assert_valid("ActiveNotice", notice)
    url = consumer_url(cluster.ws(0), name, "ks", "subscriptionType=Key_Shared&consumerName=k1&notices=true")
    async with websockets.connect(url, open_timeout=15) as ws:
        notice = await recv(ws)
        assert notice["type"] == "ranges" and notice["ranges"]
        assert_valid("RangesNotice", notice)


async def test_reader_frames_validate(cluster: MessagingCluster) -> None:
    name = topic()
    await publish_all(cluster.ws(1), name, 2, eventTime="2024-05-06T07:08:09Z")
    for base, query in (
        (cluster.ws(0), "messageId=earliest"),
        (cluster.ws(1), "messageId=earliest&batchDelivery=true"),
    ):
        async with websockets.connect(reader_url(base, name, query), open_timeout=15) as ws:
            got: list[dict[str, Any]] = []
            while len(got) < 2:
                frame = await recv(ws)
                if frame.get("type") == "messages":
                    assert_valid("MessagesBatch", frame)
                    got.extend(frame["messages"])
                else:
                    assert_valid("ConsumerMessage", frame)
                    got.append(frame)
            assert got[0]["eventTime"] == "2024-05-06T07:08:09Z"
            await ws.send(orjson.dumps({"messageId": got[0]["messageId"]}).decode())
            await ws.send(orjson.dumps({"type": "isEndOfTopic"}).decode())
            reply = await recv(ws)
            assert_valid("EndOfTopicReply", reply)


async def test_refused_commands_are_refused_by_the_schema(cluster: MessagingCluster) -> None:
    name = topic()
    for frame, base in (({"type": "permit"}, cluster.ws(0)), ({"type": "seek"}, cluster.ws(1))):
        assert not validator("ConsumerCommand").is_valid(frame)
        async with websockets.connect(consumer_url(base, name, "bad"), open_timeout=15) as ws:
            await ws.send(orjson.dumps(frame).decode())
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 15)
            assert ws.close_code == 4003, (frame, ws.close_code, ws.close_reason)
