"""A managed log whose add fails fails the appends waiting for a roll: they were made
after it, and stored in the next ledger they would come before the producer's resend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from coordination.clock import ManualClock
from gateway.broker.log_state import LogConfig, LogError
from gateway.broker.managed_log import ManagedLog
from storage.errors import StorageError
from storage.formats.positions import Position

pytestmark = pytest.mark.unit


class HeldWriter:
    """A ledger writer whose one add is answered when the test says so."""

    ledger_id = 7
    error: StorageError | None = None

    def __init__(self) -> None:
        self.done: Callable[[asyncio.Future[int]], None] | None = None

    def append_nowait(self, payload: bytes, done: Callable[[asyncio.Future[int]], None]) -> None:
        self.done = done


async def test_a_failed_add_fails_the_appends_waiting_for_a_roll() -> None:
    loop = asyncio.get_running_loop()
    nothing: Any = None  # no etcd, no storage nodes: the add is answered by hand
    log = ManagedLog("persistent/public/default/t", nothing, nothing, ManualClock(0), LogConfig())
    writer = HeldWriter()
    first: asyncio.Future[Position] = loop.create_future()
    log.write_to(writer, b"seq 25", 1, first)  # type: ignore[arg-type]
    later: asyncio.Future[Position] = loop.create_future()
    log._waiting.append((b"seq 26", 1, later))  # queued behind it, for a roll

    failed: asyncio.Future[int] = loop.create_future()
    failed.set_exception(StorageError("no writable node can replace"))
    assert writer.done is not None
    writer.done(failed)

    with pytest.raises(StorageError):
        first.result()
    with pytest.raises(LogError, match="an earlier append failed"):
        later.result()  # never appended after the failed add
    assert log._waiting == []
