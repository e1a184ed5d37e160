"""Requests a secured gateway refuses with a sentence saying what to do (real processes).

A secured cluster (etcd, 3 storage nodes, 2 gateways, HS256 tokens, a cluster
secret, no webhook allow-list):
- ``Authorization: <token>`` without its scheme is 401 saying to add ``Bearer ``;
- ``?token=`` on a plain REST route is 401 naming the Authorization header, while a
  WebSocket and an event stream still take it (browsers cannot set their headers);
- a topic's webhook list needs what one webhook needs (``consume``): a
  produce-only role is 403 there (the URLs may carry credentials), a consumer reads it;
- a webhook URL is checked when it is set: with tokens on, loopback (also as the
  number ``2130706433`` or the name ``localhost``), a private address, a link-local
  metadata address and a port of the cluster are 400 naming the rule, and nothing is
  stored; a public address is accepted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx
import pytest
import pytest_asyncio
import websockets
from secure import SUPERUSER, SecureCluster, secure_cluster

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

A = "persistent/ta/ns"
ADMIN = f"/admin/v2/{A}"
CREDENTIALED = "http://93.184.216.34:9/hook?apikey=s3cret"  # public; nothing needs to answer


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sec(etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SecureCluster]:
    async with secure_cluster(etcd_endpoint, tmp_path_factory.mktemp("secure-requests")) as made:
        yield made


async def test_a_token_without_bearer_is_told_to_add_it(sec: SecureCluster) -> None:
    async with httpx.AsyncClient(base_url=sec.urls[0], timeout=30) as http:
        r = await http.get("/admin/v2/tenants", headers={"Authorization": sec.token(SUPERUSER)})
        assert r.status_code == 401, r.text
        assert "add 'Bearer ' before the token" in r.json()["reason"], r.text
        # control: the same token with its scheme
        assert (await http.get("/admin/v2/tenants", headers=sec.auth(SUPERUSER))).status_code == 200


async def test_query_token_only_on_websockets_and_event_streams(sec: SecureCluster) -> None:
    token = sec.token("pc")
    async with httpx.AsyncClient(timeout=30, follow_redirects=True) as http:
        for path in ("/admin/v2/tenants", f"{ADMIN}/q/stats", f"/topics/{A}/q"):
            r = await http.get(f"{sec.urls[0]}{path}?token={token}")
            assert r.status_code == 401, (path, r.text)
            assert "Authorization: Bearer <token>" in r.json()["reason"], r.text
        async with http.stream("GET", f"{sec.urls[1]}/consume/{A}/q/sse/stream?token={token}") as stream:
            assert stream.status_code == 200  # an event stream takes it
    async with websockets.connect(f"{sec.ws(0)}/ws/v2/consumer/{A}/q/ws?token={token}", open_timeout=30):
        pass  # a WebSocket takes it


async def test_webhook_list_needs_what_one_webhook_needs(sec: SecureCluster) -> None:
    async with httpx.AsyncClient(base_url=sec.urls[0], timeout=30) as http:
        r = await http.put(
            f"{ADMIN}/hooked/subscription/s/webhook", json={"url": CREDENTIALED}, headers=sec.auth(SUPERUSER)
        )
        assert r.status_code == 204, r.text
        for role, want in (("prod", 403), ("cons", 200), ("pc", 200)):
            one = await http.get(f"{ADMIN}/hooked/subscription/s/webhook", headers=sec.auth(role))
            listed = await http.get(f"{ADMIN}/hooked/webhooks", headers=sec.auth(role))
            assert (one.status_code, listed.status_code) == (want, want), (role, one.text, listed.text)
            if want == 200:
                assert listed.json()["s"]["url"] == CREDENTIALED
        assert (
            await http.delete(f"{ADMIN}/hooked/subscription/s/webhook", headers=sec.auth(SUPERUSER))
        ).status_code == 204


async def test_webhook_targets_are_checked_when_set(sec: SecureCluster) -> None:
    gateway = urlsplit(sec.urls[1])
    refused = {
        "http://127.0.0.1:9000/hook": "loopback address",
        "http://localhost:9000/hook": "loopback address",
        "http://2130706433:9000/hook": "loopback address",
        "http://10.1.2.3/hook": "not a public address",
        "http://169.254.169.254/latest/meta-data": "link-local",
        f"http://{gateway.hostname}:{gateway.port}/admin/v2/tenants": "a port of this cluster",
    }
    async with httpx.AsyncClient(base_url=sec.urls[0], timeout=30, headers=sec.auth(SUPERUSER)) as http:
        for i, (url, rule) in enumerate(refused.items()):
            path = f"{ADMIN}/target-{i}/subscription/s/webhook"
            r = await http.put(path, json={"url": url})
            assert r.status_code == 400, (url, r.text)
            assert r.json()["reason"].startswith("url: ") and rule in r.json()["reason"], (url, r.text)
            assert (await http.get(path)).status_code == 404  # nothing stored
        path = f"{ADMIN}/target-public/subscription/s/webhook"
        assert (await http.put(path, json={"url": CREDENTIALED})).status_code == 204
        assert (await http.delete(path)).status_code == 204
