"""Stopping a background task: cancelled, awaited to its end, other errors kept (coordination.tasks)."""

from __future__ import annotations

import asyncio

import pytest

from coordination.tasks import cancel_and_wait

pytestmark = pytest.mark.unit


async def test_a_stopped_task_has_ended_and_ran_its_finally() -> None:
    cleaned: list[bool] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0)  # clean-up that itself awaits
            cleaned.append(True)

    task = asyncio.get_running_loop().create_task(forever())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.done() and cleaned == [True]
    await cancel_and_wait(None)  # nothing to stop


async def test_an_error_the_task_ended_with_propagates() -> None:
    async def broken() -> None:
        raise RuntimeError("bug")

    task = asyncio.get_running_loop().create_task(broken())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="bug"):
        await cancel_and_wait(task)
