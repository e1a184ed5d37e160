"""Recovery core: fence coverage, read forward from max LAC, write back, close."""

from __future__ import annotations

import pytest

from storage import wire
from storage.client.recovery_core import (
    CloseLedger,
    RecoveryCore,
    RecoveryEffect,
    RecoveryFailed,
    SendFence,
    SendRead,
    SendRecoveryAdd,
    close_recovered,
)
from storage.errors import NodeUnavailable, QuorumLost, Status
from storage.types import LedgerMetadata, LedgerState, Segment

pytestmark = pytest.mark.unit

OK, NO_ENTRY = Status.OK, Status.NO_SUCH_ENTRY


def md(ensemble: tuple[str, ...] = ("A", "B", "C"), qw: int = 3, qa: int = 2) -> LedgerMetadata:
    return LedgerMetadata(9, len(ensemble), qw, qa, LedgerState.IN_RECOVERY, (Segment(0, ensemble),))


def entry(entry_id: int, payload: bytes = b"p", ledger_id: int = 9) -> bytes:
    return wire.encode_entry(ledger_id, entry_id, entry_id - 1, payload)


def reads(effects: list[RecoveryEffect]) -> list[tuple[str, int]]:
    return [(e.node, e.entry_id) for e in effects if isinstance(e, SendRead)]


def test_fence_waits_for_coverage_then_reads_from_max_lac() -> None:
    core = RecoveryCore(md(), read_window=2)
    assert core.start() == [SendFence("A"), SendFence("B"), SendFence("C")]
    assert core.on_fence_response("A", OK, 3) == []  # 1 of the needed 2
    effects = core.on_fence_response("B", OK, 5)
    assert core.fenced and core.start_entry_id == 6
    assert reads(effects) == [("A", 6), ("B", 6), ("C", 6), ("B", 7), ("C", 7), ("A", 7)]


def test_no_such_ledger_counts_as_a_fence_answer_but_errors_do_not() -> None:
    core = RecoveryCore(md())
    core.start()
    assert core.on_fence_response("A", Status.UNAVAILABLE, 0) == []
    assert core.on_fence_response("B", Status.NO_SUCH_LEDGER, 0) == []
    effects = core.on_fence_response("C", OK, -1)
    assert core.fenced and reads(effects)[0] == ("A", 0)


def test_fence_fails_when_coverage_became_impossible() -> None:
    core = RecoveryCore(md())
    core.start()
    core.on_fence_response("A", Status.UNAVAILABLE, 0)
    effects = core.on_fence_response("B", Status.UNAVAILABLE, 0)
    assert len(effects) == 1 and isinstance(effects[0], RecoveryFailed)
    assert isinstance(effects[0].error, QuorumLost)


def test_reads_forward_writes_back_and_closes_at_first_absent_entry() -> None:
    core = RecoveryCore(md(), read_window=4)
    core.start()
    core.on_fence_response("A", OK, 1)
    core.on_fence_response("B", OK, 0)  # max LAC 1 -> read from 2
    # entry 2 is on A only (an add that reached one node), entry 3 nowhere
    effects = core.on_read_response("A", 2, OK, entry(2, b"two"))
    adds = [e for e in effects if isinstance(e, SendRecoveryAdd)]
    assert [(a.node, a.entry_id) for a in adds] == [("C", 2), ("A", 2), ("B", 2)]
    recovery, *_, data = wire.parse_add(adds[0].body)
    assert recovery and data == entry(2, b"two")
    assert core.on_read_response("A", 3, NO_ENTRY, b"") == []
    out = core.on_read_response("B", 3, NO_ENTRY, b"")  # 2 negatives = Qw-Qa+1: absent
    assert not any(isinstance(e, CloseLedger) for e in out)  # write-back not acked yet
    assert core.on_recovery_add_response("A", 2, OK) == []
    assert core.on_recovery_add_response("C", 2, OK) == [CloseLedger(2, 3)]
    assert core.done


def test_one_negative_is_not_enough_to_call_an_entry_missing() -> None:
    core = RecoveryCore(md(), read_window=1)
    core.start()
    core.on_fence_response("A", OK, -1)
    core.on_fence_response("B", OK, -1)
    assert core.on_read_response("A", 0, NO_ENTRY, b"") == []
    assert core.on_read_response("B", 0, Status.UNAVAILABLE, b"") == []
    # C says it has entry 0 but the bytes are corrupt: not an answer either -> retry A? no, B and C
    effects = core.on_read_response("C", 0, OK, entry(0)[:-1] + b"X")
    assert sorted(reads(effects)) == [("B", 0), ("C", 0)]
    effects = core.on_read_response("C", 0, OK, entry(0))
    assert any(isinstance(e, SendRecoveryAdd) for e in effects)


def test_entry_with_wrong_ids_is_not_accepted() -> None:
    core = RecoveryCore(md(), read_window=1)
    core.start()
    core.on_fence_response("A", OK, -1)
    core.on_fence_response("B", OK, -1)
    assert core.on_read_response("A", 0, OK, entry(1)) == []
    assert core.on_read_response("B", 0, OK, entry(0, ledger_id=8)) == []


