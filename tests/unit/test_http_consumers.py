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
