"""Whether a loaded topic may still serve (``BrokerService.serves``): its bundle is
held under the epoch it was loaded in, and the lease is before its local deadline.
The bundle lookup is remembered per topic until the held bundles change; the lease
is checked against the clock on every call."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from coordination.clock import ManualClock
from coordination.memory_store import MemoryStore
from gateway.broker.service import BrokerService
from gateway.broker.topic import Topic
from gateway.names import TopicName
from gateway.ownership.bundles import BundleRange, NamespaceBundle, topic_hash
from gateway.ownership.held_bundles import HeldBundles
from storage.client.api import LedgerClient

pytestmark = pytest.mark.unit

NAME = TopicName.of("persistent", "public", "default", "t")
BUNDLE = NamespaceBundle(NAME.namespace_name, BundleRange(0, 0xFFFFFFFF))


async def _no_policies(_ns: Any) -> Any:
    raise AssertionError("not reached")


def _setup() -> tuple[BrokerService, HeldBundles, ManualClock, list[TopicName], Topic]:
    clock = ManualClock(1_000)
    held = HeldBundles()
    held.add(BUNDLE, 7)
    deadline = [5_000]  # the lease's local deadline
    lookups: list[TopicName] = []

    def epoch_of(name: TopicName) -> int | None:
        lookups.append(name)
        found = held.covering(name.namespace_name, topic_hash(str(name)))
        return found[1] if found and clock.now_ms() < deadline[0] else None

    service = BrokerService(MemoryStore(clock), cast(LedgerClient, None), clock, _no_policies)
    service.ownership_epoch = epoch_of
    service.held_generation = lambda: held.generation
    service.lease_valid = lambda: clock.now_ms() < deadline[0]
    topic = cast(Topic, SimpleNamespace(name=NAME, epoch=7, served_generation=-1))
    return service, held, clock, lookups, topic


def test_the_bundle_is_looked_up_once_while_the_held_bundles_stay_the_same() -> None:
    service, _, _, lookups, topic = _setup()
    assert all(service.serves(topic) for _ in range(100))
    assert lookups == [NAME]


def test_past_the_leases_local_deadline_a_topic_no_longer_serves_even_when_remembered() -> None:
    service, _, clock, lookups, topic = _setup()
    assert service.serves(topic)
    clock.advance(3_999)
    assert service.serves(topic)  # 4,999: still before the deadline
    clock.advance(1)
    assert not service.serves(topic)  # at the deadline: never acknowledge past it
    assert lookups == [NAME]  # the lease alone said no, without a lookup


def test_a_bundle_held_again_under_a_newer_epoch_ends_the_topic_loaded_under_the_older() -> None:
    service, held, _, _, topic = _setup()
    assert service.serves(topic)
    held.remove(BUNDLE, None)
    assert not service.serves(topic)
    held.add(BUNDLE, 12)  # ours again, but a new epoch: the topic must load again
    assert not service.serves(topic)
    fresh = cast(Topic, SimpleNamespace(name=NAME, epoch=12, served_generation=-1))
    assert service.serves(fresh)


def test_without_a_generation_every_call_looks_the_bundle_up() -> None:
    service, _, _, lookups, topic = _setup()
    service.held_generation = None  # as a host that wires only ``ownership_epoch``
    assert service.serves(topic) and service.serves(topic)
    assert lookups == [NAME, NAME]
