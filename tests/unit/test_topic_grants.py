"""Topic-level grants as stored values, and the letters topics they must cover.

Grants round-trip through Pulsar's ``auth_policies.destination_auth``; deleting a
topic (plain or partitioned) drops its grants, so a topic created again under
the name starts without them; dead-letter and retry topic names come from the
consumed topic's own name (its partitioned topic's), never from a message
property a producer sets.
"""

from __future__ import annotations

import pytest

from coordination.clock import SystemClock
from coordination.memory_store import MemoryStore
from gateway.broker.dead_letters import letter_topics
from gateway.meta.errors import PreconditionFailed
from gateway.meta.namespaces import NamespaceStore
from gateway.meta.policies import TOPIC_GRANTS_MAX, Policies
from gateway.names import NamespaceName, TopicName

pytestmark = pytest.mark.unit

T = "persistent://ta/ns/t"


def test_grants_round_trip_as_destination_auth() -> None:
    policies = Policies().grant_on_topic(T, "r", ("consume", "produce")).grant_on_topic(T, "s", ("consume",))
    data = policies.to_json()
    assert data["auth_policies"]["destination_auth"] == {T: {"r": ["consume", "produce"], "s": ["consume"]}}
    again = Policies.decode(policies.encode())
    assert again.topic_actions(T, "r") == ("consume", "produce") and again.topic_actions(T, "x") == ()
    assert again.revoke_on_topic(T, "r").topic_permissions == {T: {"s": ("consume",)}}
    assert again.revoke_on_topic(T).topic_permissions == {}


def test_topics_with_grants_are_bounded() -> None:
    policies = Policies(topic_permissions={f"{T}{i}": {"r": ("consume",)} for i in range(TOPIC_GRANTS_MAX)})
    with pytest.raises(PreconditionFailed):
        policies.grant_on_topic(T, "r", ("consume",))
    assert policies.grant_on_topic(f"{T}0", "s", ("produce",)).topic_actions(f"{T}0", "s") == ("produce",)


async def test_deleting_a_topic_drops_its_grants() -> None:
    store = NamespaceStore(MemoryStore(SystemClock()))
    ns = NamespaceName("ta", "ns")
    await store.create_tenant("ta")
    await store.create_namespace(ns)
    plain, parted = TopicName.parse(T), TopicName.parse("persistent://ta/ns/p")
    await store.create_topic(plain)
    await store.create_partitioned(parted, 2)
    for name in (plain, parted):
        await store.update_policies(ns, lambda p, n=name: p.grant_on_topic(str(n), "r", ("consume",)))
    await store.delete_topic_metadata(parted.partition(0))  # a partition: the grant stays
    assert (await store.get_policies(ns)).topic_actions(str(parted), "r") == ("consume",)
    await store.delete_topic_metadata(plain)
    await store.delete_partitioned(parted)
    assert (await store.get_policies(ns)).topic_permissions == {}


def test_letter_topics_come_from_the_topic_name() -> None:
    partition = TopicName.parse("persistent://ta/ns/p-partition-3")
    retry, dlq = letter_topics(partition, "s")
    assert (str(retry), str(dlq)) == ("persistent://ta/ns/p-s-RETRY", "persistent://ta/ns/p-s-DLQ")
    retry, dlq = letter_topics(TopicName.parse("persistent://ta/ns/p-s-RETRY"), "s")
    assert (str(retry), str(dlq)) == ("persistent://ta/ns/p-s-RETRY", "persistent://ta/ns/p-s-DLQ")
    retry, dlq = letter_topics(TopicName.parse("persistent://ta/ns/p-s-RETRY"), "other")
    assert str(dlq) == "persistent://ta/ns/p-s-RETRY-other-DLQ"
