"""How fast a dead gateway's topics are served again (real etcd, 3 nodes, 2 gateway processes).

Both gateways run with the production defaults of ``folio gateway`` (lease TTL,
load-manager interval). The first owns 100 topics; a REST producer publishes to
every topic through the second, each retrying every 200 ms while it fails. The
owner is killed -9 (``folio.takeover.measure_takeover``, also behind ``folio
bench takeover``). Printed: time to first success per topic after the kill
(min / median / max) and where the time went - the dead gateway's lease
expiring, the survivor taking the bundles, each topic's ledger list rewritten
(recovery done, new ledger in). The bound asserted is generous for a loaded box;
the target (5 s) is judged on the printed figures. A 10 s lease alone cannot
pass it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from clusters import MessagingCluster

from folio.takeover import create_topics, measure_takeover, spread, topic_path
from gateway.main import DEFAULT_LEASE_TTL_S, DEFAULT_LOAD_MANAGER_INTERVAL_S

pytestmark = pytest.mark.component

TOPICS = 100
BOUND_S = 9.0  # generous for a loaded box (the target is 5 s)
PRODUCTION = (  # the defaults of ``folio gateway`` (the test clusters' gateways run with others)
    "--lease-ttl",
    str(DEFAULT_LEASE_TTL_S),
    "--load-manager-interval",
    str(DEFAULT_LOAD_MANAGER_INTERVAL_S),
)


async def test_a_dead_owners_topics_are_served_again_quickly(
    messaging_cluster: Callable[..., Awaitable[MessagingCluster]],
) -> None:
    cluster = await messaging_cluster(gateways=0)
    owner = await cluster.add_gateway(*PRODUCTION)
    paths = [topic_path("takeover", i) for i in range(TOPICS)]
    await create_topics(owner.http_url, paths)  # all owned by the first gateway
    survivor = await cluster.add_gateway(*PRODUCTION)
    result = await measure_takeover(
        paths,
        owner_id=owner.address,
        survivor_url=survivor.http_url,
        survivor_id=survivor.address,
        kill=owner.kill9,
        etcd=cluster.ledgers.endpoint,
        etcd_namespace=cluster.ledgers.namespace,
    )
    print("\n" + "\n".join(result.lines()))
    assert result.expired is not None, "the dead gateway's registration was never deleted"
    assert len(result.first_ok) == TOPICS
    assert max(result.first_ok) < BOUND_S, spread(result.first_ok)
