"""Push subscriptions (webhooks): the decisions of pushing (pure).

Owns: ``Backoff`` (when the next POST of a pusher may go after failures),
``take_batch`` (which delivered messages one POST carries), ``attempt_outcome``
(what an HTTP answer means) and ``plan`` (which pushers a gateway starts and
stops, given the webhooks stored and those it runs). Rules (docs/compatibility.md §7
row 12; as Google Pub/Sub push subscriptions):
- a 2xx answer acknowledges every message of the POST; anything else (another
  status, a timeout, no connection) is a failure;
- a failed POST is sent again, the same messages in the same order, after a
  back-off that starts at ``min_ms`` and doubles, capped at ``max_ms``; a success
  resets it. So order is kept (one POST in flight, Exclusive/Failover) and a
  dead endpoint is not hammered;
- after ``max_attempts`` failed attempts (0: never) the messages go to the
  dead-letter topic and are acknowledged;
- a POST carries at most ``max_messages`` messages and ``max_bytes`` payload
  bytes, but always at least one message;
- a gateway runs a pusher for exactly the stored webhooks of the topics it owns;
  a stored webhook whose settings changed (another etcd revision) is restarted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import TypeVar

T = TypeVar("T")
K = TypeVar("K")

POST_BYTES_MAX = 4 * 1024 * 1024  # payload bytes of one POST (a single larger message still goes)


class Backoff:
    """Exponential back-off of one pusher (times in ms of one clock)."""

    def __init__(self, min_ms: int, max_ms: int) -> None:
        assert min_ms > 0 and max_ms > 0  # max_ms caps every delay, even below min_ms
        self.min_ms = min_ms
        self.max_ms = max_ms
        self.failures = 0  # consecutive
        self.not_before_ms = 0

    def on_failure(self, now_ms: int) -> int:
        """A POST failed at ``now_ms``: the delay before the next one (ms)."""
        delay = min(self.max_ms, self.min_ms << min(self.failures, 40))
        self.failures += 1
        self.not_before_ms = now_ms + delay
        return delay

    def on_success(self) -> None:
        self.failures = 0
        self.not_before_ms = 0

    def wait_ms(self, now_ms: int) -> int:
        """How long to wait before the next POST."""
        return max(0, self.not_before_ms - now_ms)


def take_batch(buffer: deque[T], size_of: Callable[[T], int], max_messages: int, max_bytes: int) -> list[T]:
    """Pop from ``buffer`` the messages of the next POST, in order."""
    batch: list[T] = []
    size = 0
    while buffer and len(batch) < max_messages:
        n = size_of(buffer[0])
        if batch and size + n > max_bytes:
            break
        batch.append(buffer.popleft())
        size += n
    return batch


def attempt_outcome(status: int | None) -> bool:
    """True when an answer with HTTP ``status`` (None: no answer) acknowledges the POST."""
    return status is not None and 200 <= status < 300


def should_dead_letter(attempts: int, max_attempts: int) -> bool:
    """After ``attempts`` failed attempts of a POST: give its messages up to the
    dead-letter topic?"""
    return max_attempts > 0 and attempts >= max_attempts


def plan(stored: Mapping[K, int], running: Mapping[K, int]) -> tuple[list[K], list[K]]:
    """(start, stop): the keys to start (stored for an owned topic, not running or at an
    older revision) and to stop (running, but not stored any more or at another revision).
    ``stored`` and ``running`` map a webhook key to the etcd revision of its settings."""
    stop = [key for key, revision in running.items() if stored.get(key) != revision]
    start = [key for key, revision in stored.items() if running.get(key) != revision]
    return start, stop
