"""Every topic's stored figures for the cluster views, bounded and cached (asyncio shell).

Owns: ``StoredFigures``, which reads the ledger lists (``keys.MANAGED_LOGS``)
and persisted subscription records (``keys.CURSORS``) under a name prefix with
two etcd range reads, and asks the storage nodes what they confirm of a ledger
a list still shows open; the figures themselves come from the pure
``gateway.api.stored_figures``. Rules (docs/decisions/0016):
- never loads a topic: a cluster view after a restart shows what is stored,
  marked ``figures: "stored"`` with ``asOfMs``;
- the etcd records of a prefix are read at most once per ``CACHE_MS`` and for
  at most ``TOPICS_MAX`` topics (``truncated`` says when more exist);
- a ledger the list shows open is read (its metadata, else its last add
  confirmed from its nodes) at most ``OPEN_READS_MAX`` times per call,
  ``OPEN_READS_AT_ONCE`` at once, each within ``OPEN_READ_TIMEOUT_S``; what was
  read is kept ``OPEN_CACHE_MS`` (``OPEN_CACHE_MAX`` ledgers); a topic whose open
  ledger was not read counts its closed ledgers and says ``exact: false``;
- topics a gateway has loaded are skipped (their live figures are better);
- a topic's figures are computed again only when its records (or its open
  ledger's figures) changed: at most ``TOPICS_MAX`` kept; the computation
  gives the event loop a turn every ``YIELD_EVERY`` topics.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from coordination import keys
from coordination.clock import Clock
from coordination.store import MetadataStore
from gateway.api.stored_figures import OpenLedger, StoredTopic, open_ledger_id, stored_topic
from storage.errors import StorageError
from storage.types import LedgerMetadata, LedgerState

CACHE_MS = 3_000
TOPICS_MAX = 20_000
OPEN_READS_MAX = 64
OPEN_READS_AT_ONCE = 8
OPEN_READ_TIMEOUT_S = 1.0
OPEN_CACHE_MS = 10_000
OPEN_CACHE_MAX = 20_000
YIELD_EVERY = 256  # topics computed between two turns of the event loop


class LedgerReads(Protocol):
    """What this reads of a ledger: its metadata, and the nodes' last add confirmed."""

    async def metadata_of(self, ledger_id: int) -> LedgerMetadata: ...

    async def confirmed_entries(self, ledger_id: int) -> int: ...


_Inputs = tuple[bytes, tuple[tuple[str, bytes], ...], OpenLedger | None, bool]


@dataclass(frozen=True, slots=True)
class _Records:
    at_ms: int
    logs: dict[str, bytes]  # topic name -> ledger list record
    cursors: dict[str, dict[str, bytes]]  # topic name -> subscription -> record
    truncated: bool


def _topic_of(path: str) -> tuple[str, str] | None:
    """(full topic name, the rest) of ``domain/tenant/ns/topic[/rest]``."""
    parts = path.split("/", 4)
    if len(parts) < 4:
        return None
    name = f"{parts[0]}://{parts[1]}/{parts[2]}/{parts[3]}"
    return name, parts[4] if len(parts) == 5 else ""


