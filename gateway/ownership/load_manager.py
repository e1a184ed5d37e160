"""The elected load manager: assigns unowned bundles and moves bundles between gateways.

Owns: this gateway's candidacy in the ``keys.LOAD_MANAGER`` election, and while
it leads, one balancing round every ``interval_s`` (and soon after the set of
live gateways changes): read the cluster, run ``assign_core.decide``, carry out
its effects. Everything it writes is held under its own lease, so a deposed
leader's half-done work disappears with it and the next leader decides afresh.

Protocol (all keys via coordination.keys; values in key_records.py):

- ``/folio/gateways/<id>``: each gateway's registration and load (registry.py).
- ``/folio/bundles/<t>/<ns>/<range>`` = owner gateway id, under the owner's lease,
  created only with create-if-absent by the owner itself (owner.py).
- ``Assign`` -> ``/folio/bundle-assign/<t>/<ns>/<range>`` = ``{"gateway", "atMs"}``.
  The named gateway watches assignments and acquires the bundle as soon as it
  has no ownership key, then deletes the assignment. Lookups on any gateway
  answer the assigned gateway for an unowned bundle.
- ``Unload`` (a move) -> first the assignment to the destination, then
  ``/folio/bundle-unload/<t>/<ns>/<range>`` = ``{"from", "to", "ownerRevision",
  "atMs"}``. The owner, if it still holds the key at ``ownerRevision``, runs its
  unload hook (the broker closes the bundle's topics), deletes its ownership key
  and then the request; the destination sees the key go and acquires.
- ``ClearAssignment`` -> delete a done or stale assignment. Unload requests whose
  bundle is no longer owned by ``from`` at ``ownerRevision`` are deleted too.

Bundles considered: those with an ownership key or an assignment, those this
leader has seen owned since it was elected (so the bundles of a gateway that died
or shut down are reassigned at once, not on the next lookup), and whatever the
optional ``known_bundles`` hook returns (e.g. bundles of existing topics).

Rule: leadership is a liveness hint, not a lock. Every write is a compare-and-swap
on what this round read, and ownership itself is only ever taken by CAS-create,
so a second, stale leader can cause at most a redundant move; ledger fencing
keeps the data safe whatever ownership says.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable

from coordination import keys
from coordination.clock import Clock, WallClock
from coordination.election import Election
from coordination.errors import CoordinationError, LeaseLost
from coordination.session import LeaseSession
from coordination.store import MetadataStore
from coordination.tasks import BackgroundTask
from gateway.ownership.assign_core import (
    Assign,
    BalancePolicy,
    ClearAssignment,
    ClusterView,
    Effect,
    Unload,
    decide,
    shed_due,
)
from gateway.ownership.bundles import NamespaceBundle
from gateway.ownership.key_records import (
    Assignment,
    UnloadRequest,
    assignment_key,
    bundle_of_key,
    decode_owner,
    unload_key,
)
from gateway.ownership.registry import GatewayRegistry, decode_gateways

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 5.0
RETRY_S = 1.0

KnownBundles = Callable[[], Awaitable[Iterable[NamespaceBundle]]]


class LoadManager:
    """Runs on every gateway; acts only while elected. ``await start()`` / ``await close()``."""

    def __init__(
        self,
        store: MetadataStore,
        session: LeaseSession,
        gateway_id: str,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        policy: BalancePolicy | None = None,
        wall_clock: Clock | None = None,
        known_bundles: KnownBundles | None = None,
        registry: GatewayRegistry | None = None,
    ) -> None:
        self.store = store
        self.session = session
        self.gateway_id = gateway_id
        self.interval_s = interval_s
        self.policy = policy or BalancePolicy()
        self.clock: Clock = wall_clock or WallClock()
        self.known_bundles = known_bundles
        self.election = Election(store, keys.LOAD_MANAGER, gateway_id, session)
        self.rounds = 0  # rounds run as leader
        self.last_effects: list[Effect] = []
        self._seen: set[NamespaceBundle] = set()  # bundles seen owned while leading
        self._last_moved: dict[NamespaceBundle, int] = {}
        self._last_shed_ms: int | None = None  # when shedding was last weighed while leading
        self._wake = asyncio.Event()
        self._loop = BackgroundTask("load-manager")
        if registry is not None:
            registry.add_listener(self._on_gateways_changed)

    @property
    def is_leader(self) -> bool:
        return self.election.is_leader

    async def start(self) -> LoadManager:
        self._loop.start(self._run)
        return self

    async def close(self) -> None:
        await self._loop.close()
        if not self.session.lost.is_set():
            with contextlib.suppress(CoordinationError):
                await self.election.resign()

    async def rejoin(self, session: LeaseSession) -> None:
        """Stand for election again under ``session`` (a new lease, after the old one
        was lost: the candidacy and any leadership went with it)."""
        await self.close()
        self.session = session
        self.election = Election(self.store, keys.LOAD_MANAGER, self.gateway_id, session)
        await self.start()

    def _on_gateways_changed(self) -> None:
        self.kick()

    def kick(self) -> None:
        """Run the next round now (if leading)."""
        self._wake.set()

    async def _run(self) -> None:
        while not self.session.lost.is_set():
            try:
                await self.election.campaign()
            except LeaseLost:
                return
            except CoordinationError as exc:
                log.warning("load manager %s: campaign failed: %r", self.gateway_id, exc)
                await asyncio.sleep(RETRY_S)
                continue
            log.info("gateway %s is the load manager", self.gateway_id)
            try:
                await self._lead()
            finally:
                self._seen.clear()
                self._last_moved.clear()
                self._last_shed_ms = None
        log.info("load manager %s stops: %s", self.gateway_id, self.session.lost_reason)

    async def _lead(self) -> None:
        while self.election.is_leader:
            self._wake.clear()
            try:
                await self.run_once()
            except CoordinationError as exc:
                log.warning("load manager round failed: %r", exc)
            except Exception:  # a bug in one round must not end load management
                log.exception("load manager round failed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval_s):
                    await _first(self.session.lost, self._wake)

    async def run_once(self) -> list[Effect]:
        """One round: read, decide, write. Meant to run while leading (the loop does that)."""
        now = self.clock.now_ms()
        lease = self.session.lease_id
        gateways = decode_gateways({kv.key: kv.value for kv in await self.store.list_prefix(keys.GATEWAYS)})
        owners: dict[NamespaceBundle, tuple[str, int]] = {}
        for kv in await self.store.list_prefix(keys.BUNDLES):
            nb = bundle_of_key(keys.BUNDLES, kv.key)
            owner = decode_owner(kv.value)
            if nb is not None and owner is not None:
                owners[nb] = (owner, kv.mod_revision)
        assignments: dict[NamespaceBundle, tuple[Assignment, int]] = {}
        for kv in await self.store.list_prefix(keys.BUNDLE_ASSIGN):
            nb = bundle_of_key(keys.BUNDLE_ASSIGN, kv.key)
            assignment = Assignment.decode(kv.value)
            if nb is not None and assignment is not None:
                assignments[nb] = (assignment, kv.mod_revision)
        unloading: set[NamespaceBundle] = set()
        for kv in await self.store.list_prefix(keys.BUNDLE_UNLOAD):
            nb = bundle_of_key(keys.BUNDLE_UNLOAD, kv.key)
            request = UnloadRequest.decode(kv.value)
            if nb is None:
                continue
            if request is not None and owners.get(nb) == (request.from_gateway, request.owner_revision):
                unloading.add(nb)
            else:  # done (owner released, request not yet deleted) or about an older ownership
                await self.store.compare_and_delete(kv.key, kv.mod_revision)
        self._seen |= owners.keys()
        known = set(self._seen)
        if self.known_bundles is not None:
            known |= set(await self.known_bundles())
        view = ClusterView(
            gateways=gateways,
            owners={nb: owner for nb, (owner, _) in owners.items()},
            known=known,
            assignments={nb: a for nb, (a, _) in assignments.items()},
            unloading=unloading,
            last_moved_ms=self._last_moved,
            shed_due=shed_due(self._last_shed_ms, self.policy, now),
        )
        if view.shed_due:
            self._last_shed_ms = now
        effects = decide(view, self.policy, now)
        for effect in effects:
            if isinstance(effect, Assign):
                await self._assign(effect.bundle, effect.gateway, assignments, now, lease)
            elif isinstance(effect, Unload):
                if not await self._assign(effect.bundle, effect.to_gateway, assignments, now, lease):
                    continue
                owner_revision = owners[effect.bundle][1]
                request = UnloadRequest(effect.from_gateway, owner_revision, effect.to_gateway, now)
                await self.store.compare_and_swap(unload_key(effect.bundle), request.encode(), 0, lease=lease)
                self._last_moved[effect.bundle] = now
                log.warning(  # a move closes the bundle's sessions (clients reconnect): say why
                    "load manager: move %s %s -> %s (%s)",
                    effect.bundle,
                    effect.from_gateway,
                    effect.to_gateway,
                    effect.reason,
                )
            elif isinstance(effect, ClearAssignment):
                await self.store.compare_and_delete(
                    assignment_key(effect.bundle), assignments[effect.bundle][1]
                )
        self.rounds += 1
        self.last_effects = effects
        return effects

    async def _assign(
        self,
        bundle: NamespaceBundle,
        gateway_id: str,
        assignments: dict[NamespaceBundle, tuple[Assignment, int]],
        now: int,
        lease: int,
    ) -> bool:
        current = assignments.get(bundle)
        value = Assignment(gateway_id, now).encode()
        revision = await self.store.compare_and_swap(
            assignment_key(bundle), value, current[1] if current else 0, lease=lease
        )
        return revision is not None


async def _first(*events: asyncio.Event) -> None:
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
