"""Server-sent events consume with real processes (etcd, 3 storage nodes, 2 gateways).

A stream opened on either gateway (the non-owner answers 307 to the owner)
names its consumer first, then carries each message as an ``event: message``
whose ``id`` is the message id and whose data is the WebSocket consumer's JSON
object. Acks through the ack endpoint (via the other gateway) hold; what the
stream left unacked when its client went is redelivered to the next stream,
never what was acked. ``maxMessages`` and ``durationMs`` end a stream; bad
query values are 400 before any stream starts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio
from clusters import MessagingCluster
from wsclient import module_cluster, unb64

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

BASE = "/consume/persistent/public/default"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MessagingCluster]:
    async with module_cluster(etcd_endpoint, tmp_path_factory.mktemp("sse")) as made:
        yield made


async def read_events(response: httpx.Response, messages: int) -> AsyncIterator[dict[str, Any]]:
    """The stream's events as dicts (``event``, ``id``, ``data`` parsed), comments skipped,
    until ``messages`` message events came or the stream ended."""
    event: dict[str, Any] = {}
    seen = 0
    async for line in response.aiter_lines():
        if not line:
            if event:
                yield event
                seen += event.get("event") == "message"
                if seen >= messages:
                    return
            event = {}
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(": ")
            event[field] = orjson.loads(value) if field == "data" else value


async def publish(http: httpx.AsyncClient, url: str, topic: str, texts: list[str]) -> None:
    body = {"messages": [{"payload": t} for t in texts]}  # REST payloads are text (Pulsar)
    response = await http.post(f"{url}/topics/persistent/public/default/{topic}", json=body)
    assert response.status_code == 200, response.text


async def test_stream_acks_and_redelivery_across_gateways(cluster: MessagingCluster) -> None:
    topic = "sse-roundtrip"
    sent = [f"e{i}" for i in range(10)]
    params = {"subscriptionInitialPosition": "Earliest", "consumerName": "s1"}
    async with httpx.AsyncClient(timeout=20, follow_redirects=True) as http:
        await publish(http, cluster.urls[0], topic, sent)
        statuses = []
        for url in cluster.urls:  # the owner streams, the other answers 307 to it
            probe = f"{url}{BASE}/{topic}/probe/stream"
            direct = await http.get(probe, params={"durationMs": "1"}, follow_redirects=False)
            statuses.append(direct.status_code)
            if direct.status_code == 307:
                assert direct.headers["location"].endswith(f"{BASE}/{topic}/probe/stream?durationMs=1")
            followed = await http.get(probe, params={"durationMs": "1"})
            assert followed.status_code == 200, followed.text
            assert followed.headers["content-type"].startswith("text/event-stream")
        assert sorted(statuses) == [200, 307]

        async with http.stream("GET", f"{cluster.urls[1]}{BASE}/{topic}/sub/stream", params=params) as stream:
            assert stream.status_code == 200
            events = [e async for e in read_events(stream, 6)]
        named, messages = events[0], events[1:]
        assert named == {"event": "consumer", "data": {"consumerName": "s1", "subscription": "sub"}}
        assert [unb64(m["data"]["payload"]).decode() for m in messages] == sent[:6]
        for m in messages:
            assert m["event"] == "message" and m["id"] == m["data"]["messageId"]
            assert {"publishTime", "properties", "redeliveryCount"} <= set(m["data"])
        acked = [m["id"] for m in messages[:3]]
        ack = await http.post(
            f"{cluster.urls[0]}{BASE}/{topic}/sub/ack",
            params={"consumerName": "s1"},
            json={"messageIds": acked},
        )
        assert ack.status_code == 200 and ack.json() == {"acked": 3, "unmatched": []}, ack.text
        # the client left: the stream's consumer is gone, its 3 unacked messages come back

        params2 = {**params, "consumerName": "s2", "maxMessages": "7"}
        got: list[str] = []
        deadline = time.monotonic() + 15
        async with http.stream(
            "GET", f"{cluster.urls[0]}{BASE}/{topic}/sub/stream", params=params2
        ) as stream:
            async for event in read_events(stream, 7):
                if event["event"] == "message":
                    got.append(unb64(event["data"]["payload"]).decode())
                assert time.monotonic() < deadline
        assert sorted(got) == sorted(sent[3:])  # the 3 unacked again + the 4 never sent; no acked one


async def test_a_stream_has_its_consumer_to_itself(cluster: MessagingCluster) -> None:
    topic = "sse-busy"
    async with httpx.AsyncClient(timeout=20, follow_redirects=True) as http:
        url = f"{cluster.urls[0]}{BASE}/{topic}/sub"
        async with http.stream("GET", f"{url}/stream", params={"consumerName": "one"}) as first:
            lines = first.aiter_lines()  # kept open: closing it would end the stream
            assert await anext(lines) == "event: consumer"
            second = await http.get(f"{url}/stream", params={"consumerName": "one", "durationMs": "1"})
            assert second.status_code == 409 and "in use" in second.json()["reason"], second.text
            fetch = await http.get(url, params={"consumerName": "one", "waitMs": "0"})
            assert fetch.status_code == 409, fetch.text
            other = await http.get(f"{url}/stream", params={"consumerName": "two", "durationMs": "1"})
            assert other.status_code == 200
        # the first stream is gone: its name is free again once the gateway has seen it close
        # (its next write or keep-alive finds the connection gone)
        deadline = asyncio.get_running_loop().time() + 15
        while True:
            again = await http.get(f"{url}/stream", params={"consumerName": "one", "durationMs": "1"})
            if again.status_code != 409 or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.2)
        assert again.status_code == 200, again.text


async def test_max_messages_and_duration_end_a_stream(cluster: MessagingCluster) -> None:
    topic = "sse-bounds"
    async with httpx.AsyncClient(timeout=20, follow_redirects=True) as http:
        await publish(http, cluster.urls[0], topic, [f"b{i}" for i in range(5)])
        url = f"{cluster.urls[0]}{BASE}/{topic}/bounded/stream"
        earliest = {"subscriptionInitialPosition": "Earliest"}
        full = await http.get(url, params={**earliest, "maxMessages": "2"})  # ends by itself
        assert full.status_code == 200 and full.text.count("event: message") == 2
        assert full.text.startswith("event: consumer\ndata: ")
        started = time.monotonic()
        quiet = await http.get(f"{cluster.urls[0]}{BASE}/{topic}/other/stream", params={"durationMs": "300"})
        assert quiet.status_code == 200 and "event: message" not in quiet.text  # Latest: nothing new
        assert 0.25 <= time.monotonic() - started < 10


@pytest.mark.parametrize(
    "query", ["maxMessages=-1", "durationMs=x", "subscriptionType=Foo", "subscriptionInitialPosition=Middle"]
)
async def test_bad_query_values_are_400(cluster: MessagingCluster, query: str) -> None:
    async with httpx.AsyncClient(timeout=20, follow_redirects=True) as http:
        response = await http.get(f"{cluster.urls[0]}{BASE}/sse-bad/sub/stream?{query}")
        assert response.status_code == 400, response.text
        assert "reason" in response.json()


async def test_partitioned_base_name_is_refused_not_created(cluster: MessagingCluster) -> None:
    """HTTP consume needs one partition's log: on the base name of a partitioned topic a
    fetch and a stream answer 409 naming the partitions, and no non-partitioned topic of
    that name appears beside the partitioned one (it used to be auto-created, empty, and
    the fetch returned nothing while the messages sat in the partitions). Control: the
    same fetch on a partition gets its messages."""
    topic = "sse-parted"
    admin = f"{cluster.urls[0]}/admin/v2/persistent/public/default"
    async with httpx.AsyncClient(timeout=20, follow_redirects=True) as http:
        made = await http.put(f"{admin}/{topic}/partitions", json=2)
        assert made.status_code == 204, made.text
        await publish(http, cluster.urls[0], topic, [f"p{i}" for i in range(6)])
        for url in cluster.urls:
            for suffix, query in (("", {"waitMs": "100"}), ("/stream", {"durationMs": "100"})):
                got = await http.get(f"{url}{BASE}/{topic}/s{suffix}", params=query)
                assert got.status_code == 409, got.text
                reason = got.json()["reason"]
                assert "is partitioned (2 partitions)" in reason and f"{topic}-partition-1" in reason
        internal = await http.get(f"{admin}/{topic}/internalStats")
        assert internal.status_code != 200  # no log was made for the base name
        parts = await http.get(f"{admin}/{topic}/partitions")
        assert parts.json() == {"partitions": 2}
        got = []
        for index in range(2):
            fetched = await http.get(
                f"{cluster.urls[1]}{BASE}/{topic}-partition-{index}/s",
                params={"subscriptionInitialPosition": "Earliest", "waitMs": "2000", "max": "10"},
            )
            assert fetched.status_code == 200, fetched.text
            got += [unb64(m["payload"]).decode() for m in fetched.json()["messages"]]
        assert sorted(got) == [f"p{i}" for i in range(6)]
        for verb in ("ack", "nack"):  # nothing to settle on the base name either
            body = {"messageIds": ["CAAQADAA"]}
            settled = await http.post(f"{cluster.urls[0]}{BASE}/{topic}/s/{verb}", json=body)
            assert settled.status_code == 409, settled.text


async def test_a_quiet_stream_sends_a_keep_alive_comment_every_15_s(cluster: MessagingCluster) -> None:
    """Proxies close idle connections (docs/compatibility.md §7): a stream with nothing to say
    writes a comment line after 15 s of silence, and only then (16 s in all)."""
    url = f"{cluster.urls[0]}{BASE}/sse-quiet/idle/stream"
    async with (
        httpx.AsyncClient(timeout=30, follow_redirects=True) as http,
        http.stream("GET", url, params={"durationMs": "16000"}) as response,
    ):
        assert response.status_code == 200
        started = time.monotonic()
        comments: list[float] = []
        async for line in response.aiter_lines():
            if line.startswith(": keep-alive"):
                comments.append(time.monotonic() - started)
    assert comments, "no keep-alive comment"
    assert 14.0 <= comments[0] <= 15.9, comments  # the first one: after 15 s of silence