class StoredFigures:
    def __init__(self, store: MetadataStore, ledgers: LedgerReads, clock: Clock) -> None:
        self._store = store
        self._ledgers = ledgers
        self._clock = clock
        self._records: dict[str, _Records] = {}
        self._open: dict[int, tuple[int, OpenLedger]] = {}  # ledger -> (read at, figures)
        # topic -> (the records its figures were computed from, the figures): a topic whose
        # records did not change is not computed again (most topics, most refreshes)
        self._computed: dict[str, tuple[_Inputs, StoredTopic | None]] = {}

    async def _read(self, path_prefix: str) -> _Records:
        now = self._clock.now_ms()
        cached = self._records.get(path_prefix)
        if cached is not None and now - cached.at_ms < CACHE_MS:
            return cached
        log_kvs, cursor_kvs = await asyncio.gather(
            self._store.list_prefix(keys.MANAGED_LOGS + path_prefix),
            self._store.list_prefix(keys.CURSORS + path_prefix),
        )
        logs: dict[str, bytes] = {}
        for kv in log_kvs[:TOPICS_MAX]:
            named = _topic_of(kv.key[len(keys.MANAGED_LOGS) :])
            if named is not None and not named[1]:
                logs[named[0]] = kv.value
        cursors: dict[str, dict[str, bytes]] = {}
        for kv in cursor_kvs:
            named = _topic_of(kv.key[len(keys.CURSORS) :])
            if named is not None and named[1] and named[0] in logs:
                cursors.setdefault(named[0], {})[named[1]] = kv.value
        records = _Records(now, logs, cursors, len(log_kvs) > TOPICS_MAX)
        if len(self._records) >= 64:  # prefixes asked (namespaces, tenants): a small set
            self._records.clear()
        self._records[path_prefix] = records
        return records

    async def _open_ledger(self, ledger_id: int) -> OpenLedger | None:
        try:
            async with asyncio.timeout(OPEN_READ_TIMEOUT_S):
                metadata = await self._ledgers.metadata_of(ledger_id)
                if metadata.state is LedgerState.CLOSED:
                    return OpenLedger(metadata.last_entry_id + 1, metadata.length)
                return OpenLedger(await self._ledgers.confirmed_entries(ledger_id), 0)
        except (StorageError, TimeoutError):
            return None

    async def _open_ledgers(self, wanted: list[int]) -> dict[int, OpenLedger]:
        now = self._clock.now_ms()
        out: dict[int, OpenLedger] = {}
        missing = []
        for ledger_id in wanted:
            cached = self._open.get(ledger_id)
            if cached is not None and now - cached[0] < OPEN_CACHE_MS:
                out[ledger_id] = cached[1]
            else:
                missing.append(ledger_id)
        limit = asyncio.Semaphore(OPEN_READS_AT_ONCE)

        async def one(ledger_id: int) -> OpenLedger | None:
            async with limit:
                return await self._open_ledger(ledger_id)

        chosen = missing[:OPEN_READS_MAX]
        for ledger_id, read in zip(chosen, await asyncio.gather(*(one(i) for i in chosen)), strict=True):
            if read is None:
                continue
            if len(self._open) >= OPEN_CACHE_MAX:
                self._open.clear()
            self._open[ledger_id] = (now, read)
            out[ledger_id] = read
        return out

    async def topics(self, path_prefix: str, loaded: Collection[str]) -> tuple[dict[str, StoredTopic], bool]:
        """The stored figures of every topic under ``path_prefix`` (``domain/tenant/ns/``
        or shorter) that is not in ``loaded``; and whether some topics were left out."""
        records = await self._read(path_prefix)
        chosen = {name: record for name, record in records.logs.items() if name not in loaded}
        open_ids = {name: open_ledger_id(record) for name, record in chosen.items()}
        read = await self._open_ledgers(sorted({i for i in open_ids.values() if i is not None}))
        now = self._clock.now_ms()
        out: dict[str, StoredTopic] = {}
        for count, (name, record) in enumerate(chosen.items(), 1):
            if count % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # a first view of many topics must not hold up the gateway
            ledger_id = open_ids[name]
            found = read.get(ledger_id) if ledger_id is not None else None
            cursors = records.cursors.get(name, {})
            inputs = (record, tuple(sorted(cursors.items())), found, ledger_id is None or found is not None)
            cached = self._computed.get(name)
            if cached is not None and cached[0] == inputs:
                figures = cached[1]
            else:
                figures = stored_topic(name, record, cursors, found, inputs[3], now)
                if len(self._computed) >= TOPICS_MAX:
                    self._computed.clear()
                self._computed[name] = (inputs, figures)
            if figures is not None:
                out[name] = figures
        return out, records.truncated


class ClientLedgerReads:
    """``LedgerReads`` over a ledger client (``storage.client.LedgerClient``)."""

    def __init__(self, client: _LedgerClient) -> None:
        self._client = client

    async def metadata_of(self, ledger_id: int) -> LedgerMetadata:
        return await self._client.metadata.read(ledger_id)

    async def confirmed_entries(self, ledger_id: int) -> int:
        reader = await self._client.open(ledger_id)
        with contextlib.suppress(StorageError):
            await reader.close()
        return reader.last_add_confirmed + 1


class _MetadataReads(Protocol):
    async def read(self, ledger_id: int) -> LedgerMetadata: ...


class _Reader(Protocol):
    @property
    def last_add_confirmed(self) -> int: ...

    async def close(self) -> None: ...


class _LedgerClient(Protocol):
    @property
    def metadata(self) -> _MetadataReads: ...

    async def open(self, ledger_id: int) -> _Reader: ...


def path_prefix(tenant: str | None = None, namespace: str | None = None) -> str:
    """The stored records' name prefix of a tenant or namespace (all: "")."""
    if tenant is None:
        return ""
    return f"persistent/{tenant}/" if namespace is None else f"persistent/{tenant}/{namespace}/"
