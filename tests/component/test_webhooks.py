"""Push subscriptions (webhooks) with real processes (etcd, 3 storage nodes, 2 gateways)
and a real HTTP endpoint in the test process.

The owner of a topic POSTs its subscription's messages to the endpoint; a 2xx answer
acks them, anything else is retried with the same messages in the same order; past
``maxAttempts`` they go to the dead-letter topic. The webhook lives in etcd, so pushing
moves with the topic: after an unload and after the owner is killed (-9) every
published message still reaches the endpoint. Controls: an endpoint that never answers
2xx gets every message again and again and acks none (the backlog stays); a deleted
subscription is not brought back by its webhook.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio
import uvicorn
from clusters import MessagingCluster
from failover_clients import owner_of
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from wsclient import module_cluster, unb64

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

ADMIN = "/admin/v2/persistent/public/default"
WEBHOOKS_MAX = 8
CONNECTIONS = 2  # each gateway's pushers share this many connections


async def forever() -> AsyncIterator[bytes]:
    chunk = b"x" * 65536
    while True:
        yield chunk
        await asyncio.sleep(0)


def text(message: dict[str, Any]) -> str:
    return unb64(message["payload"]).decode()


class Endpoint:
    """An HTTP server that records what each path is sent and answers as told."""

    def __init__(self) -> None:
        self.received: dict[str, list[dict[str, Any]]] = defaultdict(list)  # path -> POST bodies
        self.headers: dict[str, list[dict[str, str]]] = defaultdict(list)
        self.answer: dict[str, Callable[[dict[str, Any]], int]] = {}
        self.endless: set[str] = set()  # paths answered with a body that never ends
        self.delay: dict[str, float] = {}  # path -> seconds before it answers
        self.active: dict[str, int] = defaultdict(int)  # path -> requests under way
        self.peak: dict[str, int] = defaultdict(int)
        self.url = ""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        body = orjson.loads(await request.body())
        path = request.url.path
        if path in self.delay:
            self.active[path] += 1
            self.peak[path] = max(self.peak[path], self.active[path])
            await asyncio.sleep(self.delay[path])
            self.active[path] -= 1
        self.received[path].append(body)
        self.headers[path].append(dict(request.headers))
        status = self.answer.get(path, lambda _b: 200)(body)
        if path in self.endless:
            await StreamingResponse(forever(), status_code=status)(scope, receive, send)
            return
        headers = {"location": f"{self.url}/ok"} if 300 <= status < 400 else None
        await Response(b"ok" if status < 300 else b"no", status_code=status, headers=headers)(
            scope, receive, send
        )

    def payloads(self, path: str) -> list[str]:
        return [text(m) for body in self.received[path] for m in body["messages"]]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def endpoint() -> AsyncIterator[Endpoint]:
    app = Endpoint()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    task = asyncio.get_running_loop().create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    app.url = f"http://127.0.0.1:{port}"
    yield app
    server.should_exit = True
    with contextlib.suppress(Exception):
        await asyncio.wait_for(task, 10)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MessagingCluster]:
    async with module_cluster(etcd_endpoint, tmp_path_factory.mktemp("webhooks"), gateways=0) as made:
        for _ in range(2):
            await made.add_gateway(
                "--webhook-hosts",
                "127.0.0.1",
                "--webhooks-max",
                str(WEBHOOKS_MAX),
                "--webhook-connections",
                str(CONNECTIONS),
            )
        yield made


async def publish(http: httpx.AsyncClient, url: str, topic: str, texts: list[str]) -> None:
    response = await http.post(
        f"{url}/topics/persistent/public/default/{topic}", json={"messages": [{"payload": t} for t in texts]}
    )
    assert response.status_code == 200, response.text


async def eventually(check: Callable[[], Awaitable[bool] | bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


async def backlog(http: httpx.AsyncClient, url: str, topic: str, sub: str) -> int:
    stats = (await http.get(f"{url}{ADMIN}/{topic}/stats")).json()
    return int(stats["subscriptions"][sub]["msgBacklog"])


def counter(metrics: str, name: str) -> float:
    line = next(line for line in metrics.splitlines() if line.startswith(name + " "))
    return float(line.split()[1])


def hook(topic: str, sub: str) -> str:
    return f"{ADMIN}/{topic}/subscription/{sub}/webhook"


async def test_pushes_every_message_in_order_and_acks(cluster: MessagingCluster, endpoint: Endpoint) -> None:
    topic, path = "wh-order", "/order"
    sent = [f"m{i}" for i in range(50)]
    async with httpx.AsyncClient(timeout=20) as http:
        await publish(http, cluster.urls[0], topic, sent[:20])  # before: Earliest takes them too
        settings = {
            "url": endpoint.url + path,
            "subscriptionType": "Exclusive",
            "initialPosition": "Earliest",
            "maxMessages": 7,
            "headers": {"Authorization": "Bearer s3cret"},
        }
        for url in cluster.urls:  # owner and non-owner alike (forwarded)
            response = await http.put(f"{url}{hook(topic, 'sub')}", json=settings)
            assert response.status_code == 204, response.text
        await publish(http, cluster.urls[1], topic, sent[20:])
        await eventually(lambda: len(endpoint.payloads(path)) >= 50)
        assert endpoint.payloads(path) == sent  # in order, each once (no failures here)
        assert max(len(body["messages"]) for body in endpoint.received[path]) <= 7
        first = endpoint.received[path][0]
        assert first["topic"] == f"persistent://public/default/{topic}" and first["subscription"] == "sub"
        assert endpoint.headers[path][0]["authorization"] == "Bearer s3cret"
        assert endpoint.headers[path][0]["x-folio-attempt"] == "1"

        async def drained() -> bool:
            return await backlog(http, cluster.urls[0], topic, "sub") == 0

        await eventually(drained)
        view = (await http.get(f"{cluster.urls[1]}{hook(topic, 'sub')}")).json()
        assert view["acked"] == 50 and view["state"] == "pushing" and view["failures"] == 0
        assert view["headers"] == {"Authorization": "***"}  # never shown back
        listed = (await http.get(f"{cluster.urls[0]}{ADMIN}/{topic}/webhooks")).json()
        assert list(listed) == ["sub"] and listed["sub"]["acked"] == 50
        assert (await http.get(f"{cluster.urls[0]}{ADMIN}/wh-none/webhooks")).status_code == 404
        assert isinstance(view["gateway"], str) and view["gateway"]


async def test_failed_posts_are_retried_in_order_with_backoff(
    cluster: MessagingCluster, endpoint: Endpoint
) -> None:
    topic, path = "wh-retry", "/retry"
    calls = {"n": 0}

    def flaky(_body: dict[str, Any]) -> int:
        calls["n"] += 1
        return 503 if calls["n"] <= 3 else 200

    endpoint.answer[path] = flaky
    sent = [f"r{i}" for i in range(10)]
    async with httpx.AsyncClient(timeout=20) as http:
        settings = {"url": endpoint.url + path, "initialPosition": "Earliest", "maxMessages": 4}
        settings |= {"minBackoffMs": 50, "maxBackoffMs": 200}
        await publish(http, cluster.urls[0], topic, sent)
        assert (await http.put(f"{cluster.urls[0]}{hook(topic, 's')}", json=settings)).status_code == 204
        await eventually(lambda: calls["n"] >= 6)
        bodies = endpoint.received[path]
        # the first batch was sent 4 times (3 failures), the same messages each time
        assert [text(m) for m in bodies[0]["messages"]] == sent[:4]
        assert all(b["messages"] == bodies[0]["messages"] for b in bodies[:4])
        assert [h["x-folio-attempt"] for h in endpoint.headers[path][:4]] == ["1", "2", "3", "4"]
        await eventually(lambda: sent[-1] in endpoint.payloads(path))
        delivered = [text(m) for body in bodies[3:] for m in body["messages"]]
        assert delivered == sent  # after the retries: everything once more, in order
        view = (await http.get(f"{cluster.urls[1]}{hook(topic, 's')}")).json()
        assert view["failures"] == 3 and view["lastError"] == "HTTP 503"


async def test_posts_beyond_the_connection_bound_wait_their_turn(
    cluster: MessagingCluster, endpoint: Endpoint
) -> None:
    """maxInFlight 6 against a gateway bound of 2 connections: the endpoint never sees
    more than 2 POSTs at once (and does see 2; with the bound at 64 it sees 6), and a
    POST that waited for a connection longer than its timeoutMs is not a failure - the
    wait is not the endpoint's (httpx does not time the pool wait here; the pusher says
    so explicitly with pool=None, and this pins it)."""
    topic, path = "wh-bound", "/slow"
    endpoint.delay[path] = 0.4
    sent = [f"c{i}" for i in range(12)]
    async with httpx.AsyncClient(timeout=20) as http:
        await publish(http, cluster.urls[0], topic, sent)
        settings = {"url": endpoint.url + path, "initialPosition": "Earliest", "maxMessages": 1}
        settings |= {"subscriptionType": "Shared", "maxInFlight": 6, "timeoutMs": 500}
        assert (await http.put(f"{cluster.urls[0]}{hook(topic, 's')}", json=settings)).status_code == 204
        # 12 POSTs, 2 at a time, 0.4 s each: the last ones wait ~2 s for a connection
        await eventually(lambda: sorted(endpoint.payloads(path)) == sorted(sent))
        assert endpoint.peak[path] == CONNECTIONS

        async def drained() -> bool:
            return await backlog(http, cluster.urls[0], topic, "s") == 0

        await eventually(drained)
        view = (await http.get(f"{cluster.urls[0]}{hook(topic, 's')}")).json()
        assert view["failures"] == 0 and view["acked"] == 12, view
        assert len(endpoint.received[path]) == 12  # each POSTed once: no retry
        assert (await http.delete(f"{cluster.urls[0]}{hook(topic, 's')}")).status_code == 204  # shared bound


async def test_endpoint_that_never_acks_gets_retries_and_the_backlog_stays(
    cluster: MessagingCluster, endpoint: Endpoint
) -> None:
    """Control: acks come only from 2xx answers."""
    topic, path = "wh-never", "/never"
    endpoint.answer[path] = lambda _b: 500
    async with httpx.AsyncClient(timeout=20) as http:
        await publish(http, cluster.urls[0], topic, ["x", "y"])
        settings = {"url": endpoint.url + path, "initialPosition": "Earliest", "minBackoffMs": 20}
        settings |= {"maxBackoffMs": 40}
        assert (await http.put(f"{cluster.urls[0]}{hook(topic, 's')}", json=settings)).status_code == 204
        await eventually(lambda: len(endpoint.received[path]) >= 5)
        assert await backlog(http, cluster.urls[0], topic, "s") == 2
        view = (await http.get(f"{cluster.urls[0]}{hook(topic, 's')}")).json()
        assert view["acked"] == 0 and view["state"] == "backing-off" and view["lastError"] == "HTTP 500"
        assert (await http.delete(f"{cluster.urls[1]}{hook(topic, 's')}")).status_code == 204
        assert (await http.get(f"{cluster.urls[1]}{hook(topic, 's')}")).status_code == 404
        stopped_at = len(endpoint.received[path])
        await asyncio.sleep(0.5)
        assert len(endpoint.received[path]) <= stopped_at + 1  # at most one POST was under way
        assert await backlog(http, cluster.urls[0], topic, "s") == 2  # the subscription stays


async def test_poison_message_goes_to_the_dead_letter_topic(
    cluster: MessagingCluster, endpoint: Endpoint
) -> None:
    topic, path = "wh-poison", "/poison"
    endpoint.answer[path] = lambda body: 500 if text(body["messages"][0]) == "bad" else 200
    async with httpx.AsyncClient(timeout=20) as http:
        await publish(http, cluster.urls[0], topic, ["a", "bad", "b"])
        settings = {"url": endpoint.url + path, "initialPosition": "Earliest", "maxMessages": 1}
        settings |= {"maxAttempts": 3, "minBackoffMs": 10, "maxBackoffMs": 20}
        assert (await http.put(f"{cluster.urls[0]}{hook(topic, 's')}", json=settings)).status_code == 204
        await eventually(lambda: "b" in endpoint.payloads(path))
        assert [p for p in endpoint.payloads(path) if p != "bad"] == ["a", "b"]
        assert endpoint.payloads(path).count("bad") == 3
        dlq = f"{topic}-s-DLQ"
        got = await http.get(
            f"{cluster.urls[0]}/consume/persistent/public/default/{dlq}/check",
            params={"subscriptionInitialPosition": "Earliest", "max": "10", "waitMs": "3000"},
            follow_redirects=True,
        )
        assert got.status_code == 200, got.text
        letters = got.json()["messages"]
        assert [text(m) for m in letters] == ["bad"]
        assert letters[0]["properties"]["REAL_TOPIC"] == f"persistent://public/default/{topic}"

        async def drained() -> bool:
            return await backlog(http, cluster.urls[0], topic, "s") == 0

        await eventually(drained)
        view = (await http.get(f"{cluster.urls[0]}{hook(topic, 's')}")).json()
        assert view["deadLettered"] == 1 and view["acked"] == 3
        owner = await owner_of(cluster.urls[0], topic)
        metrics = (await http.get(f"{owner}/metrics")).text
        assert counter(metrics, "folio_gateway_webhook_dead_lettered_total") >= 1
        assert counter(metrics, "folio_gateway_webhook_failures_total") >= 3
        assert counter(metrics, "folio_gateway_webhook_acked_total") >= 3
        assert counter(metrics, "folio_gateway_webhooks") >= 1


async def test_dead_letter_topic_can_be_named(cluster: MessagingCluster, endpoint: Endpoint) -> None:
    topic, path = "wh-named-dlq", "/named-dlq"
    endpoint.answer[path] = lambda body: 500 if text(body["messages"][0]) == "bad" else 200
    async with httpx.AsyncClient(timeout=20) as http:
        url = f"{cluster.urls[1]}{hook(topic, 's')}"
        base = {"url": endpoint.url + path, "initialPosition": "Earliest", "maxMessages": 1}
        base |= {"maxAttempts": 2, "minBackoffMs": 10, "maxBackoffMs": 20}
        itself = await http.put(url, json=base | {"deadLetterTopic": topic})
        assert itself.status_code == 400 and "the topic itself" in itself.json()["reason"]
        made = await http.put(f"{cluster.urls[0]}{ADMIN}/wh-parted-letters/partitions", json=2)
        assert made.status_code == 204, made.text
        parted = await http.put(url, json=base | {"deadLetterTopic": "wh-parted-letters"})
        assert parted.status_code == 400 and "partitioned" in parted.json()["reason"]
        await publish(http, cluster.urls[0], topic, ["a", "bad", "b"])
        settings = base | {"deadLetterTopic": "wh-letters"}
        assert (await http.put(url, json=settings)).status_code == 204
        await eventually(lambda: "b" in endpoint.payloads(path))
        got = await http.get(
            f"{cluster.urls[0]}/consume/persistent/public/default/wh-letters/check",
            params={"subscriptionInitialPosition": "Earliest", "max": "10", "waitMs": "3000"},
            follow_redirects=True,
        )
        assert got.status_code == 200, got.text
        assert [text(m) for m in got.json()["messages"]] == ["bad"]
        view = (await http.get(url)).json()
        assert view["deadLetterTopic"] == "wh-letters" and view["deadLettered"] == 1
        default_dlq = f"{cluster.urls[0]}{ADMIN}/{topic}-s-DLQ/stats"
        assert (await http.get(default_dlq)).status_code == 404  # the default name was not used
        assert (await http.delete(url)).status_code == 204  # the cluster's bound is shared with other tests


async def test_bad_settings_and_limits(cluster: MessagingCluster, endpoint: Endpoint) -> None:
    url = f"{cluster.urls[0]}{hook('wh-bad', 's')}"
    cases: list[tuple[Any, str]] = [
        ({"url": "ftp://127.0.0.1/x"}, "http"),
        ({"url": "http://localhost:9/x"}, "allow-list"),  # the gateways allow 127.0.0.1 only
        ({"url": endpoint.url, "maxMessages": 0}, "maxMessages"),
        ({"url": endpoint.url, "maxInFlight": 17}, "maxInFlight"),
        ({"url": endpoint.url, "maxBackoffMs": 0}, "maxBackoffMs"),
        ({"url": endpoint.url, "colour": "red"}, "unknown field"),
        ({"url": endpoint.url, "headers": {"Host": "evil"}}, "Host"),
        ({"url": endpoint.url, "subscriptionType": "Mixed"}, "subscriptionType"),
        ({"url": "http://127.0.0.1:0/"}, "port from 1 to 65535"),
        (["not", "an", "object"], "JSON object"),
    ]
    async with httpx.AsyncClient(timeout=20) as http:
        for body, needle in cases:
            response = await http.put(url, json=body)
            assert response.status_code == 400, (body, response.text)
            assert needle in response.json()["reason"], (body, response.text)
        assert (await http.get(url)).status_code == 404
        # the cluster's bound: WEBHOOKS_MAX in all (other tests' webhooks count too)
        made = []
        for i in range(WEBHOOKS_MAX + 1):
            target = f"{cluster.urls[i % 2]}{hook(f'wh-many-{i}', 's')}"
            response = await http.put(target, json={"url": endpoint.url + "/many"})
            if response.status_code == 409:
                assert "maximum of 8 webhooks" in response.json()["reason"]
                break
            assert response.status_code == 204, response.text
            made.append(target)
        else:
            pytest.fail("the webhook bound was never hit")
        again = await http.put(made[0], json={"url": endpoint.url + "/many2"})  # replacing is no new one
        assert again.status_code == 204, again.text
        for target in made:
            assert (await http.delete(target)).status_code == 204


async def test_deleting_the_subscription_deletes_its_webhook(
    cluster: MessagingCluster, endpoint: Endpoint
) -> None:
    topic, path = "wh-delete", "/delete"
    async with httpx.AsyncClient(timeout=20) as http:
        url = cluster.urls[0]
        assert (
            await http.put(f"{url}{hook(topic, 's')}", json={"url": endpoint.url + path})
        ).status_code == 204
        sub_url = f"{url}{ADMIN}/{topic}/subscription/s"
        busy = await http.delete(sub_url)
        assert busy.status_code == 412, busy.text  # the pusher is a connected consumer
        assert (await http.delete(sub_url, params={"force": "true"})).status_code == 204
        await asyncio.sleep(2.5)  # more than two reconcile rounds: nothing brings it back
        subs = (await http.get(f"{url}{ADMIN}/{topic}/subscriptions")).json()
        assert "s" not in subs
        assert (await http.get(f"{url}{hook(topic, 's')}")).status_code == 404


async def test_redirects_are_failures_and_endless_answers_are_cut(
    cluster: MessagingCluster, endpoint: Endpoint
) -> None:
    """A 3xx is not followed (it could lead anywhere): the POST failed and is retried.
    An answer body is read up to 64 KiB only: a 2xx whose body never ends still acks."""
    async with httpx.AsyncClient(timeout=20) as http:
        endpoint.answer["/moved"] = lambda _b: 307
        await publish(http, cluster.urls[0], "wh-moved", ["a"])
        settings = {"url": endpoint.url + "/moved", "initialPosition": "Earliest", "minBackoffMs": 20}
        assert (await http.put(f"{cluster.urls[0]}{hook('wh-moved', 's')}", json=settings)).status_code == 204
        await eventually(lambda: len(endpoint.received["/moved"]) >= 2)
        assert "/ok" not in endpoint.received  # the Location was never followed
        view = (await http.get(f"{cluster.urls[0]}{hook('wh-moved', 's')}")).json()
        assert view["acked"] == 0 and view["lastError"] == "HTTP 307"

        endpoint.endless.add("/endless")
        await publish(http, cluster.urls[0], "wh-endless", ["b", "c"])
        settings = {"url": endpoint.url + "/endless", "initialPosition": "Earliest", "timeoutMs": 5000}
        assert (
            await http.put(f"{cluster.urls[0]}{hook('wh-endless', 's')}", json=settings)
        ).status_code == 204

        async def acked() -> bool:
            return await backlog(http, cluster.urls[0], "wh-endless", "s") == 0

        await eventually(acked)
        view = (await http.get(f"{cluster.urls[0]}{hook('wh-endless', 's')}")).json()
        assert view["acked"] == 2 and view["failures"] == 0
        for topic in ("wh-moved", "wh-endless"):  # the cluster's bound is shared with the other tests
            assert (await http.delete(f"{cluster.urls[0]}{hook(topic, 's')}")).status_code == 204


async def test_partitioned_topic_key_shared(cluster: MessagingCluster, endpoint: Endpoint) -> None:
    """On a partitioned topic the webhook is set, shown and deleted on every partition."""
    topic, path = "wh-parts", "/parts"
    sent = [f"p{i}" for i in range(30)]
    async with httpx.AsyncClient(timeout=20) as http:
        made = await http.put(f"{cluster.urls[0]}{ADMIN}/{topic}/partitions", json=3)
        assert made.status_code == 204, made.text
        settings = {
            "url": endpoint.url + path,
            "subscriptionType": "Key_Shared",
            "initialPosition": "Earliest",
        }
        assert (await http.put(f"{cluster.urls[1]}{hook(topic, 's')}", json=settings)).status_code == 204
        body = {"messages": [{"payload": t, "key": f"k{i % 7}"} for i, t in enumerate(sent)]}
        published = await http.post(f"{cluster.urls[0]}/topics/persistent/public/default/{topic}", json=body)
        assert published.status_code == 200, published.text
        await eventually(lambda: sorted(endpoint.payloads(path)) == sorted(sent))
        topics = {b["topic"] for b in endpoint.received[path]}
        assert topics <= {f"persistent://public/default/{topic}-partition-{i}" for i in range(3)}

        async def all_acked() -> bool:
            views = (await http.get(f"{cluster.urls[0]}{hook(topic, 's')}")).json()["partitions"]
            return len(views) == 3 and sum(v["acked"] for v in views.values()) == len(sent)

        await eventually(all_acked)
        listed = (await http.get(f"{cluster.urls[1]}{ADMIN}/{topic}/webhooks")).json()["partitions"]
        assert len(listed) == 3 and all(list(v) == ["s"] for v in listed.values())
        assert (await http.delete(f"{cluster.urls[0]}{hook(topic, 's')}")).status_code == 204
        assert (await http.get(f"{cluster.urls[1]}{hook(topic, 's')}")).status_code == 404
        listed = (await http.get(f"{cluster.urls[1]}{ADMIN}/{topic}/webhooks")).json()["partitions"]
        assert all(v == {} for v in listed.values())


async def test_pushing_moves_with_the_topic_unload_and_owner_kill(
    cluster: MessagingCluster, endpoint: Endpoint
) -> None:
    """No client touches the topic after the unload or the kill: its webhook alone has
    the topic loaded again (on its owner, then on the survivor), and every message
    published before reaches the endpoint, first arrivals in publish order."""
    topic, path = "wh-move", "/move"
    sent = [f"v{i}" for i in range(30)]
    blocked = {"on": True}
    endpoint.answer[path] = lambda _b: 503 if blocked["on"] else 200
    async with httpx.AsyncClient(timeout=20) as http:
        settings = {"url": endpoint.url + path, "subscriptionType": "Failover", "initialPosition": "Earliest"}
        settings |= {"minBackoffMs": 20, "maxBackoffMs": 100}
        assert (await http.put(f"{cluster.urls[0]}{hook(topic, 's')}", json=settings)).status_code == 204
        await publish(http, cluster.urls[0], topic, sent[:10])
        await eventually(lambda: len(endpoint.received[path]) >= 2)  # refused so far
        unloaded = await http.put(f"{cluster.urls[0]}{ADMIN}/{topic}/unload")
        assert unloaded.status_code == 204, unloaded.text
        blocked["on"] = False
        await eventually(lambda: set(sent[:10]) <= set(endpoint.payloads(path)))
        await publish(http, cluster.urls[1], topic, sent[10:20])
        await eventually(lambda: set(sent[:20]) <= set(endpoint.payloads(path)))
        blocked["on"] = True
        await publish(http, cluster.urls[1], topic, sent[20:])  # acknowledged: stored on a quorum
        owner = await owner_of(cluster.urls[0], topic)
        victim = next(g for g in cluster.gateways if g.http_url == owner)
        await asyncio.to_thread(victim.kill9)
        blocked["on"] = False
        await eventually(lambda: set(sent) <= set(endpoint.payloads(path)), timeout=30)
        got = endpoint.payloads(path)
        assert sorted(set(got), key=got.index) == sent  # at least once, first arrivals in order
        await cluster.restart_gateway(cluster.gateways.index(victim))
