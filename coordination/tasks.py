"""Stopping a background task (asyncio shell).

Owns: ``cancel_and_wait``. Rule: a task that is stopped is cancelled and then
awaited, so it has ended (its ``finally`` blocks ran) before the caller goes
on; its cancellation is swallowed, any other error it ended with propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (None: nothing to stop) and wait until it has ended."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
