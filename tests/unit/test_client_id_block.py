"""Ledger id blocks: one counter write per block, ids never handed out twice."""

from __future__ import annotations

import pytest

from storage.client.id_block import IdBlock

pytestmark = pytest.mark.unit


def test_ids_come_from_the_reserved_block_then_a_new_one_is_needed() -> None:
    ids = IdBlock(3)
    assert ids.take() is None  # nothing reserved yet
    counter = ids.bump(None)
    assert counter == b"3"
    ids.reserved(counter)
    assert [ids.take(), ids.take(), ids.take(), ids.take()] == [0, 1, 2, None]
    ids.reserved(ids.bump(b"7"))  # another process reserved 3..6 meanwhile
    assert [ids.take(), ids.take(), ids.take(), ids.take()] == [7, 8, 9, None]


def test_two_processes_sharing_a_counter_never_hand_out_the_same_id() -> None:
    a, b = IdBlock(4), IdBlock(5)
    counter: bytes | None = None
    handed: list[int] = []
    for turn in range(40):
        block = a if turn % 3 else b
        ledger_id = block.take()
        if ledger_id is None:
            counter = block.bump(counter)  # the CAS: one writer at a time wins
            block.reserved(counter)
            ledger_id = block.take()
        assert ledger_id is not None
        handed.append(ledger_id)
    assert len(set(handed)) == len(handed)
    assert max(handed) < int(counter or b"0")  # the counter stays above every id handed out


def test_bad_block_size_and_counter_are_refused() -> None:
    with pytest.raises(ValueError):
        IdBlock(0)
    with pytest.raises(ValueError):
        IdBlock(2).bump(b"-5")


def test_an_id_above_one_seen_skips_the_rest_of_the_block_or_takes_a_new_one() -> None:
    ids = IdBlock(10)
    ids.reserved(ids.bump(b"0"))  # owns 0..9
    assert ids.take() == 0
    assert ids.take(above=4) == 5  # 1..4 are skipped for good
    assert ids.take() == 6
    assert ids.take(above=9) is None  # nothing above 9 left here: a new block
    ids.reserved(ids.bump(b"25"))  # another gateway created the log's last ledger 24
    assert ids.take(above=24) == 25
