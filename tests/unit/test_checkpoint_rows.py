"""The checkpoint's ledger rows, kept by change, equal a full listing of every ledger."""

from __future__ import annotations

import random

from storage.node.checkpoint import Checkpoint, CheckpointRows
from storage.node.ledger_state import LedgerStates


def test_rows_kept_by_change_write_the_same_file_as_a_full_listing() -> None:
    rng = random.Random(7)
    states, rows = LedgerStates(), CheckpointRows()
    for step in range(2_000):
        lid = rng.randrange(60)
        op = rng.random()
        if op < 0.7:
            states.on_stored(lid, rng.randrange(1_000), rng.randrange(-1, 1_000))
        elif op < 0.85:
            states.fence(lid)
        elif op < 0.9:
            states.delete(lid)
        if step % 37 == 0:  # a checkpoint
            rows.apply(states.take_changes())
            full = {lid: (i.fenced, i.lac, i.last_entry_id) for lid, i in states.held.items()}
            deleted = [(1, 2)]
            data = rows.checkpoint_json((3, step), deleted)
            read = Checkpoint.from_json(data)  # the rows may come in another order
            assert read == Checkpoint((3, step), full, deleted)


def test_a_checkpoint_reencodes_only_what_changed() -> None:
    states, rows = LedgerStates(), CheckpointRows()
    for lid in range(1_000):
        states.on_stored(lid, 0, -1)
    rows.apply(states.take_changes())
    states.on_stored(5, 1, 0)
    changes = states.take_changes()
    assert list(changes) == [5]  # not the 1,000 ledgers held
    rows.apply(changes)
    assert len(Checkpoint.from_json(rows.checkpoint_json((0, 0), [])).ledgers) == 1_000
