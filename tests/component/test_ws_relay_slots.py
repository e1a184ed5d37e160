"""A WebSocket relayed to the owner gateway takes a per-role session slot on one gateway only.

A secured cluster (2 gateways, ``--sessions-per-role 2``): a role opens two
consumers of a topic through the gateway that does not own it (each relayed
to the owner). The owner counts them (a third session of the role there is
refused 429, as Pulsar's limit would), and the relaying gateway does not:
the same role still opens a session served there.
Before, the relay kept a slot of its own for each relayed session, so the
role was refused on both gateways.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
import websockets
from secure import SecureCluster, secure_cluster
from websockets.exceptions import InvalidStatus

pytestmark = [pytest.mark.component, pytest.mark.asyncio(loop_scope="module")]

A = "persistent/ta/ns"


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sec(etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SecureCluster]:
    limit = ("--sessions-per-role", "2")
    async with secure_cluster(etcd_endpoint, tmp_path_factory.mktemp("slots"), *limit) as made:
        yield made


async def _owner(sec: SecureCluster, topic: str) -> int:
    async with httpx.AsyncClient(timeout=30, headers=sec.auth("pc")) as http:
        r = await http.get(f"{sec.urls[0]}/lookup/v2/topic/{A}/{topic}")
        assert r.status_code == 200, r.text
        url = str(r.json()["httpUrl"]).rstrip("/")
    return next(i for i, u in enumerate(sec.urls) if u.rstrip("/") == url)


async def _status(url: str) -> int:
    try:
        async with websockets.connect(url, open_timeout=15):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


async def test_a_relayed_session_takes_one_slot(sec: SecureCluster) -> None:
    token = sec.token("pc")
    owner = await _owner(sec, "slots")
    relay = 1 - owner
    relayed = f"{sec.ws(relay)}/ws/v2/consumer/{A}/slots/s?subscriptionType=Shared&token={token}"
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(2):
            await stack.enter_async_context(websockets.connect(relayed, open_timeout=15))
        direct = f"{sec.ws(owner)}/ws/v2/consumer/{A}/slots/s?subscriptionType=Shared&token={token}"
        assert await _status(direct) == 429  # the owner counts the two relayed sessions
        assert await _status(f"{sec.ws(relay)}/ws/v2/pingpong?token={token}") == 101  # the relay does not
    assert await _status(relayed) == 101  # every slot freed when they closed
