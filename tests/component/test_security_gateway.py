"""Authentication and authorization against real gateway processes with tokens on.

A secured cluster (etcd, 3 storage nodes, 2 gateways, HS256 tokens, a cluster
secret): anonymous and bad tokens get 401 on REST and on WebSocket handshakes
(header and ``?token=`` forms alike); grants decide publish and consume
(consume-only cannot publish, produce-only cannot subscribe); a role of tenant
B gets the same 403 for tenant A's names whether they exist or not; a request
reaching the owner through the other gateway is re-checked there, and one sent
to the owner directly as ``authoritative`` with no token is refused; a token
expiring closes an open WebSocket (4401) and ends an event stream; no token
ever appears in a gateway's log.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib
import time
from collections.abc import AsyncIterator
from types import ModuleType

import httpx
import jwt
import orjson
import pytest
import pytest_asyncio
import websockets
from secure import SUPERUSER, SecureCluster, secure_cluster
from test_generated_client import PACKAGE, generated  # noqa: F401 - a fixture
from websockets.exceptions import ConnectionClosed, InvalidStatus

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

A = "persistent/ta/ns"
B = "persistent/tb/ns"


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sec(etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SecureCluster]:
    limits = ("--auth-failures-max", "30", "--auth-failure-window", "2", "--sessions-per-role", "4")
    async with secure_cluster(etcd_endpoint, tmp_path_factory.mktemp("secure"), *limits) as made:
        yield made


def message(text: str) -> dict[str, object]:
    return {"messages": [{"payload": base64.b64encode(text.encode()).decode()}]}


def published(r: httpx.Response) -> None:
    assert r.status_code == 200 and r.json()["messagePublishResults"][0]["errorCode"] == 0, r.text


async def seen_everywhere(sec: SecureCluster, path: str, headers: dict[str, str], want: int) -> None:
    """Wait until every gateway answers ``want`` to ``GET path`` (not forwarded: a lookup)."""
    async with httpx.AsyncClient(timeout=30) as http:
        for url in sec.urls:
            deadline = time.monotonic() + 15
            while (status := (await http.get(url + path, headers=headers)).status_code) != want:
                assert time.monotonic() < deadline, (url, path, status)
                await asyncio.sleep(0.2)


async def ws_status(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        async with websockets.connect(url, open_timeout=15, additional_headers=headers):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


async def test_no_token_bad_tokens_and_both_token_forms(sec: SecureCluster) -> None:
    base = sec.urls[0]
    none_token = jwt.encode({"sub": SUPERUSER}, key=None, algorithm="none")
    wrong_key = jwt.encode({"sub": SUPERUSER}, b"x" * 32, algorithm="HS256")
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        assert (await http.delete("/admin/v2/tenants/ta?force=true")).status_code == 401
        assert (await http.get("/admin/v2/tenants")).status_code == 401
        for bad in ("garbage", none_token, wrong_key, sec.token(SUPERUSER)[:-4]):
            r = await http.get("/admin/v2/tenants", headers={"Authorization": f"Bearer {bad}"})
            assert r.status_code == 401, (bad, r.text)
            assert (await ws_status(f"{sec.ws(0)}/ws/v2/consumer/{A}/t/s?token={bad}")) == 401
        r = await http.get("/admin/v2/tenants", headers=sec.auth(SUPERUSER))
        assert r.status_code == 200 and {"ta", "tb"} <= set(r.json()), r.text
        # the health check stays public (load balancers)
        assert (await http.get("/admin/v2/brokers/health")).status_code == 200
    good = sec.token("pc")
    assert await ws_status(f"{sec.ws(0)}/ws/v2/consumer/{A}/t/s?token={good}") == 101
    assert await ws_status(f"{sec.ws(0)}/ws/v2/consumer/{A}/t/s2?token=Bearer%20{good}") == 101
    headers = {"Authorization": f"Bearer {good}"}
    assert await ws_status(f"{sec.ws(1)}/ws/v2/consumer/{A}/t/s3", headers) == 101
    assert await ws_status(f"{sec.ws(1)}/ws/v2/consumer/{A}/t/s4") == 401


async def test_grants_decide_publish_and_consume(sec: SecureCluster) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        for i, url in enumerate(sec.urls):  # one of the two forwards to the owner, which re-checks
            topic = f"{url}/topics/{A}/grants"
            published(await http.post(topic, json=message("x"), headers=sec.auth("prod")))
            assert (await http.post(topic, json=message("x"), headers=sec.auth("cons"))).status_code == 403
            assert (await http.post(topic, json=message("x"), headers=sec.auth("admin-b"))).status_code == 403
            published(await http.post(topic, json=message("x"), headers=sec.auth("admin-a")))
            ws = sec.ws(i)
            assert await ws_status(f"{ws}/ws/v2/consumer/{A}/grants/s?token={sec.token('cons')}") == 101
            assert await ws_status(f"{ws}/ws/v2/consumer/{A}/grants/s?token={sec.token('prod')}") == 403
            assert await ws_status(f"{ws}/ws/v2/producer/{A}/grants?token={sec.token('cons')}") == 403
            assert await ws_status(f"{ws}/ws/v2/reader/{A}/grants?token={sec.token('prod')}") == 403
        # consume-only cannot change policies, terminate or delete (CVE-2024-28098 class)
        base = sec.urls[0]
        r = await http.post(f"{base}/admin/v2/namespaces/ta/ns/messageTTL", json=1, headers=sec.auth("pc"))
        assert r.status_code == 403
        r = await http.post(f"{base}/admin/v2/{A}/grants/terminate", headers=sec.auth("pc"))
        assert r.status_code == 403
        r = await http.put(f"{base}/admin/v2/{A}/grants/subscription/made", json={}, headers=sec.auth("prod"))
        assert r.status_code == 403  # produce-only cannot create subscriptions (CVE-2024-29834 class)


async def test_other_tenant_names_get_the_same_403(sec: SecureCluster) -> None:
    async with httpx.AsyncClient(base_url=sec.urls[0], timeout=30) as http:
        answers = set()
        for path in (
            "/admin/v2/tenants/ta",
            "/admin/v2/tenants/no-such-tenant",
            "/admin/v2/namespaces/ta/ns/permissions",
            "/admin/v2/namespaces/ta/nope/permissions",
            f"/admin/v2/{A}/grants/stats",
            "/admin/v2/persistent/ta/nope/x/stats",
        ):
            r = await http.get(path, headers=sec.auth("admin-b"))
            answers.add((r.status_code, r.content))
        assert answers == {(403, orjson.dumps({"reason": "not authorized", "code": "forbidden"}))}
        r = await http.get("/admin/v2/namespaces/tb/ns/permissions", headers=sec.auth("admin-b"))
        assert r.status_code == 200


async def test_owner_rechecks_a_forwarded_request(sec: SecureCluster) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        topic = f"/topics/{A}/forwarded"
        r = await http.post(f"{sec.urls[0]}{topic}", json=message("x"), headers=sec.auth("prod"))
        assert r.status_code == 200
        # as if a gateway forwarded it: straight to each gateway, authoritative, forged role header
        for url in sec.urls:
            r = await http.post(
                f"{url}{topic}",
                params={"authoritative": "true"},
                json=message("x"),
                headers={"X-Folio-Role": SUPERUSER, "X-Pulsar-Original-Principal": SUPERUSER},
            )
            assert r.status_code == 401
            r = await http.post(
                f"{url}{topic}", params={"authoritative": "true"}, json=message("x"), headers=sec.auth("cons")
            )
            assert r.status_code == 403


async def test_expiring_token_closes_websocket_and_event_stream(sec: SecureCluster) -> None:
    lifetime = 3.0
    for ws in (sec.ws(0), sec.ws(1)):
        token = sec.token("pc", expires_in_s=lifetime)
        start = time.monotonic()
        async with websockets.connect(f"{ws}/ws/v2/consumer/{A}/expiry/s?token={token}") as socket:
            with pytest.raises(ConnectionClosed) as info:
                async with asyncio.timeout(lifetime + 10):
                    while True:
                        await socket.recv()
            closed_after = time.monotonic() - start
        assert info.value.rcvd is not None and info.value.rcvd.code == 4401, info.value
        print(f"WebSocket closed 4401 {closed_after:.1f} s after connecting (token lifetime {lifetime} s)")
        assert closed_after < lifetime + 5
    token = sec.token("pc", expires_in_s=lifetime)
    start = time.monotonic()
    async with (
        httpx.AsyncClient(timeout=30, follow_redirects=True) as http,  # to the owner
        http.stream("GET", f"{sec.urls[0]}/consume/{A}/expiry/sse/stream?token={token}") as stream,
    ):
        assert stream.status_code == 200
        async for _ in stream.aiter_bytes():
            pass
    ended_after = time.monotonic() - start
    print(f"event stream ended {ended_after:.1f} s after it opened (token lifetime {lifetime} s)")
    assert ended_after < lifetime + 5


async def test_revoking_a_grant_closes_open_sessions(sec: SecureCluster) -> None:
    su = sec.auth(SUPERUSER)
    async with httpx.AsyncClient(base_url=sec.urls[0], timeout=30) as http:
        r = await http.post("/admin/v2/namespaces/ta/ns/permissions/rev", json=["consume"], headers=su)
        assert r.status_code == 204
        url = f"{sec.ws(1)}/ws/v2/consumer/{A}/revoked/s?token={sec.token('rev')}"
        async with websockets.connect(url, open_timeout=15) as socket:
            assert (
                await http.delete("/admin/v2/namespaces/ta/ns/permissions/rev", headers=su)
            ).status_code == 204
            start = time.monotonic()
            with pytest.raises(ConnectionClosed) as info:
                async with asyncio.timeout(20):
                    while True:
                        await socket.recv()
            closed_after = time.monotonic() - start
    assert info.value.rcvd is not None and info.value.rcvd.code == 4403
    print(f"WebSocket closed 4403 {closed_after:.1f} s after the revoke (checked every 5 s)")
    assert closed_after < 10


async def test_tokens_never_in_logs(sec: SecureCluster) -> None:
    token = sec.token("pc")
    await ws_status(f"{sec.ws(0)}/ws/v2/consumer/{A}/logs/s?token={token}")
    await ws_status(f"{sec.ws(1)}/ws/v2/producer/{A}/logs?token=garbage{token[-20:]}")
    signature = token.rsplit(".", 1)[1]
    for gateway in sec.cluster.gateways:
        log = gateway.log_path.read_text(errors="replace") if gateway.log_path else ""
        assert signature not in log and token[-20:] not in log


async def test_dead_letters_only_where_the_caller_may_produce(sec: SecureCluster) -> None:
    """Confused deputy: a consumer naming another tenant's topic as its dead-letter topic
    is refused at the handshake (the gateway would write there with its own hands)."""
    ws = sec.ws(0)
    base = f"{ws}/ws/v2/consumer/{A}/dlq/s?subscriptionType=Shared&maxRedeliverCount=1"
    other = "persistent://tb/ns/stolen"
    for role in ("pc", "cons", "admin-a"):
        assert await ws_status(f"{base}&deadLetterTopic={other}&token={sec.token(role)}") == 403
    assert await ws_status(f"{base}&deadLetterTopic={other}&token={sec.token(SUPERUSER)}") == 101
    # the default dead-letter topic lives in the topic's namespace: produce needed there
    assert await ws_status(f"{base}&token={sec.token('cons')}") == 403
    assert await ws_status(f"{base}&token={sec.token('pc')}") == 101
    own = f"persistent://ta/ns/dlq-letters&token={sec.token('pc')}"
    assert await ws_status(f"{base}&deadLetterTopic={own}") == 101
    async with httpx.AsyncClient(base_url=sec.urls[1], timeout=30, follow_redirects=True) as http:
        r = await http.get(
            f"/consume/{A}/dlq/h",
            params={"deadLetterTopic": other, "maxRedeliverCount": "1", "wait": "0"},
            headers=sec.auth("pc"),
        )
        assert r.status_code == 403, r.text
        webhook = {"url": "https://example.invalid/hook"}
        r = await http.put(
            f"/admin/v2/{A}/dlq/subscription/w/webhook", json=webhook, headers=sec.auth("cons")
        )
        assert r.status_code == 403, r.text


async def test_generated_client_with_a_token(sec: SecureCluster, generated: ModuleType) -> None:  # noqa: F811
    """The client generated from openapi/openapi.json carries a token (AuthenticatedClient)."""
    client_module = importlib.import_module(f"{PACKAGE}.client")
    models = importlib.import_module(f"{PACKAGE}.models")
    produce = importlib.import_module(f"{PACKAGE}.api.produce.produce")
    body = models.ProducerMessages(messages=[models.TextMessage(payload="from the generated client")])
    kwargs = {"domain": models.ProduceDomain.PERSISTENT, "tenant": "ta", "namespace": "ns", "topic": "gen"}
    authed = client_module.AuthenticatedClient(base_url=sec.urls[0], token=sec.token("prod"), timeout=30.0)
    answer = await asyncio.to_thread(produce.sync_detailed, client=authed, body=body, **kwargs)
    assert answer.status_code == 200, answer.content
    anonymous = client_module.Client(base_url=sec.urls[0], timeout=30.0)
    answer = await asyncio.to_thread(produce.sync_detailed, client=anonymous, body=body, **kwargs)
    assert answer.status_code == 401


async def test_an_http_consumer_is_its_roles_own(sec: SecureCluster) -> None:
    """Another role with consume on the namespace cannot fetch or ack through it."""
    consume = f"/consume/{A}/owned/s"
    start = {"subscriptionInitialPosition": "Earliest", "waitMs": "2000"}
    mine = sec.auth("pc")
    async with httpx.AsyncClient(base_url=sec.urls[1], timeout=30) as http:
        r = await http.get(consume, params={**start, "consumerName": "mine", "waitMs": "0"}, headers=mine)
        assert r.status_code == 200, r.text  # the topic and the subscription exist from here
        r = await http.post(f"/topics/{A}/owned", json=message("x"), headers=mine)
        assert r.json()["messagePublishResults"][0]["errorCode"] == 0, r.text
        r = await http.get(consume, params={**start, "consumerName": "mine"}, headers=mine)
        ids = [m["messageId"] for m in r.json()["messages"]]
        assert ids, r.text
        r = await http.get(consume, params={**start, "consumerName": "mine"}, headers=sec.auth("cons"))
        assert r.status_code == 409 and "another role" in r.text
        ack = {"messageIds": ids}
        r = await http.post(
            f"{consume}/ack", params={"consumerName": "mine"}, json=ack, headers=sec.auth("cons")
        )
        assert r.status_code == 409
        r = await http.post(
            f"{consume}/ack", params={"consumerName": "mine"}, json=ack, headers=sec.auth("pc")
        )
        assert r.status_code == 200 and r.json()["acked"] == len(ids), r.text


async def test_sessions_per_role_and_failed_auth_throttle(sec: SecureCluster) -> None:
    """Last in this module: it leaves 127.0.0.1 throttled for the 2 s window."""
    url = f"{sec.ws(0)}/ws/v2/consumer/{A}/many/s?subscriptionType=Shared&token={sec.token('pc')}"
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(4):
            await stack.enter_async_context(websockets.connect(url, open_timeout=15))
        assert await ws_status(url) == 429  # a 5th session of this role
        other = f"{sec.ws(0)}/ws/v2/consumer/{A}/many/s2?token={sec.token('cons')}"
        assert await ws_status(other) == 101  # another role is not held back
    assert await ws_status(url) == 101  # freed when they closed
    async with httpx.AsyncClient(base_url=sec.urls[0], timeout=30) as http:
        good = sec.auth("pc")
        for _ in range(30):
            r = await http.get(f"/admin/v2/{A}/t/stats", headers={"Authorization": "Bearer guess"})
            assert r.status_code == 401
        r = await http.get(f"/admin/v2/{A}/t/stats", headers=good)
        assert r.status_code == 429 and r.json()["code"] == "auth_throttled"
        await asyncio.sleep(2.2)
        r = await http.get("/admin/v2/namespaces/ta/ns/topics", headers=good)
        assert r.status_code == 200, r.text
        # a refusal of each counted kind happens in this test, so it holds run on its own
        r = await http.post(f"/topics/{A}/grants", json=message("x"), headers=sec.auth("cons"))
        assert r.status_code == 403, r.text
        # a relayed session's slot is the owner's: either gateway may have refused the 5th
        metrics = "".join(
            [(await http.get(f"{u}/metrics", headers=sec.auth(SUPERUSER))).text for u in sec.urls]
        )
        for code in ("auth_throttled", "too_many_sessions", "unauthenticated", "forbidden"):
            assert f'folio_gateway_security_refused_total{{code="{code}"}}' in metrics, code


async def test_topic_grants_on_every_path(sec: SecureCluster) -> None:
    """A grant on one (partitioned) topic allows exactly that topic and its partitions on
    every path (REST publish, WebSocket producer, consumer and reader, HTTP consume,
    webhooks); dead-letter and retry topics need their own grant; revoking it closes
    the open consumer (4403)."""
    su, me = sec.auth(SUPERUSER), sec.auth("tg")
    grants = f"/admin/v2/{A}/tg-p/permissions"
    async with httpx.AsyncClient(base_url=sec.urls[0], timeout=30) as http:
        assert (await http.put(f"/admin/v2/{A}/tg-p/partitions", json=2, headers=su)).status_code == 204
        r = await http.post(f"{grants}/tg", json=["produce", "consume"], headers=su)
        assert r.status_code == 204, r.text
        r = await http.post(f"/admin/v2/{A}/tg-p-partition-0/permissions/tg", json=["consume"], headers=su)
        assert r.status_code == 412, r.text  # grants are on the partitioned topic
        assert (await http.post(f"{grants}/tg", json=["consume"], headers=me)).status_code == 403
        await seen_everywhere(sec, f"/lookup/v2/topic/{A}/tg-p", me, 200)
        mine = (await http.get("/admin/v2/whoami", headers=me)).json()
        assert mine["topicGrants"] == {"persistent://ta/ns/tg-p": ["consume", "produce"]}
        assert not mine["grants"]
        shown = (await http.get(grants, headers=sec.auth("admin-a"))).json()
        assert shown["tg"] == ["consume", "produce"] and shown["pc"] == ["consume", "produce"]
        published(await http.post(f"/topics/{A}/tg-p", json=message("x"), headers=me))
        published(await http.post(f"/topics/{A}/tg-p/partitions/1", json=message("y"), headers=me))
        assert (await http.post(f"/topics/{A}/other", json=message("x"), headers=me)).status_code == 403
        assert (await http.get(f"/admin/v2/{A}/tg-p/partitioned-stats", headers=me)).status_code == 200
        assert (await http.delete(f"/admin/v2/{A}/tg-p/partitions", headers=me)).status_code == 403
        r = await http.get(f"/consume/{A}/tg-p-partition-0/h", params={"wait": "0"}, headers=me)
        assert r.status_code == 200, r.text
        webhook = {"url": "https://example.invalid/hook"}
        hook = f"/admin/v2/{A}/tg-p/subscription/w/webhook"
        assert (await http.put(hook, json=webhook, headers=me)).status_code == 403  # tg-p-w-DLQ
        ws, token = sec.ws(1), sec.token("tg")
        assert await ws_status(f"{ws}/ws/v2/producer/{A}/tg-p?token={token}") == 101
        assert await ws_status(f"{ws}/ws/v2/reader/{A}/tg-p-partition-1?token={token}") == 101
        assert await ws_status(f"{ws}/ws/v2/producer/{A}/other?token={token}") == 403
        assert await ws_status(f"{ws}/ws/v2/consumer/{B}/tg-p/s?token={token}") == 403
        dead = f"{ws}/ws/v2/consumer/{A}/tg-p/s?subscriptionType=Shared&maxRedeliverCount=1&token={token}"
        assert await ws_status(dead) == 403  # no produce on tg-p-s-DLQ
        r = await http.post(f"/admin/v2/{A}/tg-p-s-DLQ/permissions/tg", json=["produce"], headers=su)
        assert r.status_code == 204
        await seen_everywhere(sec, f"/lookup/v2/topic/{A}/tg-p-s-DLQ", me, 200)
        assert await ws_status(dead) == 101
        url = f"{ws}/ws/v2/consumer/{A}/tg-p/r?subscriptionInitialPosition=Earliest&token={token}"
        async with websockets.connect(url, open_timeout=15) as socket:
            first = orjson.loads(await asyncio.wait_for(socket.recv(), 15))
            # the retry topic tg-p-r-RETRY is not granted: refused, nothing written
            await socket.send(orjson.dumps({"type": "reconsumeLater", "messageId": first["messageId"]}))
            refused = orjson.loads(await asyncio.wait_for(socket.recv(), 15))
            while refused.get("type") != "error":
                refused = orjson.loads(await asyncio.wait_for(socket.recv(), 15))
            assert refused["code"] == "forbidden" and "tg-p-r-RETRY" in refused["errorMsg"]
            assert (await http.delete(f"{grants}/tg", headers=su)).status_code == 204
            start = time.monotonic()
            with pytest.raises(ConnectionClosed) as info:
                async with asyncio.timeout(20):
                    while True:
                        await socket.recv()
            closed_after = time.monotonic() - start
        assert info.value.rcvd is not None and info.value.rcvd.code == 4403
        print(f"topic grant revoked: consumer closed 4403 after {closed_after:.1f} s")
        assert (await http.delete(f"{grants}/tg", headers=su)).status_code == 412  # nothing left to revoke
        await seen_everywhere(sec, f"/lookup/v2/topic/{A}/tg-p", me, 403)
        assert (await http.post(f"/topics/{A}/tg-p", json=message("x"), headers=me)).status_code == 403
