"""What a publish answers for each message: where it was stored, or why not (pure).

Owns: ``PublishResult`` (ledger, entry, partition, batch index and size, the
base64 message id; or a duplicate deduplication dropped) and ``Outcome`` (a
result, or the ``GatewayError`` that refused the message). Rule: plain values;
a duplicate carries the id Pulsar answers it with
(``message_id.duplicate_id``), and the edges encode both kinds of outcome.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import GatewayError
from storage.formats.message_id import MessageId, duplicate_id
from storage.formats.positions import NO_BATCH


@dataclass(slots=True, eq=False)
class PublishResult:
    """Where a published message was stored (or that it was a duplicate); the
    base64 id is computed for the whole entry at once (``entry_ids_base64``)."""

    ledger_id: int
    entry_id: int
    partition: int
    batch_index: int
    batch_size: int
    b64: str
    duplicate: bool = False

    @property
    def message_id(self) -> MessageId:
        return MessageId(self.ledger_id, self.entry_id, self.partition, self.batch_index, self.batch_size)

    @classmethod
    def duplicate_of(cls, partition: int) -> PublishResult:
        dup = duplicate_id(partition)
        return cls(dup.ledger_id, dup.entry_id, partition, NO_BATCH, 0, dup.to_base64(), duplicate=True)


Outcome = PublishResult | GatewayError
