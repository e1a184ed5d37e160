"""``LeaseSession``: one lease kept alive by one keepalive task (asyncio shell over lease.py).

Owns: a granted lease, the task that refreshes it, and the ``lost`` event.
Rule: the keepalive task is the only writer of the keepalive state; decisions
come from ``lease.decide``. Once ``lost`` is set it stays set: the holder must
stop acting under the lease (``valid_until_ms()`` is the local deadline to check
before every action) and open a new session to take part again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import TracebackType

from coordination import lease as policy_core
from coordination.clock import Clock, SystemClock
from coordination.errors import CoordinationError, LeaseLost
from coordination.lease import KeepalivePolicy, KeepaliveState
from coordination.store import MetadataStore

log = logging.getLogger(__name__)


class LeaseSession:
    """Grant a lease on ``start()``, keep it alive, revoke it on ``close()``."""

    def __init__(
        self,
        store: MetadataStore,
        ttl_s: int,
        *,
        clock: Clock | None = None,
        policy: KeepalivePolicy | None = None,
    ) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.clock: Clock = clock or SystemClock()
        self.policy = policy or KeepalivePolicy.for_ttl(ttl_s)
        self.lost = asyncio.Event()
        self.lost_reason = ""
        self.keepalives = 0  # successful refreshes so far
        self._lease_id: int | None = None
        self._state: KeepaliveState | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._force = False
        self._refresh_waiters: list[asyncio.Future[None]] = []

    @property
    def lease_id(self) -> int:
        if self._lease_id is None:
            raise RuntimeError("LeaseSession not started")
        return self._lease_id

    async def start(self) -> LeaseSession:
        if self._lease_id is not None:
            return self
        sent_at = self.clock.now_ms()
        self._lease_id = await self.store.grant_lease(self.ttl_s)
        self._state = policy_core.started(sent_at)
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"lease-{self._lease_id:x}")
        return self

    def valid_until_ms(self) -> int:
        """Local, conservative lease deadline (clock ms); 0 once lost."""
        if self._state is None or self.lost.is_set():
            return 0
        return policy_core.lost_at_ms(self.policy, self._state)

    def is_valid(self, now_ms: int | None = None) -> bool:
        now = self.clock.now_ms() if now_ms is None else now_ms
        return not self.lost.is_set() and now < self.valid_until_ms()

    async def refresh_now(self) -> None:
        """Ask the keepalive task to refresh immediately and wait for that attempt
        (for tests and simulations driving a ManualClock). Raises LeaseLost if lost."""
        if self.lost.is_set() or self._task is None or self._task.done():
            raise LeaseLost(self.lost_reason or "session not running")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._refresh_waiters.append(waiter)
        self._force = True
        self._wake.set()
        await waiter
        if self.lost.is_set():
            raise LeaseLost(self.lost_reason)

    async def close(self, revoke: bool = True) -> None:
        """Stop keepalives; with ``revoke`` also revoke the lease (its keys go at once).
        ``revoke=False`` simulates a crash: the keys stay until the lease expires."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._mark_lost("session closed")
        if revoke and self._lease_id is not None:
            with contextlib.suppress(CoordinationError):
                await self.store.revoke_lease(self._lease_id)

    async def __aenter__(self) -> LeaseSession:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- the keepalive task ---------------------------------------------------------------

    def _mark_lost(self, reason: str) -> None:
        if not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()
        for waiter in self._refresh_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._refresh_waiters.clear()

    async def _run(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not leave holders believing in the lease
            log.exception("lease %x keepalive task failed", self.lease_id)
            self._mark_lost(f"keepalive task failed: {exc!r}")

    async def _loop(self) -> None:
        assert self._state is not None
        while True:
            now = self.clock.now_ms()
            force, self._force = self._force, False
            action = policy_core.decide(self.policy, self._state, now, force=force)
            if isinstance(action, policy_core.Lost):
                log.warning("lease %x lost: %s", self.lease_id, action.reason)
                self._mark_lost(action.reason)
                return
            if isinstance(action, policy_core.Sleep):
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout((action.until_ms - now) / 1000):
                        await self._wake.wait()
                continue
            waiters, self._refresh_waiters = self._refresh_waiters, []
            try:
                async with asyncio.timeout(max(action.deadline_ms - now, 1) / 1000):
                    await self.store.refresh_lease(self.lease_id)
                self._state = policy_core.on_refreshed(self._state, now)
                self.keepalives += 1
            except LeaseLost:
                self._state = policy_core.on_gone(self._state)
            except (CoordinationError, TimeoutError) as exc:
                if self._state.failed_at_ms is None:  # the first of a run of failures only
                    log.info("lease %x keepalive failed: %r; retrying", self.lease_id, exc)
                self._state = policy_core.on_failed(self._state, self.clock.now_ms())
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
