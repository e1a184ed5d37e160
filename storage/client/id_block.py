"""Ledger ids handed out from blocks reserved in etcd (pure).

Owns: the block of ledger ids this process has reserved and the next one to
hand out. Rule (docs/decisions/0003 "ledger-id"): the counter key holds the
next id nobody has reserved; a process reserves ``block_size`` ids at once by
one compare-and-swap of the counter from ``v`` to ``v + block_size`` and hands
out ``v, v+1, ... v+block_size-1`` itself. Two processes never get the same
block (the CAS), an id is handed out once, and ids of a block left unused when
the process ends are never handed out again (the counter only grows). So a new
ledger costs one etcd write to the counter per ``block_size`` ledgers, not one
each: topic creation on many gateways does not contend on one key.
A caller that needs an id above one it saw (a topic's next ledger must have a
greater id than its last, wherever that was created: positions order by ledger
id) passes ``above``: the ids of the block up to it are skipped, or a new block
is reserved, whose ids are above every id handed out before.
"""

from __future__ import annotations

ID_BLOCK_SIZE = 1000


class IdBlock:
    def __init__(self, block_size: int = ID_BLOCK_SIZE) -> None:
        if block_size < 1:
            raise ValueError(f"ledger id block size must be >= 1, got {block_size}")
        self.block_size = block_size
        self._next = 0
        self._end = 0  # exclusive; empty block at first

    def take(self, above: int = -1) -> int | None:
        """The next id of the reserved block greater than ``above``, or None when a
        new block is needed."""
        if self._next <= above:
            self._next = min(above + 1, self._end)
        if self._next >= self._end:
            return None
        ledger_id = self._next
        self._next += 1
        return ledger_id

    def bump(self, counter: bytes | None) -> bytes:
        """The counter's new value when reserving a block from ``counter``."""
        return str(_parse(counter) + self.block_size).encode()

    def reserved(self, counter_after: bytes) -> None:
        """The CAS stored ``counter_after``: this process owns the block below it."""
        end = _parse(counter_after)
        self._next, self._end = end - self.block_size, end


def _parse(counter: bytes | None) -> int:
    value = int(counter) if counter else 0
    if value < 0:
        raise ValueError(f"ledger id counter holds {value}")
    return value
