"""Bytes a consumer may pin in a gateway, and the gateway's budget for all of them (pure).

Owns: the rules on bytes delivered to a consumer and not yet taken by it (a
WebSocket session's frames not yet written to its socket), per consumer and
for the whole gateway; time comes in as ``now_ms``. Rules:
- a consumer holding ``pause_bytes`` or more gets no more deliveries (its
  dispatcher treats it as having no permits) until it is back under half of
  that: overload slows a consumer down, whatever its ``receiverQueueSize``;
- one holding ``close_bytes`` (4 x pause) or more - a delivery overshot the
  pause by far - is closed as a slow consumer (WebSocket 4429);
- all consumers of the gateway together may hold ``budget_bytes``. Once the
  total is over half of it, a consumer holding more than its fair share (the
  budget over the number of consumers holding bytes) is paused as well - early,
  because 1,000 consumers of one hot topic each take a whole dispatch round
  before they are measured again - and resumes once it holds under half its
  share; while the total is over the budget, the largest holders over their share
  that have not taken a byte for ``stall_ms`` are closed as slow consumers
  until the total fits. A consumer that keeps up drains between two looks and
  is never chosen; one already closing is not chosen again (what it holds
  still counts until it is gone).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K")

PAUSE_BYTES = 4 * 1024 * 1024
BUDGET_BYTES = 64 * 1024 * 1024
STALL_MS = 1000


@dataclass(frozen=True, slots=True)
class PendingLimits:
    pause_bytes: int = PAUSE_BYTES  # per consumer: deliveries stop here
    budget_bytes: int = BUDGET_BYTES  # all consumers of the gateway together
    stall_ms: int = STALL_MS  # over budget, a consumer that took nothing this long may be closed

    def __post_init__(self) -> None:
        if self.pause_bytes < 1 or self.budget_bytes < 1 or self.stall_ms < 0:
            raise ValueError("pending byte limits must be >= 1 (stall >= 0)")

    @property
    def close_bytes(self) -> int:
        return 4 * self.pause_bytes


@dataclass(slots=True)
class Holding:
    """What one consumer holds, as last measured."""

    bytes: int = 0
    paused: bool = False
    closing: bool = False
    progress_ms: int = 0  # last time it held nothing, or less than at the look before

    def measured(self, pending: int, now_ms: int) -> None:
        if pending == 0 or pending < self.bytes:
            self.progress_ms = now_ms
        self.bytes = pending


class Step(enum.Enum):
    NONE = "none"
    PAUSE = "pause"  # stop deliveries to this consumer
    RESUME = "resume"  # deliveries may go on
    CLOSE = "close"  # slow consumer: close it (4429)


def fair_share(limits: PendingLimits, holders: int) -> int:
    return limits.budget_bytes // max(1, holders)


def consumer_step(holding: Holding, total: int, holders: int, limits: PendingLimits) -> Step:
    """What one consumer needs now, the gateway's consumers holding ``total`` bytes."""
    if holding.closing:
        return Step.NONE
    held = holding.bytes
    if held >= limits.close_bytes:
        return Step.CLOSE
    fair = fair_share(limits, holders)
    if not holding.paused:
        if held >= limits.pause_bytes or (total > limits.budget_bytes // 2 and held > fair):
            return Step.PAUSE
        return Step.NONE
    if held <= min(limits.pause_bytes // 2, fair // 2):
        return Step.RESUME
    return Step.NONE


def over_budget(holdings: Mapping[K, Holding], total: int, limits: PendingLimits, now_ms: int) -> list[K]:
    """Stalled consumers to close, largest holders first, so the rest fit the budget."""
    excess = total - limits.budget_bytes
    if excess <= 0:
        return []
    fair = fair_share(limits, len(holdings))
    candidates = [
        (key, h.bytes)
        for key, h in holdings.items()
        if not h.closing and h.bytes > fair and now_ms - h.progress_ms >= limits.stall_ms
    ]
    victims: list[K] = []
    for key, size in sorted(candidates, key=lambda kv: kv[1], reverse=True):
        if excess <= 0:
            break
        victims.append(key)
        excess -= size
    return victims
