"""(d) A node's disk nearly full: it turns read-only, new ledgers avoid it, and
an open writer whose ensemble holds it moves off it without an error.

Real etcd and four real storage-node processes; one node reports its free
space through the test knob file and is given a threshold above it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from clusters import LedgerCluster

from storage.client.api import LedgerClient
from storage.errors import NotEnoughNodes

pytestmark = pytest.mark.component


async def test_full_disk_turns_node_read_only_and_ledgers_avoid_it(
    ledger_cluster: Callable[[int], Awaitable[LedgerCluster]], tmp_path: Path
) -> None:
    cluster = await ledger_cluster(3)
    tight = await cluster.add_tight_node(tmp_path / "free-bytes")

    store = await cluster.store()
    client = LedgerClient(store, seed=3)
    try:
        # an open ledger that includes the node while it is still writable
        writer = None
        for _ in range(40):
            candidate = await client.create(3, 3, 2)
            if tight.address in candidate.metadata.segments[0].ensemble:
                writer = candidate
                break
            await candidate.close()
        assert writer is not None, "placement never chose the fourth node"
        for i in range(50):
            await writer.append(b"before %d" % i)

        await tight.fill()  # the disk fills up

        # new ledgers avoid the read-only node ...
        for _ in range(20):
            fresh = await client.create(3, 3, 2)
            assert tight.address not in fresh.metadata.segments[0].ensemble
            await fresh.close()
        with pytest.raises(NotEnoughNodes):
            await client.create(4, 3, 2)  # only three writable nodes remain

        # ... and the open writer moves off it (its adds are refused) with no error
        for i in range(50, 100):
            assert await writer.append(b"after %d" % i) == i
        assert tight.address not in writer.metadata.segments[-1].ensemble
        assert writer.ensemble_changes >= 1
        await writer.close()
        reader = await client.open(writer.ledger_id)
        payloads = await reader.read_range(0, 99)
        assert payloads == [b"before %d" % i for i in range(50)] + [b"after %d" % i for i in range(50, 100)]

        # space comes back: the node is writable again and placement may use it
        await tight.free()
        assert (await client.create(4, 3, 2)).metadata.segments[0].ensemble
    finally:
        await client.close()
