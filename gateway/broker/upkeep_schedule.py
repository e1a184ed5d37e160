"""The gateway's upkeep schedule: one timer visits every loaded topic once a second.

Owns: the single task that drives the upkeep of all of a gateway's topics (it
replaced a sleeping task per topic: at 3,000 topics their timers, task steps and
lock-taking trims cost an idle gateway 7 % of a core), and, per visit, the
choice between the upkeep done in place and a task for the upkeep that waits on
I/O. Rules (``Topic`` does the upkeep, under the rules of ``topic_upkeep.py``):
- every ``INTERVAL_MS`` each loaded, open topic is visited once, in one pass on
  the event loop, at one ``now_ms``;
- a topic whose upkeep needs no I/O (``Topic.upkeep_needs_io``: no TTL to apply
  to a subscription, one ledger only - nothing to trim -, no dedup snapshot due)
  gets it in place (``Topic.maintain_in_place``: stats sampled, backlog
  quota checked) - no task, no timer, a few microseconds;
- otherwise the whole ``Topic.maintain_once`` runs in a task of its own
  (``Topic.upkeep_task``), at most one per topic: a topic whose upkeep is still
  running is skipped until it ends, as its own loop once waited for it, and
  ``Topic.close`` cancels it;
- a failed upkeep is logged and tried again at the next visit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from coordination.clock import Clock
from coordination.tasks import BackgroundTask

if TYPE_CHECKING:
    from gateway.broker.topic import Topic

log = logging.getLogger(__name__)

INTERVAL_MS = 1000


class UpkeepSchedule:
    def __init__(
        self, topics: Callable[[], Iterable[Topic]], clock: Clock, interval_ms: int = INTERVAL_MS
    ) -> None:
        self._topics = topics
        self._clock = clock
        self._interval_ms = interval_ms
        self._loop = BackgroundTask("topic-upkeep")

    def start(self) -> None:
        self._loop.start(self._run)

    async def close(self) -> None:
        await self._loop.close()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_ms / 1000)
            self.visit_all(self._clock.now_ms())

    def visit_all(self, now_ms: int) -> int:
        """One pass over the topics; returns how many upkeep tasks it started."""
        started = 0
        for topic in list(self._topics()):
            if topic.closed or topic.log.fenced:
                continue
            running = topic.upkeep_task
            if running is not None and not running.done():
                continue  # still at it: skipped, as its own loop once waited
            try:
                policies = topic.policies
                if topic.upkeep_needs_io(policies):
                    topic.upkeep_task = asyncio.get_running_loop().create_task(_maintain(topic))
                    started += 1
                else:
                    topic.maintain_in_place(policies, now_ms)
            except Exception as exc:
                log.info("topic %s: upkeep failed: %s", topic.name, exc)
        return started


async def _maintain(topic: Topic) -> None:
    try:
        await topic.maintain_once()
    except Exception as exc:
        log.info("topic %s: upkeep failed: %s", topic.name, exc)
