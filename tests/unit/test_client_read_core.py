"""Read routing: replica order, speculative reads, failover, checksums, bounds."""

from __future__ import annotations

import pytest

from storage import wire
from storage.client.read_core import (
    EntryFound,
    EntryReadCore,
    LacPoll,
    RangePart,
    ReadFailed,
    ReadFrom,
    check_readable,
    plan_range,
    read_bound,
)
from storage.errors import LedgerClosed, NodeUnavailable, NoSuchEntry, Status
from storage.types import LedgerMetadata, LedgerState, Segment

pytestmark = pytest.mark.unit

WS = ("A", "B", "C")


def data(entry_id: int = 4) -> bytes:
    return wire.encode_entry(3, entry_id, entry_id - 1, b"hello")


def test_first_replica_answers() -> None:
    core = EntryReadCore(3, 4, WS, speculative_ms=50)
    assert core.start(0) == [ReadFrom("A")]
    effects = core.on_response("A", Status.OK, data(), 5)
    assert isinstance(effects[0], EntryFound) and effects[0].entry.payload == b"hello"


def test_speculative_read_after_timeout_and_first_answer_wins() -> None:
    core = EntryReadCore(3, 4, WS, speculative_ms=50)
    core.start(0)
    assert core.next_deadline_ms() == 50
    assert core.on_timer(49) == []
    assert core.on_timer(50) == [ReadFrom("B")]
    effects = core.on_response("B", Status.OK, data(), 60)
    assert isinstance(effects[0], EntryFound)
    assert core.on_response("A", Status.OK, data(), 61) == []  # late answer ignored


def test_error_or_bad_checksum_fails_over_at_once() -> None:
    core = EntryReadCore(3, 4, WS)
    core.start(0)
    assert core.on_response("A", Status.UNAVAILABLE, b"", 1) == [ReadFrom("B")]
    corrupt = data()[:-1] + b"?"
    assert core.on_response("B", Status.OK, corrupt, 2) == [ReadFrom("C")]
    assert isinstance(core.on_response("C", Status.OK, data(), 3)[0], EntryFound)


def test_all_replicas_fail_gives_typed_errors() -> None:
    core = EntryReadCore(3, 4, WS)
    core.start(0)
    core.on_response("A", Status.NO_SUCH_ENTRY, b"", 1)
    core.on_response("B", Status.NO_SUCH_ENTRY, b"", 1)
    effects = core.on_response("C", Status.NO_SUCH_ENTRY, b"", 1)
    assert isinstance(effects[0], ReadFailed) and isinstance(effects[0].error, NoSuchEntry)
    core = EntryReadCore(3, 4, WS)
    core.start(0)
    core.on_response("A", Status.NO_SUCH_ENTRY, b"", 1)
    core.on_response("B", Status.UNAVAILABLE, b"", 1)
    effects = core.on_response("C", Status.OK, data(5), 1)  # wrong entry id
    assert isinstance(effects[0], ReadFailed) and isinstance(effects[0].error, NodeUnavailable)


def test_waits_for_outstanding_speculative_reads_before_failing() -> None:
    core = EntryReadCore(3, 4, ("A", "B"), speculative_ms=10)
    core.start(0)
    assert core.on_timer(10) == [ReadFrom("B")]
    assert core.next_deadline_ms() is None
    assert core.on_response("B", Status.UNAVAILABLE, b"", 11) == []  # A may still answer
    assert isinstance(core.on_response("A", Status.OK, data(), 12)[0], EntryFound)


def open_md() -> LedgerMetadata:
    return LedgerMetadata(3, 3, 3, 2, LedgerState.OPEN, (Segment(0, WS),))


def test_reads_bounded_by_lac_when_open_and_by_last_entry_when_closed() -> None:
    m = open_md()
    assert read_bound(m, 7) == 7
    check_readable(m, 7, 0, 7)
    with pytest.raises(NoSuchEntry):
        check_readable(m, 7, 0, 8)
    closed = m.with_changes(state=LedgerState.CLOSED, last_entry_id=9)
    assert read_bound(closed, 7) == 9
    check_readable(closed, 7, 8, 9)
    with pytest.raises(LedgerClosed):
        check_readable(closed, 7, 9, 10)


def test_lac_poll_returns_first_advance_or_max_when_all_answered() -> None:
    poll = LacPoll(WS, previous=5)
    assert poll.on_response("A", Status.TIMEOUT, 5) is None
    assert poll.on_response("C", Status.TIMEOUT, 6) == 6  # a timed-out poll still reports its LAC
    poll = LacPoll(WS, previous=5)
    assert poll.on_response("B", Status.OK, 8) == 8
    poll = LacPoll(WS, previous=5)
    assert poll.on_response("A", Status.OK, 5) is None
    assert poll.on_response("B", Status.UNAVAILABLE, 0) is None
    assert poll.on_response("C", Status.OK, 4) == 5


def test_plan_range_splits_at_segments_and_only_ranges_without_striping() -> None:
    m = LedgerMetadata(
        3, 3, 3, 2, LedgerState.CLOSED, (Segment(0, WS), Segment(10, ("A", "B", "D"))), last_entry_id=20
    )
    assert plan_range(m, 5, 15) == [RangePart(5, 9, WS), RangePart(10, 15, ("A", "B", "D"))]
    striped = LedgerMetadata(3, 4, 2, 2, LedgerState.OPEN, (Segment(0, ("A", "B", "C", "D")),))
    assert plan_range(striped, 0, 3) == [RangePart(0, 3, ())]
