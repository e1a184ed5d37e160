"""Per-ledger rules on a node: fencing is sticky, LAC never decreases, recovery adds pass."""

from __future__ import annotations

import pytest

from storage.errors import Status
from storage.node.ledger_state import LedgerStates
from storage.types import NO_ENTRY

pytestmark = pytest.mark.unit


def test_unknown_ledger_accepts_adds_and_has_no_lac() -> None:
    s = LedgerStates()
    assert s.check_add(1, recovery=False) is Status.OK
    assert s.lac_reply(1) is None
    assert 1 not in s


def test_stored_entries_raise_last_entry_and_lac() -> None:
    s = LedgerStates()
    assert s.on_stored(1, 0, NO_ENTRY) is False
    assert s.on_stored(1, 1, 0) is True
    assert s.on_stored(1, 3, 2) is True
    assert s.lac_reply(1) == (2, 3)
    assert len(s) == 1


def test_lac_and_last_entry_never_decrease() -> None:
    s = LedgerStates()
    s.on_stored(1, 9, 8)
    assert s.on_stored(1, 4, 3) is False  # a late resend of an old entry
    assert s.lac_reply(1) == (8, 9)
    s.restore(1, fenced=False, lac=2, last_entry_id=1)
    assert s.lac_reply(1) == (8, 9)


def test_fence_refuses_normal_adds_but_not_recovery_adds() -> None:
    s = LedgerStates()
    s.on_stored(1, 0, NO_ENTRY)
    assert s.fence(1) is False
    assert s.check_add(1, recovery=False) is Status.FENCED
    assert s.check_add(1, recovery=True) is Status.OK
    assert s.check_add(2, recovery=False) is Status.OK  # other ledgers unaffected


def test_fence_is_idempotent_and_never_cleared() -> None:
    s = LedgerStates()
    s.fence(1)
    assert s.fence(1) is True
    s.on_stored(1, 0, 0)  # a recovery add
    s.restore(1, fenced=False, lac=0, last_entry_id=0)
    assert s.check_add(1, recovery=False) is Status.FENCED
    assert s.get(1) is not None and s.get(1).fenced  # type: ignore[union-attr]


def test_fence_on_unknown_ledger_creates_it_fenced() -> None:
    s = LedgerStates()
    assert s.fence(7) is False
    assert s.lac_reply(7) == (NO_ENTRY, NO_ENTRY)
    assert s.check_add(7, recovery=False) is Status.FENCED


def test_lac_advanced_past_for_long_poll() -> None:
    s = LedgerStates()
    assert s.lac_advanced_past(1, -1) is False
    s.on_stored(1, 1, 0)
    assert s.lac_advanced_past(1, -1) is True
    assert s.lac_advanced_past(1, 0) is False


def test_delete_forgets_ledger_and_snapshot_roundtrip() -> None:
    s = LedgerStates()
    s.on_stored(1, 2, 1)
    s.fence(2)
    snap = s.take_changes()
    assert snap == {1: (False, 1, 2), 2: (True, NO_ENTRY, NO_ENTRY)}
    assert s.delete(1) is True
    assert s.delete(1) is False
    assert s.ledger_ids() == [2]
    t = LedgerStates()
    for lid, state in snap.items():
        assert state is not None
        t.restore(lid, *state)
    assert t.take_changes() == snap


def test_a_deleted_ledger_refuses_adds_forever_and_a_fence_does_not_revive_it() -> None:
    s = LedgerStates()
    s.fence(4)  # recovery fenced it, then it was closed empty and deleted
    assert s.delete(4) is True
    assert s.delete(9) is False  # a ledger this node never held: tombstoned all the same
    for lid in (4, 9):
        assert s.check_add(lid, recovery=False) is Status.FENCED
        assert s.check_add(lid, recovery=True) is Status.NO_SUCH_LEDGER
        assert s.fence(lid) is True and lid not in s
        assert s.on_stored(lid, 0, NO_ENTRY) is False and lid not in s  # a late add is not recorded
        s.restore(lid, False, 3, 3)
        assert lid not in s
    assert s.deleted.ranges() == [(4, 4), (9, 9)]
    assert s.check_add(5, recovery=False) is Status.OK


def test_take_changes_names_only_the_ledgers_changed_since_the_last_call() -> None:
    s = LedgerStates()
    for lid in range(1, 101):
        s.on_stored(lid, 0, NO_ENTRY)
    assert len(s.take_changes()) == 100
    s.on_stored(7, 1, 0)
    s.fence(8)
    s.delete(9)
    assert s.take_changes() == {7: (False, 0, 1), 8: (True, NO_ENTRY, 0), 9: None}
    assert s.take_changes() == {}  # a checkpoint with nothing new re-encodes nothing
