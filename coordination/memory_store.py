"""In-memory ``MetadataStore`` with etcd's semantics, for unit tests and simulation.

Owns: an in-process key space with revisions, leases, bounded event history and
watches. Rule: behave like etcd v3 wherever a caller could tell the difference
(the contract suite runs the same tests against both):

- the store revision starts at 1; every write that changes something bumps it by
  one (a put, a delete that found the key, a prefix delete or lease expiry that
  removed keys - all keys removed together share one revision);
- ``create_revision`` is kept across updates, ``version`` counts puts since creation;
- a lease expires when ``clock.now_ms() >= granted/refreshed at + ttl``. Expiry is
  checked lazily at the start of every call and by ``expire_leases()`` (the
  simulation calls it after moving its clock); it deletes the lease's keys at one
  revision and emits DELETE events;
- the last ``history_size`` events are kept; a watch from an older revision (or
  below ``compact()``) raises ``Compacted``;
- watches are ``WatchStream``s (bounded queue; overflow ends the watch with
  ``WatchOverflow``, see watch_stream.py).

State lives in ``_State``; a ``MemoryStore`` is a handle on it. ``view()`` gives
another handle on the same data (one per simulated process), with its own
watches and its own availability switch (``set_available(False)`` makes that
handle's calls raise ``Unavailable``: a process cut off from etcd). Every call
yields to the event loop once, so concurrent tasks interleave as over a network.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from coordination.clock import Clock
from coordination.errors import Compacted, LeaseLost, Unavailable
from coordination.store import EventKind, KeyValue, WatchEvent
from coordination.watch_stream import WATCH_QUEUE_SIZE, WatchStream

HISTORY_SIZE = 10_000  # events kept for watches that resume from a revision
FIRST_LEASE_ID = 0x7E57_0000_0001  # deterministic ids (etcd's are random int64)


@dataclass
class _Lease:
    lease_id: int
    ttl_ms: int
    deadline_ms: int
    keys: set[str] = field(default_factory=set)


@dataclass
class _Watcher:
    prefix: str
    min_revision: int
    stream: WatchStream


class _State:
    """The shared key space. Mutated only by synchronous methods (no awaits inside)."""

    def __init__(self, clock: Clock, history_size: int) -> None:
        if history_size < 1:
            raise ValueError("history_size must be >= 1")
        self.clock = clock
        self.revision = 1
        self.data: dict[str, KeyValue] = {}
        self.sorted_keys: list[str] = []
        self.leases: dict[int, _Lease] = {}
        self.next_lease_id = FIRST_LEASE_ID
        self.history: deque[WatchEvent] = deque()
        self.history_size = history_size
        self.first_available_revision = 1  # watches may start here or later
        self.watchers: list[_Watcher] = []

    # -- writes (each bumps the revision once and emits its events) --------------------

    def _emit(self, events: list[WatchEvent]) -> None:
        for event in events:
            self.history.append(event)
            if len(self.history) > self.history_size:
                dropped = self.history.popleft()
                self.first_available_revision = max(self.first_available_revision, dropped.mod_revision + 1)
        live = []
        for watcher in self.watchers:
            for event in events:
                wanted = event.key.startswith(watcher.prefix) and event.mod_revision >= watcher.min_revision
                if wanted and not watcher.stream.offer(event):
                    break
            if watcher.stream.active:
                live.append(watcher)
        self.watchers = live

    def put(self, key: str, value: bytes, lease: int) -> int:
        if not key:
            raise ValueError("empty key")
        if lease and lease not in self.leases:
            raise LeaseLost(f"lease {lease:x} not found")
        self.revision += 1
        old = self.data.get(key)
        if old is None:
            bisect.insort(self.sorted_keys, key)
            kv = KeyValue(key, value, self.revision, self.revision, 1, lease)
        else:
            if old.lease and old.lease != lease and old.lease in self.leases:
                self.leases[old.lease].keys.discard(key)
            kv = KeyValue(key, value, old.create_revision, self.revision, old.version + 1, lease)
        if lease:
            self.leases[lease].keys.add(key)
        self.data[key] = kv
        self._emit([WatchEvent(EventKind.PUT, key, value, self.revision)])
        return self.revision

    def delete_keys(self, keys: list[str]) -> int:
        present = sorted(k for k in keys if k in self.data)
        if not present:
            return 0
        self.revision += 1
        events = []
        for key in present:
            kv = self.data.pop(key)
            del self.sorted_keys[bisect.bisect_left(self.sorted_keys, key)]
            if kv.lease and kv.lease in self.leases:
                self.leases[kv.lease].keys.discard(key)
            events.append(WatchEvent(EventKind.DELETE, key, b"", self.revision))
        self._emit(events)
        return len(present)

    def keys_with_prefix(self, prefix: str) -> list[str]:
        start = bisect.bisect_left(self.sorted_keys, prefix)
        out = []
        for key in self.sorted_keys[start:]:
            if not key.startswith(prefix):
                break
            out.append(key)
        return out

    def drop_lease(self, lease_id: int) -> None:
        lease = self.leases.pop(lease_id, None)
        if lease is not None:
            self.delete_keys(list(lease.keys))

    def expire(self) -> list[int]:
        now = self.clock.now_ms()
        expired = sorted(
            (lease.deadline_ms, lease.lease_id) for lease in self.leases.values() if now >= lease.deadline_ms
        )
        for _, lease_id in expired:
            self.drop_lease(lease_id)
        return [lease_id for _, lease_id in expired]

    def compact(self, revision: int) -> None:
        revision = min(revision, self.revision)
        self.first_available_revision = max(self.first_available_revision, revision)
        while self.history and self.history[0].mod_revision < self.first_available_revision:
            self.history.popleft()

    def watch(self, prefix: str, start_revision: int, bound: int) -> WatchStream:
        min_revision = start_revision if start_revision > 0 else self.revision + 1
        if min_revision < self.first_available_revision:
            stream = WatchStream(bound)
            stream.fail(Compacted(self.first_available_revision))
            return stream
        replay = [e for e in self.history if e.mod_revision >= min_revision and e.key.startswith(prefix)]
        stream = WatchStream(bound, replay)
        self.watchers.append(_Watcher(prefix, max(min_revision, self.revision + 1), stream))
        return stream


class MemoryStore:
    """A handle on an in-memory key space; see the module docstring."""

    def __init__(
        self,
        clock: Clock,
        *,
        history_size: int = HISTORY_SIZE,
        watch_queue_size: int = WATCH_QUEUE_SIZE,
        _state: _State | None = None,
    ) -> None:
        self._state = _state if _state is not None else _State(clock, history_size)
        self._watch_queue_size = watch_queue_size
        self._streams: list[WatchStream] = []
        self._available = True
        self._closed = False

    # -- test/simulation controls -------------------------------------------------------

    @property
    def clock(self) -> Clock:
        return self._state.clock

    def view(self, *, watch_queue_size: int | None = None) -> MemoryStore:
        """Another handle on the same data (own watches and availability switch)."""
        size = self._watch_queue_size if watch_queue_size is None else watch_queue_size
        return MemoryStore(self._state.clock, watch_queue_size=size, _state=self._state)

    def set_available(self, available: bool) -> None:
        """False: every call on this handle raises ``Unavailable`` and its watches end
        with ``Unavailable`` (as an etcd watch does after its reconnect budget)."""
        self._available = available
        if not available:
            for stream in self._streams:
                stream.fail(Unavailable("metadata store unavailable (simulated)"))
            self._streams.clear()

    def expire_leases(self) -> list[int]:
        """Expire every lease whose deadline has passed; returns their ids."""
        return self._state.expire()

    def compact(self, revision: int) -> None:
        """Forget history below ``revision`` (watches from older revisions raise Compacted)."""
        self._state.compact(revision)

    def lease_deadline_ms(self, lease: int) -> int | None:
        """When ``lease`` expires (clock ms), or None if it does not exist."""
        found = self._state.leases.get(lease)
        return found.deadline_ms if found else None

    # -- MetadataStore ----------------------------------------------------------------------

    async def _enter(self) -> _State:
        await asyncio.sleep(0)  # interleave like a network round trip
        if self._closed:
            raise Unavailable("store handle closed")
        if not self._available:
            raise Unavailable("metadata store unavailable (simulated)")
        self._state.expire()
        return self._state

    async def get(self, key: str) -> KeyValue | None:
        state = await self._enter()
        return state.data.get(key)

    async def list_prefix(self, prefix: str) -> list[KeyValue]:
        return (await self.list_prefix_at(prefix))[0]

    async def list_prefix_at(self, prefix: str) -> tuple[list[KeyValue], int]:
        """The listing plus the revision it reflects (watch from revision + 1)."""
        state = await self._enter()
        return [state.data[k] for k in state.keys_with_prefix(prefix)], state.revision

    async def revision(self) -> int:
        return (await self._enter()).revision

    async def put(self, key: str, value: bytes, lease: int = 0) -> int:
        return (await self._enter()).put(key, value, lease)

    async def delete(self, key: str) -> bool:
        return (await self._enter()).delete_keys([key]) == 1

    async def delete_prefix(self, prefix: str) -> int:
        state = await self._enter()
        return state.delete_keys(state.keys_with_prefix(prefix))

    async def compare_and_swap(
        self, key: str, value: bytes, expected_mod_revision: int, lease: int = 0
    ) -> int | None:
        state = await self._enter()
        current = state.data.get(key)
        if (current.mod_revision if current else 0) != expected_mod_revision:
            return None
        return state.put(key, value, lease)

    async def put_guarded(self, key: str, value: bytes, guards: Sequence[tuple[str, int]]) -> int | None:
        state = await self._enter()
        for guard, revision in guards:
            current = state.data.get(guard)
            if (current.mod_revision if current else 0) != revision:
                return None
        return state.put(key, value, 0)

    async def compare_and_delete(self, key: str, expected_mod_revision: int) -> bool:
        state = await self._enter()
        current = state.data.get(key)
        if current is None or current.mod_revision != expected_mod_revision:
            return False
        return state.delete_keys([key]) == 1

    async def grant_lease(self, ttl_s: int) -> int:
        if ttl_s < 1:
            raise ValueError("lease ttl must be >= 1 s")
        state = await self._enter()
        lease_id = state.next_lease_id
        state.next_lease_id += 1
        ttl_ms = ttl_s * 1000
        state.leases[lease_id] = _Lease(lease_id, ttl_ms, state.clock.now_ms() + ttl_ms)
        return lease_id

    async def refresh_lease(self, lease: int) -> None:
        state = await self._enter()
        found = state.leases.get(lease)
        if found is None:
            raise LeaseLost(f"lease {lease:x} expired or revoked")
        found.deadline_ms = state.clock.now_ms() + found.ttl_ms

    async def revoke_lease(self, lease: int) -> None:
        (await self._enter()).drop_lease(lease)

    def watch_prefix(self, prefix: str, start_revision: int = 0) -> AsyncIterator[WatchEvent]:
        if self._closed or not self._available:
            stream = WatchStream(self._watch_queue_size)
            stream.fail(Unavailable("metadata store unavailable"))
            return stream
        self._state.expire()
        stream = self._state.watch(prefix, start_revision, self._watch_queue_size)
        self._streams = [s for s in self._streams if s.active]
        if stream.active:
            self._streams.append(stream)
        return stream

    async def close(self) -> None:
        """Close this handle: its watches end; the shared data stays (other handles)."""
        self._closed = True
        for stream in self._streams:
            stream.finish()
        self._streams.clear()
