"""Admin operations on a loaded topic: reading messages back, subscriptions, deletion (asyncio shell).

Owns: walking a topic's messages forwards (optionally skipping what a cursor
acknowledged) and backwards, finding one message by id or by publish time,
creating a subscription at a position, and deleting a topic's storage.
Rules (docs/compatibility.md §3.2): Folio batches many messages into one
entry, so positions given to users count *messages*, never entries: "the
n-th message" is the n-th message, whether or not it shares an entry; a
message of a batch entry is named ``ledger:entry:batchIndex``. Reads never
create or load anything beyond the topic itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.broker.broker_errors import SubscriptionBusy, SubscriptionExists
from gateway.broker.cursor_core import Cursor
from storage.errors import StorageError
from storage.formats.entry_format import EntryMessage
from storage.formats.positions import EARLIEST, NO_BATCH, MessagePosition, Position

if TYPE_CHECKING:
    from gateway.broker.subscription import Subscription
    from gateway.broker.topic import Topic

READ_BATCH = 100


@dataclass(frozen=True, slots=True)
class Found:
    """One message read back: where it is, what it is, and how many share its entry."""

    position: MessagePosition
    message: EntryMessage
    entry_size: int

    @property
    def batch_index(self) -> int:
        return self.position.batch_index


def _position(entry: Position, index: int, size: int) -> MessagePosition:
    return MessagePosition(entry.ledger_id, entry.entry_id, index if size > 1 else NO_BATCH)


async def forward(
    topic: Topic, after: Position = EARLIEST, cursor: Cursor | None = None, skip_first: int = 0
) -> AsyncIterator[Found]:
    """Messages after entry ``after`` in log order (minus those ``cursor`` acknowledged);
    the first ``skip_first`` messages of the first entry are left out."""
    log = topic.log
    nxt = log.layout.next_position(after)
    first = True
    while nxt is not None:
        entries = await log.read(nxt, READ_BATCH)
        if not entries:
            return
        for entry, payload in entries:
            messages = topic.decoded.messages(entry, payload)
            size = len(messages)
            skip = skip_first if first else 0
            first = False
            if cursor is not None and cursor.is_acked(MessagePosition(entry.ledger_id, entry.entry_id)):
                continue
            for index in range(skip, size):
                position = _position(entry, index, size)
                if cursor is not None and size > 1 and cursor.is_acked(position):
                    continue
                yield Found(position, messages[index], size)
        nxt = log.layout.next_position(entries[-1][0])


async def backward(topic: Topic, skip: int = 0) -> AsyncIterator[Found]:
    """Messages from the newest back, leaving out the ``skip`` newest."""
    log = topic.log
    layout = log.layout
    view = log.counts.view(layout)
    index = layout.total_entries
    if skip and index:
        total = view.total()
        if skip >= total:
            return
        entry, taken, size = view.locate(EARLIEST, total - skip)
        index = layout.index(entry)
        upto = taken if size else None
    else:
        upto = None
    while index >= 1:
        entry = layout.at(index)
        messages = await topic.decoded.load_messages(entry)
        index -= 1
        if messages is None:
            continue
        size = len(messages)
        end = size if upto is None else min(upto, size)
        upto = None
        for batch in range(end - 1, -1, -1):
            yield Found(_position(entry, batch, size), messages[batch], size)


async def nth_forward(topic: Topic, n: int, cursor: Cursor | None = None) -> Found | None:
    """The ``n``-th (1-based) message after the cursor's mark-delete (or the log's start)."""
    start = cursor.mark_delete if cursor is not None else EARLIEST
    seen = 0
    async for found in forward(topic, start, cursor):
        seen += 1
        if seen == n:
            return found
    return None


async def page_forward(topic: Topic, offset: int, limit: int, cursor: Cursor | None = None) -> list[Found]:
    """``limit`` messages after the first ``offset`` (in log order); without a cursor
    the offset is found from the message counts instead of reading every entry."""
    start, skip_first, to_skip = EARLIEST, 0, offset
    if cursor is not None:
        start = cursor.mark_delete
    elif offset:
        view = topic.log.counts.view(topic.log.layout)
        if offset >= view.total():
            return []
        entry, taken, size = view.locate(EARLIEST, offset)
        if size:  # exact counts: start inside that entry
            start, skip_first, to_skip = Position(entry.ledger_id, entry.entry_id - 1), taken, 0
    out: list[Found] = []
    async for found in forward(topic, start, cursor, skip_first):
        if to_skip:
            to_skip -= 1
            continue
        out.append(found)
        if len(out) >= limit:
            break
    return out


async def page_backward(topic: Topic, offset: int, limit: int) -> list[Found]:
    out: list[Found] = []
    async for found in backward(topic, offset):
        out.append(found)
        if len(out) >= limit:
            break
    return out


async def message_at(topic: Topic, entry: Position, batch_index: int) -> Found | None:
    """The message at ``entry`` / ``batch_index`` (-1: the entry's first)."""
    if entry.ledger_id < 0 or entry.entry_id < 0 or entry > topic.log.last_confirmed:
        return None
    try:
        messages = await topic.decoded.load_messages(entry)
    except StorageError:
        return None
    if not messages:
        return None
    index = max(batch_index, 0)
    if index >= len(messages):
        return None
    return Found(_position(entry, index, len(messages)), messages[index], len(messages))


async def first_at_or_after(topic: Topic, timestamp_ms: int) -> Found | None:
    """The first message published at or after ``timestamp_ms``."""
    entry = await topic.first_position_at_or_after(timestamp_ms)
    if entry is None:
        return None
    messages = await topic.decoded.load_messages(entry)
    if not messages:
        return None
    for index, message in enumerate(messages):
        if message.publish_time_ms >= timestamp_ms:
            return Found(_position(entry, index, len(messages)), message, len(messages))
    return None


async def last_message(topic: Topic) -> Found | None:
    async for found in backward(topic):
        return found
    return None


# ---------------------------------------------------------------- subscriptions


async def seek_to_message(
    topic: Topic, sub: Subscription, entry: Position, batch_index: int, excluded: bool
) -> None:
    """Reset ``sub`` so that message ``batch_index`` of ``entry`` (NO_BATCH: the
    entry's first) is the next one delivered, or, if ``excluded``, the one after
    it: at batch-index precision, the messages of the entry before it count as
    acknowledged (admin reset and a consumer's seek alike)."""
    skip = batch_index + 1 if excluded else batch_index  # messages of the entry left behind
    if skip <= 0:
        sub.seek(entry, inclusive=not excluded)
        return
    messages = await topic.decoded.load_messages(entry)
    if messages is None or skip >= len(messages):
        sub.seek(entry, inclusive=False)
        return
    sub.seek(entry, inclusive=True)
    sub.cursor.ack_batch_prefix(entry, skip)


async def create_subscription(topic: Topic, name: str, start: Position | None) -> Subscription:
    """A new durable subscription whose first message is the one at ``start``
    (None: after the last message); ``SubscriptionExists`` if it exists."""
    if name in topic.subscriptions:
        raise SubscriptionExists(f"Subscription {name} already exists on {topic.name}")
    sub = await topic.subscription(name, initial="Latest")
    if start is not None:
        sub.seek(start)
        await sub.persist()
    return sub


async def delete_subscription(topic: Topic, name: str, force: bool) -> None:
    sub = topic.subscriptions.get(name)
    if sub is not None and sub.consumers and not force:
        raise SubscriptionBusy(
            f"Subscription {name} has {len(sub.consumers)} connected consumers; use force=true"
        )
    await topic.unsubscribe(name, force=True)


def connected_clients(topic: Topic) -> int:
    subs = [*topic.subscriptions.values(), *topic.readers.values()]
    return len(topic.producers) + sum(len(sub.consumers) for sub in subs)
