"""The gateway-wide bound on cached entries (pure).

Owns: ``CacheBudget``, the bytes held by all the caches of one gateway's logs
(each log's tail cache and read-ahead, each topic's decoded entries), and
which cache gives way when they exceed ``bytes_max``. Rules (Pulsar's
``managedLedgerCacheSizeMB``: one bound for the broker, on top of each cache's
own):
- every cache reports what it adds and drops (``grew``); the sum is kept as a
  running count, recomputed from the caches themselves whenever it says the
  bound is passed (a cache dropped without ``forget`` cannot keep it high);
- beyond the bound, the cache holding the most gives way, oldest entries
  first, until the total is back at 90 % of ``bytes_max`` (an idle topic's
  full cache makes room for a busy one, not the other way round; the margin
  means a gateway at its bound reclaims once per 10 % of it, not on every put);
- a cache that is closed is ``forget``-ten: its bytes leave the count at once.
"""

from __future__ import annotations

import weakref
from typing import Protocol

CACHE_BUDGET_BYTES = 1024 * 1024 * 1024  # per gateway, all logs together


class BudgetedCache(Protocol):
    @property
    def size_bytes(self) -> int: ...

    def shrink(self, nbytes: int) -> int:
        """Drop the oldest entries until at least ``nbytes`` are freed (or none is
        left); return the bytes freed."""
        ...


class CacheBudget:
    def __init__(self, bytes_max: int = CACHE_BUDGET_BYTES) -> None:
        assert bytes_max > 0
        self.bytes_max = bytes_max
        self._used = 0
        self._caches: weakref.WeakSet[BudgetedCache] = weakref.WeakSet()
        self.reclaimed = 0  # bytes dropped to keep the bound (a metric)

    @property
    def used(self) -> int:
        """The running count the bound is checked against (never below what is held)."""
        return self._used

    def held(self) -> int:
        """Bytes held right now by the caches still alive (for metrics)."""
        return sum(cache.size_bytes for cache in list(self._caches))

    def join(self, cache: BudgetedCache) -> None:
        self._caches.add(cache)

    def forget(self, cache: BudgetedCache) -> None:
        if cache in self._caches:
            self._caches.discard(cache)
            self._used -= cache.size_bytes

    def grew(self, delta: int) -> None:
        """A cache of this budget now holds ``delta`` more bytes (negative: fewer)."""
        self._used += delta
        if self._used > self.bytes_max:
            self._reclaim()

    def _reclaim(self) -> None:
        caches = list(self._caches)
        self._used = sum(cache.size_bytes for cache in caches)
        if self._used <= self.bytes_max:
            return
        target = self.bytes_max - self.bytes_max // 10
        while self._used > target and caches:
            largest = max(caches, key=lambda cache: cache.size_bytes)
            freed = largest.shrink(self._used - target)
            if freed <= 0:
                break
            self._used -= freed
            self.reclaimed += freed
