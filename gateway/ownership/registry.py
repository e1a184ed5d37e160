"""Gateway registration: who is alive, where to reach it, and how loaded it is (asyncio shell).

Owns: this gateway's key ``keys.gateway(id)`` (JSON ``GatewayInfo``: id,
httpUrl, load, startedMs) held under the gateway's ``LeaseSession``, the
periodic load report, and a watched cache of every live gateway.
Rule: the key lives exactly as long as the lease (coordination.membership:
create-if-absent, an earlier incarnation of the same id is waited out). A gateway
is live iff its key exists; lookup, forwarding and the load manager read the
cache, never a per-request etcd read. ``startedMs`` and load timestamps are wall
clock (they are compared across machines); only coarse decisions use them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from coordination import keys, membership
from coordination.clock import Clock, WallClock
from coordination.errors import CoordinationError, LeaseLost
from coordination.session import LeaseSession
from coordination.store import MetadataStore
from coordination.tasks import cancel_and_wait
from gateway.ownership.cache import WatchedPrefix
from gateway.ownership.key_records import GatewayInfo, LoadReport, gateway_of_key

log = logging.getLogger(__name__)

DEFAULT_REPORT_INTERVAL_S = 5.0


LoadProvider = Callable[[], LoadReport | Mapping[str, Any]]


def as_load(load: LoadReport | Mapping[str, Any]) -> LoadReport:
    return load if isinstance(load, LoadReport) else LoadReport.from_json(load)


class GatewayRegistry:
    """Register on ``start()``; ``live()`` is the cached map of live gateways."""

    def __init__(
        self,
        store: MetadataStore,
        session: LeaseSession,
        gateway_id: str,
        http_url: str,
        *,
        wall_clock: Clock | None = None,
        load_provider: LoadProvider | None = None,
        report_interval_s: float = DEFAULT_REPORT_INTERVAL_S,
        register_wait_s: float = membership.DEFAULT_REGISTER_WAIT_S,
        version: str = "",
    ) -> None:
        if not gateway_id or "/" in gateway_id or not gateway_id.isprintable():
            raise ValueError(f"bad gateway id {gateway_id!r}: non-empty, printable, no '/'")
        self.store = store
        self.session = session
        self.gateway_id = gateway_id
        self.wall_clock: Clock = wall_clock or WallClock()
        self.load_provider = load_provider
        self.report_interval_s = report_interval_s
        self.register_wait_s = register_wait_s
        self.key = keys.gateway(gateway_id)
        self._info = GatewayInfo(gateway_id, http_url, LoadReport(), 0, version)
        self._live: dict[str, GatewayInfo] = {}
        self._listeners: list[Callable[[], None]] = []
        self._cache = WatchedPrefix(store, keys.GATEWAYS, self._on_change)
        self._reporter: asyncio.Task[None] | None = None
        self._started = False

    @property
    def info(self) -> GatewayInfo:
        """This gateway's registration as last written."""
        return self._info

    async def start(self) -> GatewayRegistry:
        if self._started:
            return self
        self._info = replace(self._info, started_ms=self.wall_clock.now_ms())
        await membership.register(
            self.store, self.key, self._info.encode(), self.session, wait_timeout_s=self.register_wait_s
        )
        self._started = True
        await self._cache.start()
        if self.load_provider is not None:
            self._reporter = asyncio.get_running_loop().create_task(
                self._report(), name="gateway-load-report"
            )
        return self

    async def rejoin(self, session: LeaseSession) -> None:
        """Register again under ``session`` (a new lease, after the old one was lost);
        the cache of live gateways kept running meanwhile."""
        reporter, self._reporter = self._reporter, None
        await cancel_and_wait(reporter)
        self.session = session
        self._started = False
        await self.start()

    async def close(self, deregister: bool = True) -> None:
        """Stop reporting and watching; with ``deregister`` delete the key now (if still ours)."""
        reporter, self._reporter = self._reporter, None
        await cancel_and_wait(reporter)
        await self._cache.close()
        if deregister and self._started and not self.session.lost.is_set():
            with contextlib.suppress(CoordinationError):
                await membership.deregister(self.store, self.key, self.session)
        self._started = False

    async def update_load(self, load: LoadReport | Mapping[str, Any]) -> None:
        """Publish a new load report (rewrites this gateway's key under its lease)."""
        self._info = replace(self._info, load=as_load(load))
        if not self._started:
            return  # start() registers it
        await membership.register(
            self.store, self.key, self._info.encode(), self.session, wait_timeout_s=self.register_wait_s
        )

    async def set_storage_ok(self, ok: bool) -> None:
        """Publish whether this gateway reaches a write quorum of storage nodes
        (storage_reach.py); lookups and the load manager give bundles only to gateways
        that do, while any does."""
        self._info = replace(self._info, storage_ok=ok)
        if self._started:
            await membership.register(
                self.store, self.key, self._info.encode(), self.session, wait_timeout_s=self.register_wait_s
            )

    def live(self) -> dict[str, GatewayInfo]:
        """Live gateways by id, from the watched cache (no etcd round trip)."""
        return dict(self._live)

    def peers_storage_ok(self) -> list[bool]:
        """The ``storage_ok`` flag of every other live gateway, from the watched cache."""
        return [info.storage_ok for g, info in self._live.items() if g != self.gateway_id]

    def urls(self) -> list[str]:
        """The base URLs of the live gateways, from the watched cache."""
        return [info.http_url for info in self._live.values()]

    def get(self, gateway_id: str) -> GatewayInfo | None:
        return self._live.get(gateway_id)

    async def fetch(self, gateway_id: str) -> GatewayInfo | None:
        """One gateway's registration read from etcd (for when the cache may lag)."""
        kv = await self.store.get(keys.gateway(gateway_id))
        return GatewayInfo.decode(kv.value) if kv is not None else None

    async def list_gateways(self) -> dict[str, GatewayInfo]:
        """Live gateways read from etcd now."""
        return decode_gateways({kv.key: kv.value for kv in await self.store.list_prefix(keys.GATEWAYS)})

    def add_listener(self, callback: Callable[[], None]) -> None:
        """``callback()`` runs (synchronously, must not block) whenever the live set or a load changes."""
        self._listeners.append(callback)

    def _on_change(self, _key: str | None) -> None:
        self._live = decode_gateways({k: e.value for k, e in self._cache.entries.items()})
        for callback in self._listeners:
            try:
                callback()
            except Exception:
                log.exception("gateway registry listener failed")

    async def _report(self) -> None:
        assert self.load_provider is not None
        while not self.session.lost.is_set():
            await asyncio.sleep(self.report_interval_s)
            try:
                await self.update_load(self.load_provider())
            except LeaseLost:
                return
            except CoordinationError as exc:
                log.info("gateway %s: load report failed: %r", self.gateway_id, exc)


def decode_gateways(values: Mapping[str, bytes]) -> dict[str, GatewayInfo]:
    """``{key: value}`` under ``keys.GATEWAYS`` -> ``{gateway id: GatewayInfo}`` (bad values skipped)."""
    out: dict[str, GatewayInfo] = {}
    for key, value in values.items():
        gateway_id = gateway_of_key(key)
        info = GatewayInfo.decode(value) if gateway_id else None
        if gateway_id and info is not None:
            out[gateway_id] = replace(info, gateway_id=gateway_id)
    return out
