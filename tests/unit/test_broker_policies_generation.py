"""The broker's copy of namespace policies and its generation: every write of the
copy moves ``BrokerService.policies_generation``, which is what tells a topic to look
its policies up again (``Topic.policies``)."""

from __future__ import annotations

from typing import cast

import pytest

from coordination.clock import ManualClock
from coordination.memory_store import MemoryStore
from gateway.broker.service import BrokerService, NamespaceView
from gateway.broker.topic_policies import TopicPolicies
from gateway.names import NamespaceName
from storage.client.api import LedgerClient

pytestmark = pytest.mark.unit

NS = NamespaceName("public", "default")


async def test_a_fresh_read_of_a_namespace_moves_the_generation_and_changes_the_policies() -> None:
    clock = ManualClock(1_000)
    dedup = [False]

    async def source(_ns: NamespaceName) -> NamespaceView:
        return NamespaceView(exists=True, policies=TopicPolicies(dedup=dedup[0]))

    service = BrokerService(MemoryStore(clock), cast(LedgerClient, None), clock, source)
    before = service.policies_generation
    await service.namespace(NS)
    assert service.policies_generation != before and not service.namespace_policies(NS).dedup
    seen = service.policies_generation
    await service.namespace(NS)  # cached: no write, no move
    assert service.policies_generation == seen
    dedup[0] = True  # changed in etcd
    await service.namespace(NS, fresh=True)
    assert service.policies_generation != seen and service.namespace_policies(NS).dedup


async def test_a_namespace_that_does_not_exist_leaves_the_generation() -> None:
    clock = ManualClock(1_000)

    async def source(_ns: NamespaceName) -> NamespaceView:
        return NamespaceView(exists=False)

    service = BrokerService(MemoryStore(clock), cast(LedgerClient, None), clock, source)
    before = service.policies_generation
    await service.namespace(NS, fresh=True)
    assert service.policies_generation == before
