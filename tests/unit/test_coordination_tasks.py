"""Stopping a background task: cancelled, awaited to its end, other errors kept (coordination.tasks)."""

from __future__ import annotations

import asyncio

import pytest

from coordination.tasks import BackgroundTask, cancel_and_wait

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


async def test_a_background_task_runs_once_until_closed_and_can_start_again() -> None:
    runs: list[int] = []
    ended: list[bool] = []

    async def loop() -> None:
        runs.append(len(runs))
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append(True)

    background = BackgroundTask("a-loop")
    background.start(loop)
    background.start(loop)  # running already: no second task
    await asyncio.sleep(0)
    assert runs == [0]
    assert [t.get_name() for t in asyncio.all_tasks() if t.get_name() == "a-loop"] == ["a-loop"]
    await background.close()
    assert ended == [True]
    await background.close()  # nothing left to stop
    background.start(loop)
    await asyncio.sleep(0)
    assert runs == [0, 1]
    await background.close()
    assert ended == [True, True]
