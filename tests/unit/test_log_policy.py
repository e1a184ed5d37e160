"""Rollover and trim decisions of the managed log (log_policy)."""

from __future__ import annotations

import pytest

from gateway.broker.log_policy import (
    ROLL_RETRY_MS,
    AppendRoute,
    Retention,
    RolloverPolicy,
    ledgers_to_trim,
    new_ledger_due,
    route_append,
    should_roll,
    writer_lost_quorum,
)
from storage.errors import Fenced, QuorumLost
from storage.formats.log_record import LedgerInfo
from storage.formats.positions import Position

pytestmark = pytest.mark.unit

NOW = 10_000_000


def ledgers() -> list[LedgerInfo]:
    return [
        LedgerInfo(1, 10, 1000, NOW - 3_600_000),
        LedgerInfo(2, 10, 1000, NOW - 60_000),
        LedgerInfo(3, 10, 1000, NOW - 1000),
        LedgerInfo(4),  # open
    ]


def test_should_roll_on_entries_bytes_or_age_but_never_empty() -> None:
    policy = RolloverPolicy(entries_max=5, bytes_max=100, age_max_ms=1000)
    assert should_roll(policy, 5, 1, 0, 0)
    assert should_roll(policy, 1, 100, 0, 0)
    assert should_roll(policy, 1, 1, 0, 1000)
    assert not should_roll(policy, 4, 99, 0, 999)
    assert not should_roll(policy, 0, 0, 0, 10**9)


def test_no_retention_trims_every_consumed_closed_ledger() -> None:
    assert ledgers_to_trim(ledgers(), Position(3, 9), Retention(0, 0), NOW) == [1, 2, 3]
    assert ledgers_to_trim(ledgers(), Position(2, 5), Retention(0, 0), NOW) == [1]
    assert ledgers_to_trim(ledgers(), None, Retention(0, 0), NOW) == [1, 2, 3]  # no durable cursor


def test_the_open_ledger_and_unconsumed_ones_are_kept() -> None:
    assert ledgers_to_trim(ledgers(), Position(1, 8), Retention(0, 0), NOW) == []
    assert ledgers_to_trim([LedgerInfo(9)], None, Retention(0, 0), NOW) == []


def test_retention_by_time_and_size() -> None:
    assert ledgers_to_trim(ledgers(), Position(3, 9), Retention(5, -1), NOW) == [1]  # 5 minutes
    assert ledgers_to_trim(ledgers(), Position(3, 9), Retention(-1, -1), NOW) == []  # unlimited
    tiny = Retention(-1, 0)
    assert ledgers_to_trim(ledgers(), Position(3, 9), tiny, NOW) == [1, 2, 3]


def test_a_log_without_a_writable_ledger_tries_a_new_one_at_once_then_spaced() -> None:
    assert writer_lost_quorum(QuorumLost("x")) and not writer_lost_quorum(Fenced("x"))
    assert not writer_lost_quorum(None)
    assert new_ledger_due(None, 0)  # nothing failed yet: try at once
    assert not new_ledger_due(1_000, 1_000 + ROLL_RETRY_MS - 1)  # the last attempt failed just now
    assert new_ledger_due(1_000, 1_000 + ROLL_RETRY_MS)


def test_an_append_waits_for_a_roll_writes_or_gets_a_retriable_error() -> None:
    lost = QuorumLost("x")
    assert route_append(False, True, False, None, None, NOW) is AppendRoute.WRITE
    assert route_append(True, True, False, None, None, NOW) is AppendRoute.WAIT  # a roll is under way
    assert route_append(False, False, False, None, None, NOW) is AppendRoute.WAIT  # no writer yet
    assert route_append(False, True, False, lost, None, NOW) is AppendRoute.ROLL  # lost its quorum
    assert route_append(False, True, True, None, None, NOW) is AppendRoute.ROLL
    assert route_append(False, True, True, None, NOW - 1, NOW) is AppendRoute.REFUSE  # failed just now
    assert route_append(False, True, True, None, NOW - ROLL_RETRY_MS, NOW) is AppendRoute.ROLL
    assert route_append(True, True, True, lost, NOW, NOW) is AppendRoute.WAIT
