"""LedgerLayout answers the cursor's questions about the log like a plain list of
entries would, including empty ledgers, ``entry_id = -1`` and unknown ledgers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.broker.log_layout import LedgerLayout
from storage.formats.positions import EARLIEST, LATEST, Position

pytestmark = pytest.mark.unit


@st.composite
def layouts(draw: st.DrawFn) -> list[tuple[int, int]]:
    ledgers, ledger = [], draw(st.integers(0, 3))
    for _ in range(draw(st.integers(0, 5))):
        ledgers.append((ledger, draw(st.integers(0, 4))))
        ledger += draw(st.integers(1, 3))
    return ledgers


def probe_positions(ledgers: list[tuple[int, int]]) -> list[Position]:
    probes = [EARLIEST, LATEST, Position(-5, 3), Position(100, 0)]
    for ledger, count in ledgers:
        probes += [Position(ledger, e) for e in range(-1, count + 2)]
        probes += [Position(ledger + 1, -1), Position(ledger + 1, 0)]
    return probes


@settings(max_examples=60)
@given(layouts(), st.data())
def test_matches_a_flat_list_of_entries(ledgers: list[tuple[int, int]], data: st.DataObject) -> None:
    layout = LedgerLayout(ledgers)
    flat = [Position(ledger, e) for ledger, count in ledgers for e in range(count)]
    assert layout.total_entries == len(flat)
    assert layout.ledgers == ledgers
    for index, position in enumerate(flat, start=1):
        assert layout.at(index) == position
    for p in probe_positions(ledgers):
        assert layout.index(p) == sum(1 for e in flat if e <= p)
        after = [e for e in flat if e > p]
        assert layout.next_position(p) == (after[0] if after else None)
        count = data.draw(st.integers(0, 6))
        expected = p if not after or count == 0 else after[min(count, len(after)) - 1]
        assert layout.position_after(p, count) == expected
        q = data.draw(st.sampled_from(probe_positions(ledgers)))
        assert layout.entries_between(p, q) == sum(1 for e in flat if p < e <= q)


def test_last_position() -> None:
    assert LedgerLayout([]).last_position() == EARLIEST
    assert LedgerLayout([(4, 0)]).last_position() == Position(4, -1)
    assert LedgerLayout([(3, 2), (4, 0)]).last_position() == Position(3, 1)
    assert LedgerLayout([(3, 2), (4, 0), (6, 1)]).last_position() == Position(6, 0)


def test_next_position_skips_empty_and_unknown_ledgers() -> None:
    layout = LedgerLayout([(3, 2), (4, 0), (6, 1)])
    assert layout.next_position(Position(3, 1)) == Position(6, 0)
    assert layout.next_position(Position(5, 7)) == Position(6, 0)
    assert layout.next_position(EARLIEST) == Position(3, 0)
    assert layout.next_position(Position(6, 0)) is None


@pytest.mark.parametrize("ledgers", [[(3, 1), (3, 1)], [(4, 1), (3, 1)], [(3, -1)]])
def test_bad_layouts_are_programmer_errors(ledgers: list[tuple[int, int]]) -> None:
    with pytest.raises(AssertionError):
        LedgerLayout(ledgers)
