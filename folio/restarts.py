"""When ``folio up`` restarts a child that exited: back-off that grows while it keeps dying.

Owns: ``RestartPolicy`` (pauses) and ``Restarts`` (one child's history), pure:
time comes in as ``now_ms``.
Rule: the first exit after the child has run ``stable_ms`` is restarted at once;
each further exit within ``stable_ms`` of its start doubles the pause, from
``initial_ms`` up to ``max_ms`` - a child that cannot start (a taken port, a bad
data dir) does not spin, and one that crashed once comes back without delay.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    initial_ms: int = 500
    max_ms: int = 30_000
    stable_ms: int = 60_000


class Restarts:
    """The restart history of one child."""

    def __init__(self, policy: RestartPolicy, started_ms: int) -> None:
        self.policy = policy
        self.started_ms = started_ms
        self.quick_exits = 0  # exits in a row, each within stable_ms of its start
        self.due_ms: int | None = None  # a restart is scheduled for then

    def exited(self, now_ms: int) -> int:
        """The child exited at ``now_ms``: schedule its restart; returns the pause (ms)."""
        if now_ms - self.started_ms >= self.policy.stable_ms:
            self.quick_exits = 0
        pause = 0 if self.quick_exits == 0 else self.policy.initial_ms * 2 ** (self.quick_exits - 1)
        pause = min(pause, self.policy.max_ms)
        self.quick_exits += 1
        self.due_ms = now_ms + pause
        return pause

    def due(self, now_ms: int) -> bool:
        return self.due_ms is not None and now_ms >= self.due_ms

    def restarted(self, now_ms: int) -> None:
        self.started_ms = now_ms
        self.due_ms = None
