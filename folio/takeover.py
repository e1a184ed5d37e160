"""Measuring a takeover: how fast a dead gateway's topics are served again by another.

Owns: ``measure_takeover`` - with N topics owned by one gateway, a REST
producer publishes to every topic through the other (each retrying every
``pace_s`` while it fails), the owner is killed, and the first success per
topic after the kill is timed (only requests sent after it count) - and
``TakeoverResult`` with where the time went, from a watch on etcd kept on a
thread and event loop of its own (the producers' loop would stamp events late):
the dead gateway's registration deleted (its lease expired), the survivor's
ownership keys written (bundles taken), each topic's ledger list rewritten by
the survivor (recovered, new ledger in). Used by ``folio bench takeover`` and
the takeover test; asserts nothing.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from coordination import keys
from coordination.etcd_store import connect
from coordination.store import EventKind

Event = tuple[float, EventKind, str, bytes]


def topic_path(prefix: str, i: int) -> str:
    return f"persistent/public/default/{prefix}-{i:04d}"


async def publish(http: httpx.AsyncClient, base: str, path: str, authoritative: bool = False) -> bool:
    params = {"authoritative": "true"} if authoritative else None
    try:
        response = await http.post(
            f"{base}/topics/{path}", json={"messages": [{"payload": "eA=="}]}, params=params
        )
    except httpx.HTTPError:
        return False
    if response.status_code != 200:
        return False
    results = response.json().get("messagePublishResults", [])
    return bool(results) and results[0].get("errorCode", 1) == 0


def spread(values: list[float]) -> str:
    return f"min {min(values):5.2f}  median {statistics.median(values):5.2f}  max {max(values):5.2f}"


@dataclass
class TakeoverResult:
    """Seconds after the kill."""

    topics: int
    expired: float | None  # the dead gateway's registration deleted
    acquired: list[float]  # ownership keys written by the survivor
    lists: list[float]  # each topic's ledger list rewritten (first write after the kill)
    first_ok: list[float]  # first publish acknowledged, per topic

    def lines(self) -> list[str]:
        out = [f"takeover of {self.topics} topics after kill -9 of their owner (seconds after the kill):"]
        expired = self.expired if self.expired is not None else float("nan")
        out.append(f"  lease expired (keys deleted)   {expired:5.2f}")
        if self.acquired:
            first, last = min(self.acquired), max(self.acquired)
            out.append(f"  bundles taken by the survivor  first {first:5.2f}  last {last:5.2f}")
        if self.lists:
            out.append(f"  ledger lists rewritten         {spread(self.lists)}  ({len(self.lists)} topics)")
        out.append(f"  first publish ok per topic     {spread(self.first_ok)}")
        return out


def _watch(
    endpoint: str, namespace: str, events: list[Event], ready: threading.Event, stop: threading.Event
) -> None:
    async def run() -> None:
        store = await connect(endpoint, namespace=namespace)
        try:
            iterator = aiter(store.watch_prefix(keys.ROOT, await store.revision() + 1))
            ready.set()
            while not stop.is_set():
                try:
                    event = await asyncio.wait_for(anext(iterator), 0.2)
                except TimeoutError:
                    continue
                events.append((time.monotonic(), event.kind, event.key, event.value or b""))
        finally:
            await store.close()

    asyncio.run(run())


async def create_topics(owner_url: str, paths: list[str]) -> None:
    """Create (first publish) every topic through ``owner_url``, which takes their bundles."""
    async with httpx.AsyncClient(timeout=30.0) as http:
        gate = asyncio.Semaphore(32)

        async def create(path: str) -> None:
            async with gate:
                if not await publish(http, owner_url, path, authoritative=True):
                    raise RuntimeError(f"topic {path} not created through {owner_url}")

        await asyncio.gather(*(create(path) for path in paths))


async def measure_takeover(
    paths: list[str],
    *,
    owner_id: str,
    survivor_url: str,
    survivor_id: str,
    kill: Callable[[], object],
    etcd: str,
    etcd_namespace: str = "",
    pace_s: float = 0.2,
    timeout_s: float = 60.0,
) -> TakeoverResult:
    """Publish to every topic through the survivor until each is served (forwarded to
    the owner), call ``kill``, and time each topic's first success after it."""
    events: list[Event] = []
    ready, stop = threading.Event(), threading.Event()
    watcher = threading.Thread(target=_watch, args=(etcd, etcd_namespace, events, ready, stop), daemon=True)
    watcher.start()
    if not await asyncio.to_thread(ready.wait, 20):
        raise RuntimeError("no etcd watch")
    killed_at: float | None = None
    first_ok: dict[str, float] = {}
    warm: set[str] = set()
    limits = httpx.Limits(max_connections=len(paths) + 10)
    async with httpx.AsyncClient(timeout=30.0, limits=limits) as http:

        async def produce(path: str) -> None:
            while path not in first_ok:
                sent_at = time.monotonic()
                ok = await publish(http, survivor_url, path)
                if ok and killed_at is None:
                    warm.add(path)
                elif ok and killed_at is not None and sent_at > killed_at:  # sent after the kill
                    first_ok[path] = time.monotonic() - killed_at
                    return
                await asyncio.sleep(pace_s)

        producers = [asyncio.ensure_future(produce(path)) for path in paths]
        try:
            deadline = time.monotonic() + timeout_s
            while len(warm) < len(paths):  # every topic served through the survivor first
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {len(warm)} of {len(paths)} topics served through the survivor")
                await asyncio.sleep(0.1)
            kill()
            killed_at = time.monotonic()
            await asyncio.wait_for(asyncio.gather(*producers), timeout_s)
        finally:
            for task in producers:
                task.cancel()
            await asyncio.sleep(1.0)  # the last events in
            stop.set()
            await asyncio.to_thread(watcher.join, 10)
    assert killed_at is not None
    after = [(t - killed_at, kind, key, value) for t, kind, key, value in events if t >= killed_at]
    expired = [t for t, kind, key, _ in after if kind is EventKind.DELETE and key == keys.gateway(owner_id)]
    acquired = [
        t
        for t, kind, key, value in after
        if kind is EventKind.PUT and key.startswith(keys.BUNDLES) and value == survivor_id.encode()
    ]
    lists: dict[str, float] = {}
    for t, kind, key, _ in after:
        if kind is EventKind.PUT and key.startswith(keys.MANAGED_LOGS):
            lists.setdefault(key, t)
    return TakeoverResult(
        len(paths), expired[0] if expired else None, acquired, list(lists.values()), list(first_ok.values())
    )
