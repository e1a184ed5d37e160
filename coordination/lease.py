"""Lease keepalive policy: when to refresh a lease, and when to stop trusting it (pure).

Owns: the pure decision logic behind ``session.LeaseSession`` (no asyncio, no I/O;
time comes in as ``now_ms`` from a monotonic clock).
Rule: the holder counts its lease from the moment it *sent* the grant or the last
keepalive that succeeded (``confirmed_at_ms``) - never from when the answer came
back - so its local view ends no later than etcd's. It refreshes every
``interval_ms`` (ttl/3), retries every ``retry_ms`` after a failure, and considers
the lease lost at ``confirmed_at + ttl - margin`` without a successful refresh.
Past that point an owner must stop acting (acking, writing) under the lease,
whatever etcd says later: a lease is a liveness hint, fencing is the guard.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

MIN_MARGIN_MS = 100
MIN_RETRY_MS = 50


@dataclass(frozen=True, slots=True)
class KeepalivePolicy:
    ttl_ms: int
    interval_ms: int  # refresh this long after the last confirmed send
    retry_ms: int  # after a failed refresh, try again this soon
    margin_ms: int  # consider the lease lost this long before its earliest expiry

    def __post_init__(self) -> None:
        if not 0 < self.interval_ms < self.ttl_ms - self.margin_ms:
            raise ValueError("need 0 < interval < ttl - margin")
        if self.retry_ms <= 0 or self.margin_ms < 0:
            raise ValueError("retry must be > 0 and margin >= 0")

    @classmethod
    def for_ttl(cls, ttl_s: int) -> KeepalivePolicy:
        """Defaults: refresh every ttl/3, retry every ttl/10, margin max(ttl/10, 100 ms)."""
        if ttl_s < 1:
            raise ValueError("lease ttl must be >= 1 s")
        ttl_ms = ttl_s * 1000
        return cls(
            ttl_ms=ttl_ms,
            interval_ms=ttl_ms // 3,
            retry_ms=max(ttl_ms // 10, MIN_RETRY_MS),
            margin_ms=max(ttl_ms // 10, MIN_MARGIN_MS),
        )


@dataclass(frozen=True, slots=True)
class KeepaliveState:
    confirmed_at_ms: int  # send time of the grant or of the last successful refresh
    failed_at_ms: int | None = None  # time of the last failed refresh, if after confirmed_at
    gone: bool = False  # etcd said the lease does not exist any more


@dataclass(frozen=True, slots=True)
class SendKeepalive:
    """Refresh now; the answer must arrive before ``deadline_ms`` to count."""

    deadline_ms: int


@dataclass(frozen=True, slots=True)
class Sleep:
    until_ms: int


@dataclass(frozen=True, slots=True)
class Lost:
    reason: str


Action = SendKeepalive | Sleep | Lost


def started(now_ms: int) -> KeepaliveState:
    """State right after a grant that was *sent* at ``now_ms``."""
    return KeepaliveState(confirmed_at_ms=now_ms)


def lost_at_ms(policy: KeepalivePolicy, state: KeepaliveState) -> int:
    """Local deadline: past it the lease must be treated as lost."""
    return state.confirmed_at_ms + policy.ttl_ms - policy.margin_ms


def next_keepalive_ms(policy: KeepalivePolicy, state: KeepaliveState) -> int:
    if state.failed_at_ms is not None:
        return state.failed_at_ms + policy.retry_ms
    return state.confirmed_at_ms + policy.interval_ms


def is_lost(policy: KeepalivePolicy, state: KeepaliveState, now_ms: int) -> bool:
    return state.gone or now_ms >= lost_at_ms(policy, state)


def decide(policy: KeepalivePolicy, state: KeepaliveState, now_ms: int, *, force: bool = False) -> Action:
    """What to do at ``now_ms``. ``force`` asks for a refresh now (if still valid)."""
    if state.gone:
        return Lost("lease expired or revoked in the store")
    deadline = lost_at_ms(policy, state)
    if now_ms >= deadline:
        return Lost(f"no successful keepalive within ttl - margin ({policy.ttl_ms - policy.margin_ms} ms)")
    due = next_keepalive_ms(policy, state)
    if force or now_ms >= due:
        return SendKeepalive(deadline_ms=deadline)
    return Sleep(until_ms=min(due, deadline))


def on_refreshed(state: KeepaliveState, sent_at_ms: int) -> KeepaliveState:
    """A refresh sent at ``sent_at_ms`` succeeded."""
    if sent_at_ms < state.confirmed_at_ms:
        return state  # an older refresh answered late: it proves nothing new
    return replace(state, confirmed_at_ms=sent_at_ms, failed_at_ms=None)


def on_failed(state: KeepaliveState, now_ms: int) -> KeepaliveState:
    """A refresh failed (timeout, store unavailable); the lease may still be alive."""
    return replace(state, failed_at_ms=now_ms)


def on_gone(state: KeepaliveState) -> KeepaliveState:
    """The store says the lease no longer exists."""
    return replace(state, gone=True)
