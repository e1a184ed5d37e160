"""``ThreadLeaseSession``: a lease kept alive by a thread of its own, whatever the event loop does.

Owns: the keepalive thread of one lease and its blocking etcd channel
(``EtcdRefresher``), separate from the asyncio store the rest of the process
uses. Rules:
- the decisions are the same pure ones as ``LeaseSession`` (``lease.decide``):
  refresh every ttl/3, count the lease from the *send* of the last refresh that
  succeeded, lost at ``confirmed + ttl - margin``;
- the thread is the only writer of the keepalive state; the event loop only
  reads it (``valid_until_ms``) and learns of a loss through ``lost``, set with
  ``call_soon_threadsafe``; ``is_valid`` sees a loss at once, before the event
  loop runs again;
- so delivery load that keeps the event loop busy for seconds does not cost
  the process its lease - but a loop that is not running at all (hung, not
  busy) must not hold ownership for ever: the loop stamps a heartbeat every
  ``HEARTBEAT_S``; when the stamp is older than ``stall_limit_ms`` the thread
  stops refreshing, and the lease runs out as if the process were gone.
  A paused process (SIGSTOP) stops every thread, so it loses its lease as before;
- a run of failed keepalives (etcd away) is logged once, at its first failure;
- keepalives start on the endpoint that answered the lease grant (with several
  etcd members, the first one listed may be cut off from the quorum, and one
  keepalive left unanswered there lasts until the lease's local deadline).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

import grpc  # type: ignore[import-untyped]
from aetcd import rpc

from coordination import lease as policy_core
from coordination.clock import Clock
from coordination.errors import CoordinationError, LeaseLost, Unavailable
from coordination.etcd_store import EtcdStore
from coordination.lease import KeepalivePolicy
from coordination.session import LeaseSession
from coordination.store import MetadataStore

log = logging.getLogger(__name__)

HEARTBEAT_S = 0.5
STALL_LIMIT_MS = 30_000  # the loop has not run for this long: hung, not busy
JOIN_S = 5.0


class EtcdRefresher:
    """Blocking lease keepalives over a gRPC channel of its own (for a thread)."""

    def __init__(self, endpoints: Sequence[tuple[str, int]]) -> None:
        self._endpoints = list(endpoints)
        self._index = 0
        self._channel: grpc.Channel | None = None
        self._stub: Any = None

    def prefer(self, endpoint: str) -> None:
        """Talk to ``endpoint`` ("host:port") first: the one the process's store just
        reached, rather than a member that may be cut off from the quorum."""
        for index, (host, port) in enumerate(self._endpoints):
            if f"{host}:{port}" == endpoint and index != self._index:
                self.close()
                self._index = index

    def _connect(self) -> Any:
        if self._stub is None:
            host, port = self._endpoints[self._index]
            self._channel = grpc.insecure_channel(f"{host}:{port}")
            self._stub = rpc.LeaseStub(self._channel)
        return self._stub

    def refresh(self, lease_id: int, timeout_s: float) -> None:
        """One keepalive; raises ``LeaseLost`` when etcd says the lease is gone and
        ``Unavailable`` when no answer came in ``timeout_s``."""
        stub = self._connect()
        call = stub.LeaseKeepAlive(iter([rpc.LeaseKeepAliveRequest(ID=lease_id)]), timeout=timeout_s)
        try:
            reply = next(call)
        except StopIteration:
            raise Unavailable("etcd closed the keepalive stream without an answer") from None
        except grpc.RpcError as exc:
            self.close()
            self._index = (self._index + 1) % len(self._endpoints)
            raise Unavailable(f"lease keepalive failed: {exc.code()}") from None
        finally:
            call.cancel()
        if int(reply.TTL) <= 0:
            raise LeaseLost(f"lease {lease_id:x} expired or revoked")

    def close(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            channel.close()


UNSAFE_FOREVER_MS = 2**62  # the local deadline of a lease kept by --unsafe-keep-lease-on-loss


class ThreadLeaseSession(LeaseSession):
    """A ``LeaseSession`` whose keepalives run on a thread with its own etcd channel."""

    # CONTROL TESTS ONLY (gateway ``--unsafe-keep-lease-on-loss``): a lost lease is taken
    # as refreshed, so its holder never steps down - the zombie the fault suite must catch
    unsafe_ignore_loss: ClassVar[bool] = False

    def __init__(
        self,
        store: MetadataStore,
        ttl_s: int,
        refresher: EtcdRefresher,
        *,
        clock: Clock | None = None,
        policy: KeepalivePolicy | None = None,
        stall_limit_ms: int = STALL_LIMIT_MS,
    ) -> None:
        super().__init__(store, ttl_s, clock=clock, policy=policy)
        self.refresher = refresher
        self.stall_limit_ms = stall_limit_ms
        self._lost_now = False  # written by the thread, read by the loop: no wait for ``lost``
        self._stop = threading.Event()
        self._poke = threading.Event()
        self._lock = threading.Lock()  # guards _force and the refresh waiters
        self._thread: threading.Thread | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._heartbeat_ms = 0
        self._beat: asyncio.TimerHandle | None = None

    async def start(self) -> ThreadLeaseSession:
        if self._lease_id is not None:
            return self
        sent_at = self.clock.now_ms()
        self._lease_id = await self.store.grant_lease(self.ttl_s)
        self._state = policy_core.started(sent_at)
        if isinstance(self.store, EtcdStore):  # keepalives go where the grant was answered
            self.refresher.prefer(self.store.endpoint)
        self._event_loop = asyncio.get_running_loop()
        self._heartbeat()
        self._thread = threading.Thread(
            target=self._run_thread, name=f"lease-{self._lease_id:x}", daemon=True
        )
        self._thread.start()
        return self

    def _heartbeat(self) -> None:
        self._heartbeat_ms = self.clock.now_ms()
        assert self._event_loop is not None
        self._beat = self._event_loop.call_later(HEARTBEAT_S, self._heartbeat)

    def valid_until_ms(self) -> int:
        if self._lost_now:
            return 0
        # the zombie of the controls: its local deadline never passes either (else it steps
        # down in the moment between that deadline and the thread's next "refresh")
        return UNSAFE_FOREVER_MS if self.unsafe_ignore_loss else super().valid_until_ms()

    def is_valid(self, now_ms: int | None = None) -> bool:
        return not self._lost_now and (self.unsafe_ignore_loss or super().is_valid(now_ms))

    async def refresh_now(self) -> None:
        if self.lost.is_set() or self._lost_now or self._thread is None or not self._thread.is_alive():
            raise LeaseLost(self.lost_reason or "session not running")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._refresh_waiters.append(waiter)
            self._force = True
        self._poke.set()
        await waiter
        if self.lost.is_set():
            raise LeaseLost(self.lost_reason)

    async def close(self, revoke: bool = True) -> None:
        self._stop.set()
        self._poke.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.to_thread(thread.join, JOIN_S)
        if self._beat is not None:
            self._beat.cancel()
        self.refresher.close()
        self._lost_now = True
        self._mark_lost("session closed")
        if revoke and self._lease_id is not None:
            with contextlib.suppress(CoordinationError):
                await self.store.revoke_lease(self._lease_id)

    # -- the keepalive thread ---------------------------------------------------------------

    def _to_loop(self, callback: Any, *args: Any) -> None:
        assert self._event_loop is not None
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is left to tell
            self._event_loop.call_soon_threadsafe(callback, *args)

    def _settle_waiters(self) -> None:
        with self._lock:
            waiters, self._refresh_waiters = self._refresh_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _run_thread(self) -> None:
        try:
            self._thread_loop()
        except Exception as exc:  # a bug must not leave holders believing in the lease
            log.exception("lease %x keepalive thread failed", self.lease_id)
            self._lost_now = True
            self._to_loop(self._mark_lost, f"keepalive thread failed: {exc!r}")

    def _thread_loop(self) -> None:
        assert self._state is not None
        while not self._stop.is_set():
            now = self.clock.now_ms()
            with self._lock:
                force, self._force = self._force, False
            action = policy_core.decide(self.policy, self._state, now, force=force)
            if isinstance(action, policy_core.Lost) and self.unsafe_ignore_loss:
                log.warning(
                    "lease %x lost (%s): IGNORED (--unsafe-keep-lease-on-loss)", self.lease_id, action.reason
                )
                self._state = policy_core.on_refreshed(self._state, now)
                self._poke.wait(0.5)
                continue
            if isinstance(action, policy_core.Lost):
                log.warning("lease %x lost: %s", self.lease_id, action.reason)
                self._lost_now = True
                self._to_loop(self._mark_lost, action.reason)
                return
            if isinstance(action, policy_core.Sleep):
                self._poke.wait((action.until_ms - now) / 1000)
                self._poke.clear()
                continue
            stalled_ms = now - self._heartbeat_ms
            if stalled_ms > self.stall_limit_ms:
                log.warning(
                    "lease %x not refreshed: the event loop has not run for %d ms", self.lease_id, stalled_ms
                )
                self._state = policy_core.on_failed(self._state, now)
            else:
                try:
                    self.refresher.refresh(self.lease_id, max(action.deadline_ms - now, 1) / 1000)
                    self._state = policy_core.on_refreshed(self._state, now)
                    self.keepalives += 1
                except LeaseLost:
                    self._state = policy_core.on_gone(self._state)
                except CoordinationError as exc:
                    if self._state.failed_at_ms is None:  # the first of a run of failures only
                        log.info("lease %x keepalive failed: %r; retrying", self.lease_id, exc)
                    self._state = policy_core.on_failed(self._state, self.clock.now_ms())
            self._to_loop(self._settle_waiters)


def lease_session(store: MetadataStore, ttl_s: int) -> LeaseSession:
    """The session a busy process should hold: kept by a thread over etcd, the asyncio
    one over any other store (the in-memory store of simulations)."""
    if isinstance(store, EtcdStore):
        return ThreadLeaseSession(store, ttl_s, EtcdRefresher(store.endpoints))
    return LeaseSession(store, ttl_s)
