"""Per-ledger rules of a storage node: fencing, deletion, LAC, last entry stored (pure).

Owns: one ``LedgerInfo`` per ledger this node holds, the ids of deleted
ledgers (``Tombstones``) and the ids changed since the last checkpoint took
them (``take_changes``). No I/O.
Rules (BookKeeper ``Bookie.fenceLedger`` / ``LedgerDescriptorImpl``):
- the fenced flag is only ever set, never cleared; fencing an unknown ledger
  creates it, fenced (a recovering client may fence a node before any entry);
- a normal add on a fenced ledger is refused (``Status.FENCED``); a recovery add
  is allowed;
- a deleted ledger stays deleted (ids are never reused): its state goes, its id
  joins the tombstones, and every later add is refused - a normal add as
  ``FENCED`` (the fence outlives the ledger), a recovery add as
  ``NO_SUCH_LEDGER``; a fence of it changes nothing; a late durable add of it
  is not recorded;
- LAC is the highest LAC piggybacked on a stored entry: it never decreases;
- ``last_entry_id`` is the highest entry id stored (NO_ENTRY when none).
The shell decides *when* a change counts (adds count once durable); this module
only says what the state is and whether a request may proceed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from storage.errors import Status
from storage.node.tombstones import Tombstones
from storage.types import NO_ENTRY


@dataclass(slots=True)
class LedgerInfo:
    fenced: bool = False
    lac: int = NO_ENTRY
    last_entry_id: int = NO_ENTRY


class LedgerStates:
    def __init__(self) -> None:
        self._ledgers: dict[int, LedgerInfo] = {}
        self.held: Mapping[int, LedgerInfo] = self._ledgers  # read-only view for the add fast path
        self.fenced: set[int] = set()  # read-only view for the add fast path
        self.deleted = Tombstones()
        self._changed: set[int] = set()  # ids whose state changed since ``take_changes``

    def __len__(self) -> int:
        return len(self._ledgers)

    def __contains__(self, ledger_id: int) -> bool:
        return ledger_id in self._ledgers

    def get(self, ledger_id: int) -> LedgerInfo | None:
        return self._ledgers.get(ledger_id)

    def ledger_ids(self) -> list[int]:
        return list(self._ledgers)

    def check_add(self, ledger_id: int, recovery: bool) -> Status:
        """May an add for ``ledger_id`` be accepted right now?"""
        info = self._ledgers.get(ledger_id)
        if info is not None and info.fenced and not recovery:
            return Status.FENCED
        if info is None and ledger_id in self.deleted:
            return Status.NO_SUCH_LEDGER if recovery else Status.FENCED
        return Status.OK

    def on_stored(self, ledger_id: int, entry_id: int, lac: int) -> bool:
        """An entry became durable. Returns True when the ledger's LAC advanced."""
        self._changed.add(ledger_id)
        info = self._ledgers.get(ledger_id)
        if info is None:
            if ledger_id in self.deleted:
                return False
            info = self._ledgers[ledger_id] = LedgerInfo()
        info.last_entry_id = max(info.last_entry_id, entry_id)
        if lac > info.lac:
            info.lac = lac
            return True
        return False

    def fence(self, ledger_id: int) -> bool:
        """Set the fenced flag (creating the ledger if unknown).
        Returns True if it was already fenced (a deleted ledger counts as fenced)."""
        if ledger_id not in self._ledgers and ledger_id in self.deleted:
            return True
        self._changed.add(ledger_id)
        self.fenced.add(ledger_id)
        info = self._ledgers.get(ledger_id)
        if info is None:
            self._ledgers[ledger_id] = LedgerInfo(fenced=True)
            return False
        was = info.fenced
        info.fenced = True
        return was

    def restore(self, ledger_id: int, fenced: bool, lac: int, last_entry_id: int) -> None:
        """Merge persisted state at start-up (flags only set, numbers only raised)."""
        if ledger_id in self.deleted:
            return
        self._changed.add(ledger_id)
        info = self._ledgers.setdefault(ledger_id, LedgerInfo())
        info.fenced = info.fenced or fenced
        if info.fenced:
            self.fenced.add(ledger_id)
        info.lac = max(info.lac, lac)
        info.last_entry_id = max(info.last_entry_id, last_entry_id)

    def delete(self, ledger_id: int) -> bool:
        """The ledger was deleted from the cluster: forget its state, keep its id as
        a tombstone. Returns True if the node held state for it."""
        self.deleted.add(ledger_id)
        self._changed.add(ledger_id)
        self.fenced.discard(ledger_id)
        return self._ledgers.pop(ledger_id, None) is not None

    def lac_reply(self, ledger_id: int) -> tuple[int, int] | None:
        """(lac, last_entry_id), or None for an unknown ledger."""
        info = self._ledgers.get(ledger_id)
        if info is None:
            return None
        return info.lac, info.last_entry_id

    def lac_advanced_past(self, ledger_id: int, previous_lac: int) -> bool:
        info = self._ledgers.get(ledger_id)
        return info is not None and info.lac > previous_lac

    def take_changes(self) -> dict[int, tuple[bool, int, int] | None]:
        """The state of each ledger changed since the previous call (None: no longer
        held, i.e. deleted), then forgets them: a checkpoint's work is proportional to
        what changed, not to every ledger the node holds."""
        changed, self._changed = self._changed, set()
        ledgers = self._ledgers
        out: dict[int, tuple[bool, int, int] | None] = {}
        for lid in changed:
            info = ledgers.get(lid)
            out[lid] = None if info is None else (info.fenced, info.lac, info.last_entry_id)
        return out
