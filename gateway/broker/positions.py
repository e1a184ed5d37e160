"""Positions in a topic's log, shared by the cursor, dispatchers and message ids.

Owns: ``Position`` (an entry: ledger id, entry id) and ``MessagePosition`` (a
message inside an entry: plus batch index), both totally ordered. Rule
(Pulsar): ledgers of one topic have increasing ids, so (ledger, entry) order
is log order; ``entry_id = -1`` means "before entry 0 of that ledger".
"""

from __future__ import annotations

from dataclasses import dataclass

NO_BATCH = -1  # batch index of a message that is the whole entry


# Positions, messages and deliveries are built per message on the delivery path: they are
# immutable by convention (never assigned after construction) but not ``frozen``, whose
# __init__ costs ~2.4x (object.__setattr__ per field); ``unsafe_hash`` keeps them hashable.
@dataclass(slots=True, order=True, unsafe_hash=True)
class Position:
    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"


@dataclass(slots=True, order=True, unsafe_hash=True)  # immutable by convention (above)
class MessagePosition:
    ledger_id: int
    entry_id: int
    batch_index: int = NO_BATCH

    @property
    def entry(self) -> Position:
        return Position(self.ledger_id, self.entry_id)

    def __str__(self) -> str:
        base = f"{self.ledger_id}:{self.entry_id}"
        return base if self.batch_index == NO_BATCH else f"{base}:{self.batch_index}"


EARLIEST = Position(-1, -1)
LATEST = Position(2**63 - 1, 2**63 - 1)
