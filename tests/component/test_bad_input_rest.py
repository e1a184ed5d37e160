"""Bad input over REST against real gateways (docs/testing.md §4; docs/compatibility.md §2).

One cluster for the module (etcd, 3 storage nodes, 2 gateways). Shows:
malformed JSON bodies -> 400 with ``{"reason"}`` (nesting bomb, BOM, NaN,
2^64, lone surrogates, wrong types); too large -> 413, also when only the
declared Content-Length is too large; invalid names and path traversal
(``..``, ``%2e%2e``, double encoding, spaces, NUL, CRLF, backslash, RTL
override) -> 4xx, never 5xx, on REST and on WS handshakes, and no managed log
is created for such a name; a seeded body sweep gives no 5xx; the gateways
survive all of it. (WebSocket frames, handshake parameters and acks:
test_bad_input.py.)
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
import pytest_asyncio
from badinput import BAD_JSON_BODIES, assert_gateways_survived, raw_status
from clusters import MessagingCluster
from wsclient import TOPIC_PATH, b64, handshake_status, module_cluster

from coordination import keys
from gateway.process import GatewayConfig

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

LIMIT = GatewayConfig("x", "x").max_message_bytes  # the gateways run with the default config


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MessagingCluster]:
    async with module_cluster(etcd_endpoint, tmp_path_factory.mktemp("badrest")) as made:
        yield made


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30.0) as client:
        yield client


# ------------------------------------------------------------------ REST bodies


async def test_rest_malformed_json_is_400_with_reason(
    cluster: MessagingCluster, http: httpx.AsyncClient
) -> None:
    for base in cluster.urls:  # the owner and the forwarding gateway
        for body in BAD_JSON_BODIES:
            response = await http.post(
                f"{base}/topics/{TOPIC_PATH}/bad-rest",
                content=body,
                headers={"content-type": "application/json"},
            )
            assert response.status_code == 400, (body[:60], response.status_code, response.text[:200])
            reason = response.json().get("reason")
            assert isinstance(reason, str) and reason, response.text[:200]


async def test_rest_payload_too_large_is_413(cluster: MessagingCluster, http: httpx.AsyncClient) -> None:
    url = f"{cluster.urls[1]}/topics/{TOPIC_PATH}/rest-limit"
    raw = os.urandom(LIMIT)
    ok = await http.post(url, content=raw, headers={"content-type": "application/octet-stream"})
    assert ok.status_code == 200 and ok.json()["errorCode"] == 0, ok.text
    cases = [
        (raw + b"x", "application/octet-stream"),
        (orjson.dumps({"messages": [{"payload": "x" * (LIMIT + 1)}]}), "application/json"),
        (orjson.dumps({"messages": [{"payload": "\u00e9" * (LIMIT // 2 + 1)}]}), "application/json"),
        (
            orjson.dumps({"messages": [{"payload": b64(raw + b"x"), "payloadEncoding": "base64"}]}),
            "application/json",
        ),
    ]
    for body, content_type in cases:
        response = await http.post(url, content=body, headers={"content-type": content_type})
        assert response.status_code == 413, (content_type, response.status_code, response.text[:200])
        assert str(LIMIT) in response.json()["reason"], response.text[:200]


async def test_rest_declared_oversize_body_refused_before_it_is_sent(cluster: MessagingCluster) -> None:
    url = urlsplit(cluster.urls[0])
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        writer.write(
            (
                f"POST /topics/{TOPIC_PATH}/rest-lying-length HTTP/1.1\r\nHost: {url.netloc}\r\n"
                f"Content-Type: application/octet-stream\r\nContent-Length: {100 * LIMIT}\r\n\r\n"
            ).encode()
            + b"x" * 65536
        )
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 5)
        assert int(line.split()[1]) == 413, line
    finally:
        writer.close()


BAD_TOPICS = [
    "..",
    "%2e%2e",
    "%2E%2E",
    "%252e%252e",
    ".%2e",
    "..%2f..%2fetc%2fpasswd",
    "..%5c..%5cwindows",
    "a%20b",
    "%20lead",
    "a%00b",
    "a%0d%0aX-Injected:%201",
    "a%5cb",
    ".hidden",
    "-dash",
    "caf%C3%A9",
    "%E2%80%AEevil",
    "x" * 300,
]


async def test_invalid_names_and_traversal_are_4xx_never_5xx(
    cluster: MessagingCluster, http: httpx.AsyncClient
) -> None:
    body = b'{"messages":[{"payload":"a"}]}'
    targets = [f"/topics/{TOPIC_PATH}/{name}" for name in BAD_TOPICS]
    targets += [
        f"/topics/{TOPIC_PATH}/../../../../etc/passwd",
        f"/topics/{TOPIC_PATH}/a/../../b",
        "/topics/persistent/%2e%2e/default/t",
        "/topics/persistent/public/%2e%2e/t",
        "/topics/persistent/public/a%20b/t",
        "/topics/bogus/public/default/t",
        f"/topics/{TOPIC_PATH}/t/partitions/-1",
        f"/topics/{TOPIC_PATH}/t/partitions/abc",
        f"/consume/{TOPIC_PATH}/t/%2e%2e",
        f"/consume/{TOPIC_PATH}/%2e%2e/s",
        f"/lookup/v2/topic/{TOPIC_PATH}/%2e%2e",
        "/admin/v2/persistent/public/default/%2e%2e",
    ]
    statuses: dict[str, int] = {}
    for base in cluster.urls:
        for target in targets:
            method = "GET" if target.startswith(("/consume", "/lookup")) else "POST"
            if target.startswith("/admin"):
                method = "PUT"
            statuses[target] = await raw_status(base, method, target, body)
    bad = {t: s for t, s in statuses.items() if not 400 <= s < 500}
    assert bad == {}, bad
    # the same names on WebSocket handshakes (producer, consumer topic, subscription)
    ws_statuses: dict[str, int] = {}
    for name in BAD_TOPICS:
        for gateway in (0, 1):
            base = cluster.ws(gateway)
            for url in (
                f"{base}/ws/v2/producer/{TOPIC_PATH}/{name}",
                f"{base}/ws/v2/consumer/{TOPIC_PATH}/{name}/s",
                f"{base}/ws/v2/consumer/{TOPIC_PATH}/ok-topic/{name}",
                f"{base}/ws/v2/reader/{TOPIC_PATH}/{name}",
            ):
                ws_statuses[url] = await handshake_status(url)
    bad = {u: s for u, s in ws_statuses.items() if not 400 <= s < 500}
    assert bad == {}, bad
    # nothing was created for any of those names (storage maps names to ids; etcd holds names)
    store = await cluster.ledgers.store()
    logs = [kv.key for kv in await store.list_prefix(keys.MANAGED_LOGS)]
    assert not [k for k in logs if any(bit in k for bit in ("..", " ", "%", "\\", "\x00", "etc"))], logs
    print(f"B5 cases={len(statuses) + len(ws_statuses)} 5xx=0")


async def test_rest_body_sweep_never_5xx(cluster: MessagingCluster, http: httpx.AsyncClient) -> None:
    rng = random.Random(7)
    atoms: list[Any] = [None, True, 1, -1, 2**63 - 1, 0.5, "", "a", "YQ==", [], {}, "\u0000", "9" * 30]
    statuses: dict[int, int] = {}
    url = f"{cluster.urls[0]}/topics/{TOPIC_PATH}/rest-sweep"
    for _ in range(250):
        names = ["payload", "key", "properties", "eventTime", "sequenceId", "deliverAt", "payloadEncoding"]
        message = {rng.choice(names): rng.choice(atoms) for _ in range(rng.randint(0, 4))}
        doc: Any = {"messages": [message] if rng.random() < 0.8 else rng.choice(atoms)}
        if rng.random() < 0.2:
            doc["producerName"] = rng.choice(atoms)
        body = orjson.dumps(doc)
        if rng.random() < 0.25:
            cut = rng.randint(0, len(body))
            body = body[:cut] + bytes([rng.randrange(256)]) + body[cut:]
        response = await http.post(url, content=body, headers={"content-type": "application/json"})
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        assert response.status_code < 500, (body[:100], response.status_code, response.text[:200])
    print(f"B1-B2 rest cases=250 statuses={statuses}")


async def test_gateways_survived_every_bad_rest_request(
    cluster: MessagingCluster, http: httpx.AsyncClient
) -> None:
    await assert_gateways_survived(cluster, http)
