"""This gateway's storage reach, probed and acted on (asyncio shell).

Owns: the probe loop - every ``interval_s`` it asks how many live, writable
storage nodes answer (``StorageProbe``), folds that into ``storage_reach``'s
state, publishes the ``storage_ok`` flag in the gateway's registration when it
changes, and carries out ``storage_reach.decide``: on ``HAND_OVER`` it stops
taking bundles and unloads the ones it owns (a gateway that reaches a write quorum
takes them), on ``SERVE`` it takes bundles again. Rule (docs/reliability.md §6):
the decisions are ``storage_reach``'s; a round in which etcd does not answer decides
nothing (a gateway cut from etcd is handled by its lease, not here).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

from coordination.clock import Clock, SystemClock
from coordination.errors import CoordinationError
from coordination.tasks import BackgroundTask
from gateway.ownership.storage_reach import (
    ReachDecision,
    ReachPolicy,
    ReachState,
    decide,
    observe,
    storage_ok,
)
from storage.errors import StorageError

log = logging.getLogger(__name__)

PROBE_INTERVAL_S = 1.0
PROBE_TIMEOUT_MS = 500  # a node that does not answer a node-info request this fast is not reached


class StorageProbe(Protocol):
    async def writable_answering(self, timeout_ms: int) -> int: ...


class Membership(Protocol):
    """The gateway's registration: publishes its flag, reads its peers'."""

    async def set_storage_ok(self, ok: bool) -> None: ...

    def peers_storage_ok(self) -> list[bool]: ...


class Bundles(Protocol):
    """The gateway's bundle ownership."""

    accepting: bool

    def owned_count(self) -> int: ...

    async def hand_over_all(self) -> int: ...


class StorageWatch:
    """``start()`` / ``close()``."""

    def __init__(
        self,
        probe: StorageProbe,
        membership: Membership,
        bundles: Bundles,
        need: Callable[[], int],
        *,
        policy: ReachPolicy | None = None,
        clock: Clock | None = None,
        interval_s: float = PROBE_INTERVAL_S,
    ) -> None:
        self.probe = probe
        self.membership = membership
        self.bundles = bundles
        self.need = need
        self.policy = policy or ReachPolicy()
        self.clock: Clock = clock or SystemClock()
        self.interval_s = interval_s
        self.state = ReachState()
        self.decision = ReachDecision.SERVE
        self.handed_over = 0  # bundles unloaded for lack of storage, since start
        self._published = True
        self._loop = BackgroundTask("storage-watch")

    def start(self) -> None:
        self._loop.start(self._run)

    async def close(self) -> None:
        await self._loop.close()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:  # one round every interval_s, however long a round's probes wait
            await asyncio.sleep(max(0.0, self.interval_s - (loop.time() % self.interval_s)))
            try:
                await self.round()
            except (CoordinationError, StorageError) as exc:
                log.debug("storage watch: round skipped: %r", exc)
            except Exception:  # one bad round must not end the watch
                log.exception("storage watch: round failed")

    async def round(self) -> ReachDecision:
        answered = await self.probe.writable_answering(PROBE_TIMEOUT_MS)
        now = self.clock.now_ms()
        self.state = observe(self.state, answered, self.need(), now, self.policy)
        ok = storage_ok(self.state, now, self.policy)
        if ok != self._published:
            log.warning(
                "gateway storage reach: %s (%d writable nodes answer, a write quorum takes %d)",
                "regained" if ok else "lost",
                answered,
                self.need(),
            )
            await self.membership.set_storage_ok(ok)
            self._published = ok
        decision = decide(self.state, self.membership.peers_storage_ok(), now, self.policy)
        self.decision = decision
        self.bundles.accepting = decision is not ReachDecision.HAND_OVER
        if decision is ReachDecision.HAND_OVER and self.bundles.owned_count():
            with contextlib.suppress(CoordinationError):
                moved = await self.bundles.hand_over_all()
                self.handed_over += moved
                log.warning("gateway cut from a write quorum of storage: handed over %d bundles", moved)
        return decision
