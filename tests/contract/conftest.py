"""Fixture ``h``: the contract harness (see contract_harness.py), once per store kind."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from contract_harness import Harness

from coordination.clock import ManualClock, SystemClock
from coordination.etcd_store import EtcdStore, connect
from coordination.memory_store import MemoryStore


@pytest.fixture(params=["memory", "etcd"])
async def h(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    if request.param == "memory":
        clock = ManualClock(1_000_000)
        harness = Harness("memory", MemoryStore(clock), clock)
    else:
        endpoint = request.getfixturevalue("etcd_endpoint")
        store = await connect(endpoint, namespace=f"/contract-{uuid.uuid4().hex}")
        harness = Harness("etcd", store, SystemClock(), etcd_endpoint=endpoint)
    try:
        yield harness
    finally:
        for extra in harness.extra:
            await extra.close()
        if isinstance(harness.store, EtcdStore):
            await harness.store.delete_prefix("")
        await harness.store.close()
