"""The gateway's budget for deliveries its consumers have not taken yet (asyncio shell).

Owns: which consumer sinks (WebSocket consumer sessions) hold how many
bytes, the running total, pausing and resuming deliveries to a sink, and
closing slow ones - by the rules of ``gateway.broker.pending_rules``. A sink
reports after every delivery (``sent``); every sink still holding bytes (or
paused) is looked at again every ``POLL_S`` - a socket drains without telling
anyone - so it frames what it kept unframed (``refill``), the total follows
what was written since, paused sinks resume,
and stalled ones are closed while the gateway is over its budget. Counters
for ``/metrics``: bytes held, sinks paused, slow-consumer closes by reason
(``consumer``: one sink far over its limit; ``budget``: the gateway's budget).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from coordination.clock import Clock, SystemClock
from gateway.broker.pending_rules import Holding, PendingLimits, Step, consumer_step, over_budget

log = logging.getLogger(__name__)

POLL_S = 0.05


class Throttled(Protocol):
    """A consumer sink the budget can measure, pause and close."""

    def pending_bytes(self) -> int: ...

    def set_paused(self, paused: bool) -> None: ...

    def close_slow(self, reason: str) -> None: ...

    def refill(self) -> None:
        """Frame deliveries kept unframed while the socket was backed up, if it took them."""
        ...


class DeliveryBudget:
    def __init__(self, limits: PendingLimits | None = None, clock: Clock | None = None) -> None:
        self.limits = limits or PendingLimits()
        self.clock: Clock = clock or SystemClock()
        self._holdings: dict[Throttled, Holding] = {}  # sinks holding bytes, paused or closing
        self.total = 0
        self.rounds = 0  # deliveries reported so far
        self.closed_slow = {"consumer": 0, "budget": 0}
        self._poller: asyncio.TimerHandle | None = None

    @property
    def paused(self) -> int:
        return sum(1 for h in self._holdings.values() if h.paused and not h.closing)

    def sent(self, sink: Throttled) -> None:
        """``sink`` took a delivery: measure it, pause or close it if it must."""
        self.rounds += 1
        self._measure(sink, self.clock.now_ms())
        self._poll_later()

    def forget(self, sink: Throttled) -> None:
        """``sink`` is gone: it no longer counts."""
        holding = self._holdings.pop(sink, None)
        if holding is not None:
            self.total -= holding.bytes

    def _measure(self, sink: Throttled, now: int) -> None:
        pending = sink.pending_bytes()
        holding = self._holdings.get(sink)
        if holding is None:
            if not pending:
                return
            holding = self._holdings[sink] = Holding(progress_ms=now)
        self.total += pending - holding.bytes
        holding.measured(pending, now)
        step = consumer_step(holding, self.total, len(self._holdings), self.limits)
        if step is Step.PAUSE:
            holding.paused = True
            sink.set_paused(True)
        elif step is Step.RESUME:
            holding.paused = False
            sink.set_paused(False)
        elif step is Step.CLOSE:
            limit = self.limits.close_bytes
            self._close(
                sink, holding, "consumer", f"slow consumer: {pending} bytes not taken (limit {limit})"
            )
        if not pending and not holding.paused and not holding.closing:
            del self._holdings[sink]

    def _close(self, sink: Throttled, holding: Holding, why: str, reason: str) -> None:
        holding.closing = True
        self.closed_slow[why] += 1
        log.info("closing %s", reason)
        sink.close_slow(reason)

    def _poll_later(self) -> None:
        if self._poller is None and self._holdings:
            self._poller = asyncio.get_running_loop().call_later(POLL_S, self._poll)

    def _poll(self) -> None:
        self._poller = None
        now = self.clock.now_ms()
        for sink in list(self._holdings):
            if sink in self._holdings:
                sink.refill()
                self._measure(sink, now)
        budget = self.limits.budget_bytes
        for sink in over_budget(self._holdings, self.total, self.limits, now):
            holding = self._holdings[sink]
            reason = (
                f"slow consumer: the gateway's delivery budget ({budget} bytes) is full, {holding.bytes} here"
            )
            self._close(sink, holding, "budget", reason)
        self._poll_later()
