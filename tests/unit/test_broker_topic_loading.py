"""How the broker shares topic loads (gateway/broker/service.py ``BrokerService.topic``)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from coordination.clock import ManualClock
from coordination.memory_store import MemoryStore
from gateway.broker.log_state import TopicNotFound
from gateway.broker.service import BrokerService
from gateway.broker.topic import Topic
from gateway.names import TopicName
from storage.client.api import LedgerClient

NAME = TopicName.of("persistent", "public", "default", "t")


async def test_a_creating_caller_that_meets_a_finished_refusal_loads_anew() -> None:
    """A load that may not create fails; a caller that may create reaches it after it
    finished but before its done-callback ran. That caller loads again (once) instead of
    meeting the same finished refusal in a recursion that never ends."""
    clock = ManualClock()

    async def no_policies(_ns: Any) -> Any:
        raise AssertionError("not reached")

    service = BrokerService(MemoryStore(clock), cast(LedgerClient, None), clock, no_policies)
    loaded = cast(Topic, object())
    creators: list[asyncio.Task[Topic]] = []
    loads: list[bool] = []

    async def fake_load(name: TopicName, create: bool) -> Topic:
        loads.append(create)
        if not create:
            # runs right after this load ends, before the load's done-callbacks
            creators.append(asyncio.get_running_loop().create_task(service.topic(name, create=True)))
            raise TopicNotFound("no such topic")
        return loaded

    service._load = fake_load  # type: ignore[method-assign]
    refused = asyncio.ensure_future(service.topic(NAME, create=False))
    await asyncio.sleep(0.01)
    assert isinstance(refused.exception(), TopicNotFound)
    assert await asyncio.wait_for(creators[0], 1) is loaded
    assert loads == [False, True]
