"""Failed-authentication throttling and per-role session counts (pure).

Owns: ``FailureLimiter`` (per client address: after ``max_failures`` failed
authentications within ``window_s`` every request from that address is refused
until the window has passed) and ``SessionCounts`` (open long-lived sessions per
role, bounded by ``per_role``). Rules: time comes in as ``now_s``; memory is
bounded (``KEYS_MAX`` addresses, the oldest forgotten first); a refusal is a 429
at the edge.
"""

from __future__ import annotations

from collections import OrderedDict, deque

KEYS_MAX = 10_000


class FailureLimiter:
    def __init__(self, max_failures: int = 20, window_s: float = 60.0) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, key: str, now_s: float) -> deque[float] | None:
        times = self._failures.get(key)
        if times is None:
            return None
        while times and times[0] <= now_s - self.window_s:
            times.popleft()
        if not times:
            del self._failures[key]
            return None
        return times

    def blocked(self, key: str, now_s: float) -> bool:
        times = self._recent(key, now_s)
        return times is not None and len(times) >= self.max_failures

    def failed(self, key: str, now_s: float) -> None:
        times = self._recent(key, now_s)
        if times is None:
            times = self._failures[key] = deque()
        times.append(now_s)
        if len(times) > self.max_failures:
            times.popleft()
        self._failures.move_to_end(key)
        while len(self._failures) > KEYS_MAX:
            self._failures.popitem(last=False)


class SessionCounts:
    def __init__(self, per_role: int) -> None:
        self.per_role = per_role
        self._open: dict[str, int] = {}

    def open(self, role: str) -> bool:
        """Count a new session of ``role``; False (and not counted) beyond the bound."""
        count = self._open.get(role, 0)
        if count >= self.per_role:
            return False
        self._open[role] = count + 1
        return True

    def close(self, role: str) -> None:
        left = self._open.get(role, 0) - 1
        if left > 0:
            self._open[role] = left
        else:
            self._open.pop(role, None)

    def count(self, role: str) -> int:
        return self._open.get(role, 0)
