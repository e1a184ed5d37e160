"""Admin decommission routes (gateway/api/admin_storage.py) over the in-memory store:
404 for an unknown node, 409 when too few writable nodes would be left, 202 then 200
for a repeated request, progress from ledger metadata, cancel, and a left node cleared."""

from __future__ import annotations

import httpx
import pytest

from coordination import keys
from coordination.clock import SystemClock
from coordination.memory_store import MemoryStore
from gateway.api.app import create_app
from gateway.process import Gateway, GatewayConfig
from storage import drain
from storage.drain import DrainRecord
from storage.types import LedgerMetadata, LedgerState, NodeInfo, Segment

pytestmark = pytest.mark.unit

BASE = "/admin/v2/storage"


def info(name: str) -> bytes:
    return NodeInfo(name, name, "", 10**12, 10**12, 0.0, False).to_json()


@pytest.fixture
async def setup() -> tuple[httpx.AsyncClient, MemoryStore]:
    store = MemoryStore(SystemClock())
    gateway = Gateway(store, GatewayConfig("unit", "http://127.0.0.1:1"))
    app = create_app(gateway, manage_lifecycle=False)
    for name in ("n:1", "n:2", "n:3"):
        await store.put(keys.node(name), info(name))
    segments = (Segment(0, ("n:1", "n:2", "n:3")),)
    closed = LedgerMetadata(5, 3, 3, 2, LedgerState.CLOSED, segments, last_entry_id=9, length=1000)
    await store.put(keys.ledger(5), closed.to_json())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://unit"), store


async def test_decommission_is_refused_when_too_few_nodes_would_be_left(setup) -> None:  # type: ignore[no-untyped-def]
    client, store = setup
    async with client:
        unknown = await client.post(f"{BASE}/nodes/n:9/decommission")
        assert unknown.status_code == 404 and "GET /admin/v2/storage/nodes" in unknown.json()["reason"]
        refused = await client.post(f"{BASE}/nodes/n:1/decommission")
        assert refused.status_code == 409, refused.text
        assert "add a node first" in refused.json()["reason"]
        assert await store.get(keys.drain("n:1")) is None


async def test_decommission_progress_cancel_and_clear(setup) -> None:  # type: ignore[no-untyped-def]
    client, store = setup
    await store.put(keys.node("n:4"), info("n:4"))
    async with client:
        started = await client.post(f"{BASE}/nodes/n:1/decommission")
        assert started.status_code == 202, started.text
        view = started.json()
        assert (view["state"], view["ledgersTotal"], view["ledgersDone"], view["bytesTotal"]) == (
            "draining",
            1,
            0,
            1000,
        )
        again = await client.post(f"{BASE}/nodes/n:1/decommission")
        assert again.status_code == 200 and again.json()["requestedMs"] == view["requestedMs"]
        # a second drain would leave two writable nodes, fewer than E=3
        assert (await client.post(f"{BASE}/nodes/n:2/decommission")).status_code == 409

        # the ledger moves off n:1: progress counts it done
        moved = LedgerMetadata(5, 3, 3, 2, LedgerState.CLOSED, (Segment(0, ("n:4", "n:2", "n:3")),), 9, 1000)
        await store.put(keys.ledger(5), moved.to_json())
        now = (await client.get(f"{BASE}/nodes/n:1/decommission")).json()
        assert (now["ledgersDone"], now["bytesDone"]) == (1, 1000)
        assert [d["nodeId"] for d in (await client.get(f"{BASE}/decommissions")).json()] == ["n:1"]

        # drained and still registered: leaving, cannot be cleared yet
        record = DrainRecord.from_json((await store.get(keys.drain("n:1"))).value)  # type: ignore[union-attr]
        await store.put(keys.drain("n:1"), drain.drained(record, 1).to_json())
        assert (await client.get(f"{BASE}/nodes/n:1/decommission")).json()["state"] == "drained"
        assert (await client.delete(f"{BASE}/nodes/n:1/decommission")).status_code == 409
        await store.delete(keys.node("n:1"))  # it left
        assert (await client.get(f"{BASE}/nodes/n:1/decommission")).json()["state"] == "left"
        assert (await client.delete(f"{BASE}/nodes/n:1/decommission")).status_code == 204
        assert (await client.get(f"{BASE}/nodes/n:1/decommission")).status_code == 404

        # a drain under way can be cancelled (a fifth node keeps three writable)
        await store.put(keys.node("n:5"), info("n:5"))
        assert (await client.post(f"{BASE}/nodes/n:2/decommission")).status_code == 202
        assert (await client.delete(f"{BASE}/nodes/n:2/decommission")).status_code == 204
        assert await store.get(keys.drain("n:2")) is None
