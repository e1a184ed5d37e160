"""Stopping a background task (asyncio shell).

Owns: ``cancel_and_wait`` and ``BackgroundTask`` (an owner's one named loop,
started at most once). Rule: a task that is stopped is cancelled and then
awaited, so it has ended (its ``finally`` blocks ran) before the caller goes
on; its cancellation is swallowed, any other error it ended with propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (None: nothing to stop) and wait until it has ended."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class BackgroundTask:
    """An owner's one background loop, named ``name``: ``start`` runs it unless it
    runs already; ``close`` stops it (``cancel_and_wait``) and allows a new start."""

    __slots__ = ("_name", "_task")

    def __init__(self, name: str) -> None:
        self._name = name
        self._task: asyncio.Task[None] | None = None

    def start(self, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(run(), name=self._name)

    async def close(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
