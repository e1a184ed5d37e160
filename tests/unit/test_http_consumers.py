"""HttpConsumers: the table of HTTP consumers (fetch and event streams) of one gateway."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gateway.api.http_consume import HttpConsumer, HttpConsumers

pytestmark = pytest.mark.unit

KEY = ("persistent://public/default/t", "sub", "one")


def consumer() -> HttpConsumer:
    return HttpConsumer(topic=SimpleNamespace(closed=False))  # type: ignore[arg-type]


async def test_a_stream_that_ends_late_does_not_remove_a_newer_consumer_of_its_name() -> None:
    table = HttpConsumers()
    old = consumer()
    table.add(KEY, old)
    table.end_all()  # the old stream's consumer is dropped (its loop has not noticed yet) ...
    assert old.closed and table.get(KEY) is None
    new = consumer()
    table.add(KEY, new)  # ... and a new client takes the name
    assert table.remove(KEY, old) is False  # the old stream's clean-up leaves it alone
    assert table.get(KEY) is new and not new.closed
    assert table.remove(KEY, new) is True and new.closed and table.get(KEY) is None
    await table.close()


async def test_remove_without_a_consumer_drops_whatever_holds_the_name() -> None:
    table = HttpConsumers()
    held: Any = consumer()
    table.add(KEY, held)
    assert table.remove(KEY) is True and held.closed
    assert table.remove(KEY) is False
    await table.close()


class _Sub:
    def __init__(self) -> None:
        self.credit = 0

    def permits(self, consumer_id: int, n: int) -> None:
        self.credit += n


def _delivery(size: int) -> Any:
    return SimpleNamespace(content=SimpleNamespace(payload=b"x" * size))


async def test_credit_stops_at_the_consumer_bytes_bound_and_a_full_budget_refuses_with_429() -> None:
    from gateway.api.http_consume import CONSUMER_HELD_BYTES, HttpHeld
    from gateway.broker.broker_errors import TooManyRequests

    held = HttpHeld(budget=CONSUMER_HELD_BYTES * 3)
    one, two = HttpConsumer(topic=SimpleNamespace(closed=False), held=held), consumer()  # type: ignore[arg-type]
    sub = _Sub()
    one.sub = sub  # type: ignore[assignment]
    assert await one.fetch(10, 0) == [] and sub.credit == 10
    one.deliver([_delivery(CONSUMER_HELD_BYTES)])  # at its bound: no more credit
    one.granted = 0
    got = await one.fetch(0, 0)
    assert got == [] and sub.credit == 10 and held.bytes == CONSUMER_HELD_BYTES
    one.deliver([_delivery(CONSUMER_HELD_BYTES)] * 2)  # the gateway's budget is full now
    assert len(await one.fetch(10, 0)) == 1  # 8 MiB per fetch: one message
    assert held.bytes == 2 * CONSUMER_HELD_BYTES
    two.held = held
    two.sub = sub  # type: ignore[assignment]
    held.bytes = held.budget
    with pytest.raises(TooManyRequests):
        await two.fetch(10, 0)
    assert held.refused == 1
    one.close("removed", "")
    assert one.held_bytes == 0 and held.bytes == held.budget - 2 * CONSUMER_HELD_BYTES
