"""What a subscription hands its consumers, and the dispatcher for each type.

Owns: what leads to a delivery (the dispatcher's input from entries read,
``read_messages``, and its ``Deliver`` effects resolved to their messages,
``resolve_deliveries``: a sink gets the dispatcher's effects themselves, one
object per delivered message), the ``ConsumerSink`` protocol a connected
session implements (WebSocket, HTTP consume), ``ConsumerRecord`` (a consumer's
settings and counters) and ``DISPATCHERS``, the dispatcher of each
subscription type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.broker.cursor_core import Cursor
from gateway.broker.decoded_entries import DecodedEntries
from gateway.broker.dispatch import (
    ConsumerId,
    ConsumerInfo,
    Dispatcher,
    DispatcherConfig,
    ExclusiveDispatcher,
    FailoverDispatcher,
    KeySharedDispatcher,
    SharedDispatcher,
)
from gateway.broker.dispatch.base import Deliver, HashRange, Message
from gateway.broker.stats import RateMeter
from gateway.subscription_type import SubscriptionType
from storage.formats.entry_format import EntryMessage
from storage.formats.positions import MessagePosition, Position

READ_BYTES_MAX = 64 * 1024  # bytes of entries one dispatch round takes (fan-out: x consumers)


class ConsumerSink(Protocol):
    """What a subscription needs from a connected consumer session."""

    def deliver(self, deliveries: list[Deliver]) -> None:
        """``deliveries`` in order, each with its ``content`` set."""
        ...

    def active_changed(self, active: bool) -> None: ...

    def ranges_changed(self, ranges: tuple[HashRange, ...]) -> None: ...

    def close(self, code: str, reason: str) -> None: ...


class PullSink:
    """Base of a pull-mode sink (HTTP consumer, webhook pusher): no client to tell
    that it became active (Failover) or which hash ranges it owns (Key_Shared)."""

    def active_changed(self, active: bool) -> None:
        pass

    def ranges_changed(self, ranges: tuple[HashRange, ...]) -> None:
        pass


@dataclass(slots=True)
class ConsumerRecord:
    consumer_id: ConsumerId
    info: ConsumerInfo
    sink: ConsumerSink
    connected_since_ms: int
    dead_letter_topic: str | None = None
    address: str = ""
    msg_out: int = 0
    bytes_out: int = 0
    acks: int = 0
    redelivered: int = 0
    client_version: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    meter: RateMeter = field(default_factory=RateMeter)  # (msg_out, bytes_out, redelivered, acks)


DISPATCHERS: dict[SubscriptionType, Callable[[DispatcherConfig], Dispatcher]] = {
    SubscriptionType.EXCLUSIVE: ExclusiveDispatcher,
    SubscriptionType.FAILOVER: FailoverDispatcher,
    SubscriptionType.SHARED: SharedDispatcher,
    SubscriptionType.KEY_SHARED: KeySharedDispatcher,
}


def resolve_deliveries(
    delivers: list[Deliver], messages_at: Callable[[MessagePosition], list[EntryMessage] | None]
) -> tuple[dict[ConsumerId, list[Deliver]], list[Deliver]]:
    """``delivers`` per consumer, in order, for the messages ``messages_at`` has at hand,
    each with its ``content`` set; and the effects whose entry it has not. Deliveries come
    in runs of one entry to one consumer: each run looks its entry up once."""
    out: dict[ConsumerId, list[Deliver]] = {}
    missing: list[Deliver] = []
    messages: list[EntryMessage] | None = None
    ledger_id = entry_id = -1
    batched = False
    run: list[Deliver] = []
    run_consumer: ConsumerId | None = None
    for effect in delivers:
        position = effect.message.position
        if messages is None or position.entry_id != entry_id or position.ledger_id != ledger_id:
            messages = messages_at(position)
            if messages is None:
                missing.append(effect)
                continue
            ledger_id, entry_id = position.ledger_id, position.entry_id
            batched = len(messages) > 1
        effect.content = messages[position.batch_index if batched and position.batch_index > 0 else 0]
        if effect.consumer_id != run_consumer:
            run_consumer = effect.consumer_id
            run = out.setdefault(run_consumer, [])
        run.append(effect)
    return out, missing


def read_messages(
    entries: list[tuple[Position, bytes]],
    decoded: DecodedEntries,
    cursor: Cursor,
    budget: int,
    bytes_max: int = READ_BYTES_MAX,
) -> tuple[list[Message], Position, int]:
    """The dispatcher's input from entries read in log order: their messages not acked
    yet (the topic's shared ``Message`` objects, with the Key_Shared hash slot),
    stopping after the entry that reaches ``budget`` messages or ``bytes_max`` bytes of
    entries; the last entry taken; and the average number of messages in the entries
    taken (acked or not). The cursor learns each entry's message count."""
    messages: list[Message] = []
    last = entries[0][0]
    taken = in_taken = size = 0
    for position, payload in entries:
        view = decoded.dispatch_view(position, payload)
        count = len(view)
        cursor.on_read(position, count)
        last = position
        taken += 1
        in_taken += count
        size += len(payload)
        acked = cursor.acked_mask(position)
        if acked < 0:
            continue  # the whole entry is acked
        if acked:
            messages += [message for index, message in enumerate(view) if not acked >> index & 1]
        else:
            messages += view
        if len(messages) >= budget or size >= bytes_max:
            break
    return messages, last, in_taken // taken
