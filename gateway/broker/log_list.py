"""A managed log's ledger list in etcd: one record, replaced only by compare-and-swap (asyncio shell).

Owns: ``LedgerList``, this owner's copy of the record
``coordination.keys.managed_log(topic)`` (codec ``storage.formats.log_record``):
the ledgers, when the topic was created, its extra fields (the ownership
epoch, ``terminated``) and the revision last read or written. Rules
(docs/architecture.md §4): ``load`` claims the owner's epoch
(``log_state.claim_epoch``: a list opened under a newer epoch is refused before
anything is fenced) and every write keeps it; every write is a CAS on the
revision this owner last saw, and a failed one means another gateway changed
the list - it owns the topic now: ``LogFenced``. A change of the list reads
and replaces it under ``lock``, one at a time.
"""

from __future__ import annotations

import asyncio
from typing import Any

from coordination import keys
from coordination.store import MetadataStore
from gateway.broker.log_state import LogFenced, TopicNotFound, claim_epoch
from storage.formats.log_record import LedgerInfo, decode_state, encode_state


class LedgerList:
    def __init__(
        self,
        store: MetadataStore,
        topic_path: str,
        ledgers: list[LedgerInfo],
        created_ms: int,
        extra: dict[str, Any],
        revision: int,
    ) -> None:
        self._store = store
        self._key = keys.managed_log(topic_path)
        self.topic_path = topic_path
        self.ledgers = ledgers
        self.created_ms = created_ms
        self.extra = extra
        self.revision = revision
        self.lock = asyncio.Lock()  # held by a change (roll, trim, totals, terminate, close) throughout

    @classmethod
    async def load(cls, store: MetadataStore, topic_path: str, epoch: int) -> LedgerList:
        """The list as stored, with ``epoch`` claimed (written by the first ``replace``)."""
        current = await store.get(keys.managed_log(topic_path))
        if current is None:
            raise TopicNotFound(f"topic {topic_path} does not exist")
        ledgers, created_ms, extra = decode_state(current.value)
        extra = claim_epoch(topic_path, extra, epoch)
        return cls(store, topic_path, ledgers, created_ms, extra, current.mod_revision)

    @property
    def terminated(self) -> bool:
        return bool(self.extra.get("terminated"))

    async def replace(self, new_list: list[LedgerInfo]) -> None:
        """Write ``new_list`` (with the extra fields) if nobody changed the record since."""
        revision = await self._store.compare_and_swap(
            self._key, encode_state(new_list, self.created_ms, self.extra), self.revision
        )
        if revision is None:
            raise LogFenced(f"topic {self.topic_path}: ledger list changed by another gateway")
        self.revision = revision
        self.ledgers = new_list