def test_gives_up_after_attempts_when_entry_is_neither_found_nor_absent() -> None:
    core = RecoveryCore(md(), read_window=1, attempts_max=2)
    core.start()
    core.on_fence_response("A", OK, -1)
    core.on_fence_response("B", OK, -1)
    core.on_read_response("A", 0, NO_ENTRY, b"")
    core.on_read_response("B", 0, Status.UNAVAILABLE, b"")
    assert reads(core.on_read_response("C", 0, Status.UNAVAILABLE, b"")) == [("B", 0), ("C", 0)]
    core.on_read_response("B", 0, Status.UNAVAILABLE, b"")
    effects = core.on_read_response("C", 0, Status.UNAVAILABLE, b"")
    assert len(effects) == 1 and isinstance(effects[0], RecoveryFailed)
    assert isinstance(effects[0].error, NodeUnavailable)


def test_entries_after_the_first_absent_one_are_ignored() -> None:
    core = RecoveryCore(md(), read_window=3)
    core.start()
    core.on_fence_response("A", OK, -1)
    core.on_fence_response("B", OK, -1)
    core.on_read_response("A", 2, OK, entry(2))  # stored on one node only, never confirmed
    core.on_read_response("A", 1, NO_ENTRY, b"")
    core.on_read_response("B", 1, NO_ENTRY, b"")
    effects = core.on_read_response("A", 0, OK, entry(0))
    adds = [e for e in effects if isinstance(e, SendRecoveryAdd)]
    assert {a.entry_id for a in adds} == {0}
    core.on_recovery_add_response("A", 0, OK)
    assert core.on_recovery_add_response("B", 0, OK) == [CloseLedger(0, 1)]


def test_empty_ledger_closes_at_minus_one() -> None:
    core = RecoveryCore(md(), read_window=2)
    core.start()
    core.on_fence_response("A", OK, -1)
    core.on_fence_response("B", OK, -1)
    core.on_read_response("A", 0, NO_ENTRY, b"")
    assert core.on_read_response("B", 0, NO_ENTRY, b"") == [CloseLedger(-1, 0)]


def test_absence_counts_only_from_nodes_whose_fence_reply_counted() -> None:
    # SEED=8 of the simulation: C still had the old writer's add waiting for its
    # fsync when it said "no such entry"; it never answered the fence, so its
    # negative must not end the ledger before entry 0.
    core = RecoveryCore(md(), read_window=2)
    core.start()
    core.on_fence_response("A", OK, -1)
    core.on_fence_response("B", OK, -1)
    assert core.on_read_response("C", 0, NO_ENTRY, b"") == []
    assert core.on_read_response("B", 0, NO_ENTRY, b"") == []
    effects = core.on_read_response("A", 0, OK, entry(0))
    assert {e.entry_id for e in effects if isinstance(e, SendRecoveryAdd)} == {0}


def test_lac_starting_point_never_below_last_segment_start() -> None:
    m = md().with_changes(segments=(Segment(0, ("A", "B", "X")), Segment(10, ("A", "B", "C"))))
    core = RecoveryCore(m, read_window=1)
    core.start()
    core.on_fence_response("A", OK, 4)
    effects = core.on_fence_response("B", OK, 3)
    assert core.start_entry_id == 10 and reads(effects)[0] == ("B", 10)


def test_write_back_fails_when_ack_quorum_is_impossible() -> None:
    core = RecoveryCore(md(), read_window=1)
    core.start()
    core.on_fence_response("A", OK, -1)
    core.on_fence_response("B", OK, -1)
    core.on_read_response("A", 0, OK, entry(0))
    core.on_recovery_add_response("A", 0, Status.UNAVAILABLE)
    effects = core.on_recovery_add_response("B", 0, Status.UNAVAILABLE)
    assert isinstance(effects[0], RecoveryFailed)


def test_striped_recovery_uses_each_entrys_write_set() -> None:
    core = RecoveryCore(md(("A", "B", "C", "D"), qw=3, qa=2), read_window=2)
    core.start()
    for n in "ABCD":
        effects = core.on_fence_response(n, OK, -1)
        if core.fenced:
            break
    assert reads(effects) == [("A", 0), ("B", 0), ("C", 0), ("B", 1), ("C", 1), ("D", 1)]


def test_close_recovered_converges_on_a_closed_ledger() -> None:
    m = md()
    closed = close_recovered(m, 5, 10)
    assert closed is not None and closed.state is LedgerState.CLOSED and closed.last_entry_id == 5
    assert close_recovered(closed, 6, 0) is None


def test_read_ahead_starts_at_two_entries_and_doubles_with_every_entry_found() -> None:
    core = RecoveryCore(md())  # the default window (64 at most)
    core.start()
    core.on_fence_response("A", OK, 4)
    first = reads(core.on_fence_response("B", OK, 4))
    assert sorted({entry_id for _, entry_id in first}) == [5, 6]  # not 64 entries x 3 nodes
    more = reads(core.on_read_response("A", 5, OK, entry(5)))
    assert sorted({entry_id for _, entry_id in more}) == [7, 8, 9]  # window 4: 6..9 in flight
    core.on_read_response("A", 6, OK, entry(6))
    assert len(core._reads) == 8  # window 8: 7..14
