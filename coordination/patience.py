"""Waiting for etcd instead of dying: capped exponential back-off and an outage log.

Owns: ``Backoff`` (pure: the pause before retry *n*), ``Outage`` (pure state of
one outage: says when it starts and when it ends, once each) and ``patiently``
(asyncio shell: retry an etcd call until it answers).
Rule: a Folio process that needs etcd (a storage node, a gateway, the auditor)
waits for it, with pauses growing from ``initial_s`` to ``max_s``, and logs one
warning when an outage starts and one line when etcd answers again - no
traceback, no exit. Only ``CoordinationError`` (etcd unreachable, timed out,
lease gone) is waited out; anything else is a bug and propagates.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from coordination.errors import CoordinationError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Backoff:
    initial_s: float = 0.2
    max_s: float = 5.0
    factor: float = 2.0

    def delay_s(self, failures: int) -> float:
        """The pause after ``failures`` consecutive failures (1, 2, ...)."""
        return min(self.max_s, self.initial_s * self.factor ** max(0, failures - 1))


class Outage:
    """One component's view of etcd: ``failed`` on every failure, ``answered`` on
    every success; each logs only at the edges (start and end of an outage)."""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self.log = log
        self.what = what
        self.failures = 0
        self._since = 0.0

    def failed(self, exc: BaseException) -> int:
        """Count a failure; returns the consecutive failures so far."""
        if self.failures == 0:
            self._since = time.monotonic()
            self.log.warning(
                "%s: etcd unavailable (%s); waiting for it, retrying with back-off", self.what, exc
            )
        self.failures += 1
        return self.failures

    def answered(self) -> None:
        if self.failures:
            waited = time.monotonic() - self._since
            self.log.warning(
                "%s: etcd answers again (after %.1f s, %d retries)", self.what, waited, self.failures
            )
        self.failures = 0


async def patiently(
    what: str,
    attempt: Callable[[], Awaitable[T]],
    log: logging.Logger,
    backoff: Backoff | None = None,
) -> T:
    """``await attempt()`` until it does not raise ``CoordinationError``."""
    pauses = backoff or Backoff()
    outage = Outage(log, what)
    while True:
        try:
            result = await attempt()
        except CoordinationError as exc:
            await asyncio.sleep(pauses.delay_s(outage.failed(exc)))
            continue
        outage.answered()
        return result
