"""Bundle ownership of one gateway: lookup, acquire, release, unload, loss (asyncio shell).

Owns: this gateway's ownership keys ``keys.bundle(t, ns, range)`` (value: the
gateway id, held under the gateway's lease), and watched caches of every
ownership key, every assignment and every unload request (``WatchedPrefix``);
the table of the bundles it holds is ``held_bundles.HeldBundles``.
Rules (docs/architecture.md §6, docs/compatibility.md §5):

- A bundle is acquired only by create-if-absent (CAS on revision 0) under this
  gateway's lease, so two gateways can never both hold its key. Ownership is
  still not mutual exclusion - a paused gateway may believe it owns a bundle
  whose key is gone; ledger fencing protects the data. ``is_owner`` is a fast
  local check and also fails once the lease's local deadline has passed.
- Lookup of an owned bundle answers its owner (from the cache; a fresh etcd read
  only when the cache disagrees with itself). For an unowned bundle the target
  is the load manager's assignment if there is one for a live gateway, else the
  least loaded live gateway by ``assign_core``'s score (ties by id), counting
  this gateway's recent picks of bundles not yet owned (``LookupPicks``: many
  lookups at once spread their bundles); if the
  target is this gateway it acquires now, otherwise it answers the target, which
  acquires on its first (authoritative) request (``acquire_if_unowned``).
- An assignment to this gateway is taken up as soon as the bundle has no owner
  key (the load manager writes it before asking the old owner to unload); the
  acquirer deletes the assignment.
- An unload request for a bundle this gateway owns (at the named key revision)
  runs the ``on_unload_requested`` hook (the broker closes the topics), then
  releases the key (even if the hook failed or timed out: the load manager's
  decision stands, fencing covers stragglers), then deletes the request.
- A bundle is lost (``held_bundles.lost_bundles``) when the watched cache no longer
  holds our key - or when the lease is lost, which loses every bundle at once.
  The ``on_bundle_lost`` callbacks then run (``hooks``; also after
  ``release``). The gateway then takes part again under a new lease
  (``rejoin``), with new keys and so newer epochs than anything it held before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from coordination import keys
from coordination.errors import CoordinationError, LeaseLost
from coordination.session import LeaseSession
from coordination.store import MetadataStore
from coordination.tasks import cancel_and_wait
from gateway.names import NamespaceName, TopicName
from gateway.ownership import requests
from gateway.ownership.assign_core import BalancePolicy, LookupPicks
from gateway.ownership.bundles import (
    DEFAULT_NUM_BUNDLES,
    BundleRange,
    NamespaceBundle,
    bundle_for_hash,
    bundle_in,
    topic_hash,
)
from gateway.ownership.cache import WatchedPrefix
from gateway.ownership.errors import BundleUnavailable, NoGatewayAvailable, OwnershipSessionLost
from gateway.ownership.held_bundles import HeldBundles, LossReason, lost_bundles
from gateway.ownership.hooks import BundleCallback, BundleLostCallback, Hooks, UnloadHook
from gateway.ownership.key_records import (
    GatewayInfo,
    assignment_key,
    decode_owner,
    owner_key,
    unload_key,
)
from gateway.ownership.ownership_view import OwnershipView
from gateway.ownership.registry import GatewayRegistry

log = logging.getLogger(__name__)

DEFAULT_UNLOAD_TIMEOUT_S = 30.0
HAND_OVER_UNLOAD_S = 1.0  # the unload hook's time when handing over for lack of storage


@dataclass(frozen=True, slots=True)
class OwnerInfo:
    """Where a bundle is served: the owner (or chosen owner) gateway."""

    gateway_id: str
    http_url: str
    bundle: NamespaceBundle
    is_self: bool


class OwnershipManager:
    """Bundle ownership for the gateway ``registry`` registers (its id and address
    come from there); ``await start()`` before use. ``start()`` also starts the
    registry; whoever made the registry closes it."""

    def __init__(
        self,
        store: MetadataStore,
        session: LeaseSession,
        registry: GatewayRegistry,
        *,
        policy: BalancePolicy | None = None,
        unload_timeout_s: float = DEFAULT_UNLOAD_TIMEOUT_S,
    ) -> None:
        self.store = store
        self.session = session
        self.registry = registry
        self.gateway_id = registry.gateway_id
        self.policy = policy or BalancePolicy()
        self.unload_timeout_s = unload_timeout_s
        self._mine = HeldBundles()
        self.view = OwnershipView()  # the three caches, decoded
        self._picks = LookupPicks()  # lookup's picks for unowned bundles, until they are owned
        self._acquiring: dict[NamespaceBundle, asyncio.Task[bool]] = {}
        self._unloading: set[NamespaceBundle] = set()  # unload requests being carried out
        self._leaving: dict[NamespaceBundle, LossReason] = {}  # releases in flight
        self._hooks = Hooks(self.gateway_id)
        self._bundles = WatchedPrefix(store, keys.BUNDLES, self._on_owner_change)
        self._assigned = WatchedPrefix(store, keys.BUNDLE_ASSIGN, self._on_assignment_change)
        self._unload_requests = WatchedPrefix(store, keys.BUNDLE_UNLOAD, self._on_unload_change)
        self._lease_watch: asyncio.Task[None] | None = None
        # False while this gateway hands its bundles over (cut from a write quorum of
        # storage nodes while a peer is not, storage_reach.py): it takes no bundle
        self.accepting = True

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> OwnershipManager:
        if self._lease_watch is not None:
            return self
        await self.registry.start()
        await self._bundles.start()
        await self._assigned.start()
        await self._unload_requests.start()
        self._lease_watch = asyncio.get_running_loop().create_task(
            self._watch_lease(), name="ownership-lease"
        )
        return self

    async def rejoin(self, session: LeaseSession) -> None:
        """Own bundles again under ``session`` (a new lease, after the old one was lost).
        Whatever was held under the old lease is lost first (its topics dropped); the
        watched caches kept running meanwhile; an assignment to this gateway that is
        waiting for it is taken up now."""
        watch, self._lease_watch = self._lease_watch, None
        await cancel_and_wait(watch)
        self._lose_all()
        self.session = session
        await self.start()  # the caches start on the first join and keep running after
        for nb in list(self.view.assignments):
            self._maybe_take_assignment(nb)

    async def close(self, release: bool = True) -> None:
        """Stop; with ``release`` first give up every bundle (clean shutdown)."""
        if release and not self.session.lost.is_set():
            with contextlib.suppress(CoordinationError):
                await self.release_all()
        watch, self._lease_watch = self._lease_watch, None
        tasks = [t for t in (watch, *self._hooks.tasks(), *self._acquiring.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for cache in (self._bundles, self._assigned, self._unload_requests):
            await cache.close()

    # -- callbacks ----------------------------------------------------------------------

    def on_bundle_lost(self, callback: BundleLostCallback) -> None:
        """``callback(bundle, reason)`` after this gateway stops owning ``bundle``."""
        self._hooks.lost.append(callback)

    def on_bundle_acquired(self, callback: BundleCallback) -> None:
        """``callback(bundle)`` after this gateway acquires ``bundle``."""
        self._hooks.acquired.append(callback)

    def on_unload_requested(self, hook: UnloadHook) -> None:
        """``await hook(bundle)`` runs before a requested unload releases ``bundle``
        (close its topics); it is given ``unload_timeout_s``."""
        self._hooks.unload = hook

    # -- queries (local, no etcd round trip) ----------------------------------------------

    def is_owner(self, topic: TopicName) -> bool:
        """True if this gateway holds the bundle containing ``topic`` and its lease is valid."""
        return self.session.is_valid() and self.owned_bundle_of(topic) is not None

    def owned_bundle_of(self, topic: TopicName) -> NamespaceBundle | None:
        """The bundle of ours that contains ``topic`` (None: not ours), lease aside."""
        found = self._mine.of_topic(topic)
        return found[0] if found else None

    def epoch_of(self, topic: TopicName) -> int | None:
        """This gateway's ownership epoch for ``topic``: the mod_revision of our key for
        the bundle containing it (etcd revisions only grow, so a later owner's epoch is
        always higher); None when we do not own it or the lease is no longer valid."""
        found = self._mine.of_topic(topic)
        return found[1] if found and self.session.is_valid() else None

    def held_generation(self) -> int:
        """Moves on with every change of the bundles held: an epoch ``epoch_of`` gave
        holds, lease aside, until it moves (``lease_valid`` is the rest)."""
        return self._mine.generation

    def lease_valid(self) -> bool:
        """Whether this gateway's lease is valid now (before its local deadline)."""
        return self.session.is_valid()

    def owns(self, bundle: NamespaceBundle) -> bool:
        return self.session.is_valid() and self._mine.holds(bundle)

    def owned_count(self) -> int:
        return len(self.owned_bundles())

    def owned_bundles(self) -> set[NamespaceBundle]:
        if self.session.lost.is_set():
            return set()
        return set(self._mine.all())

    def owner_of(self, topic: TopicName) -> str | None:
        """The owner of ``topic``'s bundle as the cache sees it (None: unowned)."""
        found = self.view.owner_of_hash(topic.namespace_name, topic_hash(str(topic)))
        return found[1] if found else None

    def bundle_owners(self) -> dict[NamespaceBundle, str]:
        """Every ownership key, as cached."""
        return self.view.bundle_owners()

    def assignments(self) -> dict[NamespaceBundle, str]:
        """Pending assignments (bundle -> gateway), as cached."""
        return {b: a.gateway_id for b, (a, _) in self.view.assignments.items()}

    # -- lookup and acquire ---------------------------------------------------------------

    async def lookup(
        self,
        topic: TopicName,
        num_bundles: int | Sequence[int] = DEFAULT_NUM_BUNDLES,
        *,
        authoritative: bool = False,
    ) -> OwnerInfo:
        """Who serves ``topic``. ``num_bundles``: the namespace's bundle count, or its
        bundle boundaries (policies ``bundles.boundaries``); used only when no held bundle
        covers the topic. ``authoritative``: the request was sent here by another
        gateway's lookup, so acquire an unowned bundle here instead of choosing again.
        Without a valid lease it still answers another gateway that owns the topic (as
        cached), so requests are relayed there; anything else is ``OwnershipSessionLost``."""
        ns = topic.namespace_name
        h = topic_hash(str(topic))
        if self.session.lost.is_set():
            held = self.view.owner_of_hash(ns, h)
            if held is not None and held[1] != self.gateway_id and held[1] in self.registry.live():
                return await self._info_of(*held)
            raise OwnershipSessionLost(f"gateway {self.gateway_id}: {self.session.lost_reason}")
        mine = self._mine.covering(ns, h)
        if mine is not None:
            return self._self_info(NamespaceBundle(ns, mine[0]))
        found = self.view.owner_of_hash(ns, h)
        if found is not None:
            bundle, cached = found
            if cached != self.gateway_id:
                return await self._info_of(bundle, cached)
            current = await self._read_owner(bundle)  # our id, not ours: stale cache or an old incarnation
            if current is not None:
                return await self._info_of(bundle, current)
        else:
            edges = num_bundles
            bundle = NamespaceBundle(
                ns, bundle_for_hash(h, edges) if isinstance(edges, int) else bundle_in(h, edges)
            )
        target = self.gateway_id if authoritative and self.accepting else self._target_for(bundle)
        if target != self.gateway_id:
            return await self._info_of(bundle, target)
        if await self.acquire_if_unowned(bundle.namespace, bundle.range):
            return self._self_info(bundle)
        holder = await self._read_owner(bundle)
        if holder is None:
            raise BundleUnavailable(f"ownership of {bundle} is changing; retry")
        return await self._info_of(bundle, holder)

    async def acquire_if_unowned(self, ns: NamespaceName, bundle: BundleRange) -> bool:
        """Acquire ``ns``/``bundle`` unless someone holds it; True if this gateway owns it now."""
        self._check_session()
        nb = NamespaceBundle(ns, bundle)
        if self._mine.holds(nb):
            return True
        task = self._acquiring.get(nb)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._acquire(nb), name=f"acquire {nb}")
            self._acquiring[nb] = task
            task.add_done_callback(lambda _: self._acquiring.pop(nb, None))
        return await asyncio.shield(task)

    async def _acquire(self, nb: NamespaceBundle) -> bool:
        key = owner_key(nb)
        session = self.session  # the lease this acquire runs under, even if a rejoin swaps it
        try:
            revision = await self.store.compare_and_swap(
                key, self.gateway_id.encode(), 0, lease=session.lease_id
            )
            if revision is None:
                current = await self.store.get(key)
                if current is None or current.lease != session.lease_id:
                    return False
                revision = current.mod_revision  # ours already (an acquire whose answer we lost)
        except LeaseLost as exc:
            raise OwnershipSessionLost(f"gateway {self.gateway_id} lost its lease: {exc}") from exc
        if session.lost.is_set() or session is not self.session:
            return False
        self._mine.add(nb, revision)
        log.info("gateway %s acquired bundle %s", self.gateway_id, nb)
        self._hooks.fire_acquired(nb)
        assigned = self.view.assignments.get(nb)
        if assigned is not None and assigned[0].gateway_id == self.gateway_id:
            self._hooks.spawn(self._delete_quietly(assignment_key(nb), assigned[1]))
        self._maybe_unload(nb)  # a request may have arrived before our CAS's answer
        return True

    # -- release --------------------------------------------------------------------------

    async def release(self, ns: NamespaceName, bundle: BundleRange) -> bool:
        """Give up ``ns``/``bundle`` (delete our key); False if we did not own it."""
        return await self._release(NamespaceBundle(ns, bundle), LossReason.RELEASED)

    async def release_all(self) -> int:
        """Release every owned bundle (clean shutdown); returns how many were released."""
        owned = sorted(self.owned_bundles())
        done = await asyncio.gather(*(self._release(nb, LossReason.RELEASED) for nb in owned))
        return sum(done)

    async def _release(self, nb: NamespaceBundle, reason: LossReason) -> bool:
        revision = self._mine.revision(nb)
        if revision is None:
            return False
        self._leaving[nb] = reason  # the watch may report the delete before the delete returns
        try:
            await self.store.compare_and_delete(owner_key(nb), revision)  # False: already gone
        finally:
            self._leaving.pop(nb, None)
        self._lose(nb, reason, revision)
        return True

    async def hand_over_all(self) -> int:
        """Unload every owned bundle (the unload hook closes its topics, then the key is
        released) so a gateway that reaches storage takes it; returns how many. The hook
        gets ``HAND_OVER_UNLOAD_S``: the topics cannot write anyway (their appends wait
        for storage that does not answer), and the next owner fences their ledgers."""
        owned = sorted(nb for nb in self.owned_bundles() if nb not in self._unloading)
        self._unloading.update(owned)

        async def unload(nb: NamespaceBundle) -> bool:
            try:
                await self._hooks.before_unload(nb, min(self.unload_timeout_s, HAND_OVER_UNLOAD_S))
                return await self._release(nb, LossReason.UNLOADED)
            finally:
                self._unloading.discard(nb)

        done = await asyncio.gather(*(unload(nb) for nb in owned), return_exceptions=True)
        return sum(1 for d in done if d is True)

    async def request_unload(self, bundle: NamespaceBundle, to_gateway: str | None = None) -> bool:
        """Ask ``bundle``'s owner to unload it (admin "unload bundle"); the request is held
        under this gateway's lease. With ``to_gateway``, assign it there first."""
        self._check_session()
        wall = self.registry.wall_clock.now_ms()
        return await requests.request_unload(self.store, bundle, to_gateway, wall, self.session.lease_id)

    # -- internals: answers -----------------------------------------------------------------

    def _check_session(self) -> None:
        if self.session.lost.is_set():
            raise OwnershipSessionLost(f"gateway {self.gateway_id}: {self.session.lost_reason}")

    def _self_info(self, bundle: NamespaceBundle) -> OwnerInfo:
        return OwnerInfo(self.gateway_id, self.registry.info.http_url, bundle, True)

    async def _info_of(self, bundle: NamespaceBundle, owner: str) -> OwnerInfo:
        if owner == self.gateway_id:
            if self.owns(bundle):
                return self._self_info(bundle)
            raise BundleUnavailable(f"{bundle} is held by an earlier incarnation of {owner}; retry")
        info = self.registry.get(owner) or await self.registry.fetch(owner)
        if info is None:
            raise BundleUnavailable(
                f"owner {owner} of {bundle} is gone; its bundles move when its lease ends"
            )
        return OwnerInfo(owner, info.http_url, bundle, False)

    async def _read_owner(self, bundle: NamespaceBundle) -> str | None:
        kv = await self.store.get(owner_key(bundle))
        if kv is None:
            return None
        owner = decode_owner(kv.value)
        if owner == self.gateway_id and kv.lease == self.session.lease_id and not self.session.lost.is_set():
            self._mine.add_if_absent(bundle, kv.mod_revision)
        return owner

    def _live_gateways(self) -> dict[str, GatewayInfo]:
        live = self.registry.live()
        live.setdefault(self.gateway_id, self.registry.info)
        return live

    def _has_owner(self, bundle: NamespaceBundle) -> bool:
        return self._mine.holds(bundle) or self.view.owner(bundle) is not None

    def _target_for(self, bundle: NamespaceBundle) -> str:
        """Who should acquire an unowned bundle: the load manager's pick, else the least loaded."""
        live = self._live_gateways()
        assigned = self.view.assigned_to(bundle)
        if assigned is not None and assigned in live:
            return assigned
        counts = self.view.counts(self.owned_bundles(), self.gateway_id)
        now_ms = self.session.clock.now_ms()
        target = self._picks.pick(bundle, live, counts, self._has_owner, self.policy, now_ms)
        if target is None:
            raise NoGatewayAvailable("no live gateway")
        return target

    # -- internals: cache reactions ---------------------------------------------------------

    def _on_owner_change(self, key: str | None) -> None:
        entries = self._bundles.entries
        touched = self.view.update_owners(entries, key)
        check = self.owned_bundles() if key is None else [nb for nb in touched if self.owns(nb)]
        for nb, mine in lost_bundles(self._mine, check, entries, self._bundles.revision):
            self._lose(nb, self._leaving.get(nb, LossReason.DELETED), mine)
        for nb in list(self.view.assignments) if key is None else touched:
            self._maybe_take_assignment(nb)

    def _on_assignment_change(self, key: str | None) -> None:
        for nb in self.view.update_assignments(self._assigned.entries, key):
            self._maybe_take_assignment(nb)

    def _maybe_take_assignment(self, nb: NamespaceBundle) -> None:
        if self.view.assigned_to(nb) != self.gateway_id or self.session.lost.is_set() or not self.accepting:
            return
        if nb in self._acquiring or self.view.owner(nb) is not None:
            return  # in progress, or someone (maybe us) holds it: wait for the key to go
        self._hooks.spawn(self._take_assignment(nb))

    async def _take_assignment(self, nb: NamespaceBundle) -> None:
        try:
            await self.acquire_if_unowned(nb.namespace, nb.range)
        except (CoordinationError, OwnershipSessionLost) as exc:
            log.warning("gateway %s: taking assigned bundle %s failed: %r", self.gateway_id, nb, exc)

    def _on_unload_change(self, key: str | None) -> None:
        for nb in self.view.update_unloads(self._unload_requests.entries, key):
            self._maybe_unload(nb)

    def _maybe_unload(self, nb: NamespaceBundle) -> None:
        pending = self.view.unloads.get(nb)
        if pending is None or nb in self._unloading:
            return
        request, request_revision = pending
        mine = self._mine.revision(nb)
        if request.from_gateway == self.gateway_id and mine == request.owner_revision:
            self._unloading.add(nb)
            self._hooks.spawn(self._unload(nb, request_revision))

    async def _unload(self, nb: NamespaceBundle, request_revision: int) -> None:
        try:
            await self._hooks.before_unload(nb, self.unload_timeout_s)
            await self._release(nb, LossReason.UNLOADED)
            await self._delete_quietly(unload_key(nb), request_revision)
        except CoordinationError as exc:
            log.warning("gateway %s: unloading %s failed: %r", self.gateway_id, nb, exc)
        finally:
            self._unloading.discard(nb)

    # -- internals: loss ------------------------------------------------------------------

    async def _watch_lease(self) -> None:
        await self.session.lost.wait()
        self._lose_all()

    def _lose_all(self) -> None:
        for nb in self._mine.all():
            self._lose(nb, LossReason.LEASE_LOST, None)

    def _lose(self, nb: NamespaceBundle, reason: LossReason, revision: int | None) -> None:
        if self._mine.remove(nb, revision):
            log.info("gateway %s lost bundle %s (%s)", self.gateway_id, nb, reason.value)
            self._hooks.fire_lost(nb, reason)

    async def _delete_quietly(self, key: str, revision: int) -> None:
        with contextlib.suppress(CoordinationError):
            await self.store.compare_and_delete(key, revision)
