"""The managed log's small parts: its config, errors and entry cache.

Owns: ``LogConfig``, ``Quorums`` (E/Qw/Qa of a new ledger: the namespace's
persistence policy, else the config's), the log errors (``LogFenced`` means
another gateway owns the topic now; ``topic_missing`` says what to do about a
topic not created yet) and ``EntryCache``, the bounded cache of
recent entries that tailing consumers read from. Rule: the cache is bounded in
bytes and evicts oldest first. The ledger list's etcd codec is
``storage.formats.log_record``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.broker.cache_budget import CacheBudget
from gateway.broker.log_policy import RolloverPolicy
from gateway.errors import GatewayError
from storage.formats.positions import Position

CACHE_BYTES_MAX = 64 * 1024 * 1024  # recent entries kept per log


class LogError(GatewayError, code="log_error", retriable=True):
    """Base of the managed log's errors: the same request may succeed after a new lookup."""


class LogFenced(LogError, code="topic_fenced"):
    """Another gateway took this topic over (its ledger is fenced or the list moved)."""


class LogClosed(LogError, code="topic_unavailable"):
    """The log is closed (unloading) or terminated: it takes no appends."""


class TopicNotFound(GatewayError, code="not_found"):
    """The topic has no log yet (see ``topic_missing``)."""


def topic_missing(name: str, path: str, namespace: str, *, auto_create: bool) -> TopicNotFound:
    """The 404 for a topic with no log yet, asked for by a request that does not create
    one (stats, lookups): what is true of the namespace, and what to do (pure)."""
    if auto_create:
        return TopicNotFound(
            f"topic {name} does not exist yet: namespace {namespace} creates it on the first "
            f"publish or subscribe, or create it now with PUT /admin/v2/{path}"
        )
    return TopicNotFound(
        f"topic {name} does not exist and namespace {namespace} does not create topics on first use: "
        f"create it with PUT /admin/v2/{path}, or check the name"
    )


@dataclass(frozen=True, slots=True)
class Quorums:
    """Ensemble size E, write quorum Qw and ack quorum Qa of a ledger to create."""

    ensemble_size: int
    write_quorum: int
    ack_quorum: int


# the quorums a topic's next ledger gets now (its namespace's persistence policy, as
# cached); None: the gateway's LogConfig. Called once per ledger created.
QuorumSource = Callable[[], Quorums | None]


@dataclass(frozen=True, slots=True)
class LogConfig:
    ensemble_size: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    rollover: RolloverPolicy = field(default_factory=RolloverPolicy)
    cache_bytes_max: int = CACHE_BYTES_MAX
    # shared by every log opened with this config (one per gateway)
    cache_budget: CacheBudget = field(default_factory=CacheBudget)

    def quorums(self, source: QuorumSource | None = None) -> Quorums:
        """``source``'s quorums when it has any, else this config's defaults."""
        chosen = source() if source is not None else None
        if chosen is not None:
            return chosen
        return Quorums(self.ensemble_size, self.write_quorum, self.ack_quorum)


class EntryCache:
    """Recent entries, evicted oldest first beyond ``bytes_max`` (and when the
    gateway-wide ``budget`` needs the room: ``cache_budget``)."""

    def __init__(self, bytes_max: int, budget: CacheBudget | None = None) -> None:
        self._entries: OrderedDict[Position, bytes] = OrderedDict()
        self._bytes = 0
        self._bytes_max = bytes_max
        self._budget = budget
        if budget is not None:
            budget.join(self)

    def put(self, position: Position, payload: bytes) -> None:
        before = self._bytes
        old = self._entries.pop(position, None)
        if old is not None:  # put again: counted once, and now the newest
            self._bytes -= len(old)
        self._entries[position] = payload
        self._bytes += len(payload)
        while self._bytes > self._bytes_max and self._entries:
            _, old = self._entries.popitem(last=False)
            self._bytes -= len(old)
        if self._budget is not None:
            self._budget.grew(self._bytes - before)

    def get(self, position: Position) -> bytes | None:
        return self._entries.get(position)

    def shrink(self, nbytes: int) -> int:
        """Drop the oldest entries until ``nbytes`` are freed or none is left."""
        freed = 0
        while freed < nbytes and self._entries:
            _, old = self._entries.popitem(last=False)
            freed += len(old)
        self._bytes -= freed
        return freed

    @property
    def budget(self) -> CacheBudget | None:
        return self._budget

    def clear(self) -> None:
        """Drop everything and leave the budget (the log is closed)."""
        if self._budget is not None:
            self._budget.forget(self)
        self._entries.clear()
        self._bytes = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)


EPOCH_FIELD = "ownerEpoch"


def claim_epoch(topic_path: str, extra: dict[str, Any], epoch: int) -> dict[str, Any]:
    """The list's extra fields as an owner of ownership epoch ``epoch`` writes them.
    ``LogFenced`` if the list was opened under a newer epoch: a load that outlived
    its bundle's ownership must not fence (or write) the log of the owner after it.
    Epoch 0 (no ownership: tests, tools) claims nothing."""
    stored = int(extra.get(EPOCH_FIELD, 0))
    if stored > epoch:
        raise LogFenced(f"topic {topic_path}: opened by a newer owner (epoch {stored} > {epoch})")
    return {**extra, EPOCH_FIELD: epoch} if epoch else extra
