"""Dead-letter and retry-letter topics: copies of a message published elsewhere.

Owns: publishing a copy of a consumed message to its subscription's
dead-letter topic (``<topic>-<sub>-DLQ``) or retry topic (``<topic>-<sub>-RETRY``),
and ``letter_topics``, their names; it takes the consumed topic and its
subscription as narrow ports (``LetterSource``, ``LetterSubscription``).
Rules (docs/compatibility.md §4.4): the names come from the consumed topic's
own name (the partitioned topic's for a partition, so the security layer can
authorize them before a consumer opens; never from a message property a
producer could set); the copy keeps payload, key and properties and adds
``REAL_TOPIC`` and ``ORIGIN_MESSAGE_ID``; a retry copy carries
``RECONSUMETIMES`` and ``DELAY_TIME`` and is delivered after the delay; past
``maxRedeliverCount`` reconsumes it goes to the dead-letter topic; the original
is acked only after its copy is stored.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from coordination.clock import Clock
from gateway.broker.decoded_entries import DecodedEntries
from gateway.names import TopicName
from storage.formats.entry_format import EntryMessage
from storage.formats.message_id import MessageId
from storage.formats.positions import NO_BATCH, MessagePosition

log = logging.getLogger(__name__)


class LetterTarget(Protocol):
    """Publishes a message to a topic by name, wherever it is owned (the broker service)."""

    async def publish_to(self, topic: str, message: EntryMessage) -> None: ...


class LetterSource(Protocol):
    """What copying a message needs of the topic it was consumed from (a ``Topic``)."""

    @property
    def name(self) -> TopicName: ...

    @property
    def partition(self) -> int: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def decoded(self) -> DecodedEntries: ...

    @property
    def host(self) -> LetterTarget: ...


class LetterSubscription(Protocol):
    """The subscription a retried message is acknowledged on (a ``Subscription``)."""

    @property
    def name(self) -> str: ...

    def ack(self, consumer_id: int, positions: Iterable[MessagePosition]) -> int: ...


def letter_topics(topic: TopicName, subscription: str) -> tuple[TopicName, TopicName]:
    """(retry topic, default dead-letter topic) of ``subscription`` on ``topic``:
    ``<t>-<sub>-RETRY`` and ``<t>-<sub>-DLQ`` with ``t`` the topic's base name; on
    the retry topic itself, that topic and the dead-letter topic of the original."""
    base = topic.base
    suffix = f"-{subscription}-RETRY"
    real = base
    if base.local.endswith(suffix) and len(base.local) > len(suffix):
        real = TopicName(base.domain, base.tenant, base.namespace, base.local[: -len(suffix)])
    retry = TopicName(real.domain, real.tenant, real.namespace, real.local + suffix)
    return retry, TopicName(real.domain, real.tenant, real.namespace, f"{real.local}-{subscription}-DLQ")


async def dead_letter(
    topic: LetterSource,
    target: str,
    message: EntryMessage,
    origin: MessagePosition,
    sub: str,
    *,
    suffix: str = "DLQ",
    extra: dict[str, str] | None = None,
    deliver_at_ms: int | None = None,
) -> None:
    """Publish a copy of ``message`` to ``target`` (dead-letter or retry topic)."""
    properties = dict(message.properties)
    properties.setdefault("REAL_TOPIC", str(topic.name))
    # as the Java client: the origin id's string form "L:E:P" ("L:E:P:B" in a batch)
    properties.setdefault("ORIGIN_MESSAGE_ID", str(MessageId.of(origin, topic.partition)))
    properties.update(extra or {})
    copy = EntryMessage(
        payload=message.payload,
        publish_time_ms=topic.clock.now_ms(),
        producer_name=f"{topic.name.local}-{sub}-{suffix}",
        sequence_id=message.sequence_id,
        key=message.key,
        ordering_key=message.ordering_key,
        properties=properties,
        event_time_ms=message.event_time_ms,
        deliver_at_ms=deliver_at_ms,
    )
    await topic.host.publish_to(target, copy)


async def reconsume_later(
    topic: LetterSource,
    sub: LetterSubscription,
    consumer_id: int,
    position: MessagePosition,
    delay_ms: int,
    max_retries: int,
) -> None:
    """Retry-letter topic (docs/compatibility.md §4.4): ack the message and publish a copy to
    ``<topic>-<sub>-RETRY`` delivered after ``delay_ms``; past ``max_retries`` (> 0)
    reconsumes, the copy goes to the dead-letter topic instead."""
    messages = await topic.decoded.load_messages(position.entry)
    if messages is None:
        return
    message = messages[0 if position.batch_index == NO_BATCH else position.batch_index]
    retry, dlq = letter_topics(topic.name, sub.name)
    try:
        retries = int(message.properties.get("RECONSUMETIMES", "0")) + 1
    except ValueError:
        retries = 1
    if max_retries and retries > max_retries:
        await dead_letter(topic, str(dlq), message, position, sub.name)
    else:
        extra = {"RECONSUMETIMES": str(retries), "DELAY_TIME": str(delay_ms)}
        await dead_letter(
            topic,
            str(retry),
            message,
            position,
            sub.name,
            suffix="RETRY",
            extra=extra,
            deliver_at_ms=topic.clock.now_ms() + delay_ms,
        )
    sub.ack(consumer_id, [position])
