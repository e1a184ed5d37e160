"""A gateway's tenure in the cluster: join, step down when the lease is lost, rejoin (asyncio shell).

Owns: the sequence that puts a gateway process into the cluster under an etcd
lease - grant the lease, register its membership, take part in bundle ownership
and in the load-manager election - and runs it again, in the same process, each
time that lease is lost. Rules (docs/architecture.md §6):

- every etcd step is retried with patience (``coordination.patience``): a gateway
  started while etcd is away, or meeting an outage halfway through starting,
  waits and says so once in its log; it never exits for want of etcd;
- a lost lease (etcd away past the lease's local deadline, the process paused,
  etcd saying it expired) makes the gateway step down at once, without waiting
  for etcd: every bundle is lost together (``OwnershipManager``), so every topic
  is dropped and its producers and consumers are closed with 4503 (reconnect)
  as an unload does, and loads in flight are discarded. From the local deadline
  on no publish is acknowledged: each write path entry and each stored entry's
  acknowledgement checks the topic's ownership epoch, which ends with the lease.
  Requests meanwhile get 503 (retryable) or are relayed to another gateway that
  owns the topic;
- then it waits for etcd, takes a new lease, revokes the old one (its membership
  and bundle keys, which etcd may have kept alive across its own restart, go at
  once), registers again and rejoins; the load manager assigns it bundles as it
  would to any gateway that joins.

Why living on is safe (no zombie owner): a lease is never trusted as mutual
exclusion. A topic served after the rejoin is loaded anew under a new ownership
epoch (a newer bundle-key revision); loading opens its log with recovery, which
fences at the storage nodes the ledger any earlier owner - this process's own
earlier tenure included - was writing. An instance of an ended epoch never
serves again (``BrokerService.serves`` compares epochs), and its adds are
refused as fenced by the storage nodes once anyone recovered its ledger. Staying
up changes which process may own a bundle next, not the rule that protects data.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from coordination.errors import CoordinationError
from coordination.patience import Backoff, patiently
from coordination.session import LeaseSession
from coordination.session_thread import lease_session
from coordination.store import MetadataStore
from coordination.tasks import cancel_and_wait

log = logging.getLogger("folio.gateway")

T = TypeVar("T")

# etcd answering again is what a stepped-down gateway waits for: look often
REJOIN_BACKOFF = Backoff(initial_s=0.2, max_s=1.0)


async def _start(session: LeaseSession) -> LeaseSession:
    return await session.start()


class SessionEnded(Exception):
    """The lease a join was made under was lost before the join finished."""


Prepare = Callable[[], Awaitable[object]]  # a step before the first join (no lease needed)
Step = Callable[[LeaseSession], Awaitable[object]]  # a step of every join, under its lease


class Tenure:
    """``await join()`` at start; afterwards it rejoins by itself after every lost lease.

    It holds the gateway's current lease ``session``; ``prepare`` runs once before the
    first join, and ``steps`` (membership, ownership, load-manager candidacy) run in
    order on every join, each under the lease it is given."""

    def __init__(
        self,
        store: MetadataStore,
        session: LeaseSession,
        gateway_id: str,
        lease_ttl_s: int,
        *,
        prepare: Sequence[Prepare],
        steps: Sequence[Step],
    ) -> None:
        self.store = store
        self.session = session
        self.lease_ttl_s = lease_ttl_s
        self.what = f"gateway {gateway_id}"
        self.rejoins = 0  # leases lost and replaced so far
        self.last_outage_s = 0.0  # from the last lease lost to the rejoin
        self._prepare = tuple(prepare)
        self._steps = tuple(steps)
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    async def join(self) -> None:
        """Join the cluster under the first session; then keep rejoining."""
        for prepare in self._prepare:
            await patiently(self.what, prepare, log, REJOIN_BACKOFF)
        await self._enter(self.session)
        self._task = asyncio.get_running_loop().create_task(self._keep(), name="gateway-tenure")

    async def close(self) -> None:
        self._closing = True
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _keep(self) -> None:
        while not self._closing:
            session = self.session
            await session.lost.wait()
            if self._closing:
                return
            began = time.monotonic()
            log.warning(
                "%s lost its lease (%s): stepped down - its topics are dropped and it serves "
                "none until it rejoins",
                self.what,
                session.lost_reason,
            )
            try:
                await self._enter(await self._renew(session))
            except Exception:  # e.g. our id held under a lease not ours: end this lease, try again
                log.exception("%s: rejoining failed; trying again", self.what)
                await self.session.close(revoke=True)
                await asyncio.sleep(REJOIN_BACKOFF.max_s)
                continue
            self.rejoins += 1
            self.last_outage_s = time.monotonic() - began
            log.warning(
                "%s rejoined the cluster with lease %x, %.1f s after losing the old one",
                self.what,
                self.session.lease_id,
                self.last_outage_s,
            )

    async def _enter(self, session: LeaseSession) -> None:
        """Lease, membership, ownership, candidacy - over again under a new lease
        whenever the current one is lost before the join is done."""
        while True:
            try:
                await self._step(session, _start)
                for step in self._steps:
                    await self._step(session, step)
                return
            except SessionEnded:
                session = await self._renew(session)

    async def _step(self, session: LeaseSession, attempt: Callable[[LeaseSession], Awaitable[T]]) -> T:
        """``attempt(session)`` until etcd answers; ``SessionEnded`` once the lease is lost."""

        async def under_lease() -> T:
            if session.lost.is_set():
                raise SessionEnded(session.lost_reason)
            return await attempt(session)

        return await patiently(self.what, under_lease, log, REJOIN_BACKOFF)

    async def _renew(self, old: LeaseSession) -> LeaseSession:
        """A started session on a new lease (waiting for etcd as long as it takes); the
        old lease revoked, so the keys held under it go now rather than at its expiry."""
        await old.close(revoke=False)
        new = lease_session(self.store, self.lease_ttl_s)
        await patiently(self.what, new.start, log, REJOIN_BACKOFF)
        with contextlib.suppress(RuntimeError, CoordinationError):  # never granted, or gone already
            await self.store.revoke_lease(old.lease_id)
        self.session = new
        return new
