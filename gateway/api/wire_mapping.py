"""Conversions between the wire shapes (gateway.protocol) and the broker's types.

Owns: message-id <-> position mapping for one topic, and delivery frames (as
JSON objects for the REST and webhook bodies, encoded for WebSocket sessions).
Rule: a message id names a topic partition by its ``partition`` field; an id
whose partition is not this topic's is not this topic's message (acks of it
move nothing).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson
from pybase64 import b64encode, b64encode_as_string

from gateway.broker.dispatch.base import Deliver
from gateway.protocol.timefmt import format_iso
from gateway.protocol.ws_frames import message_frame
from storage.formats.entry_format import EntryMessage
from storage.formats.message_id import MessageId, entry_prefix, id_rest_base64, ids_head_base64
from storage.formats.positions import MessagePosition

# ``message_frame`` of a message with no property, event time or key, encoded without a
# dict: ``PLAIN_HEAD + id + PLAIN_PAYLOAD + base64(payload) + plain_message_tail(publish
# time, redelivery count)`` is byte for byte ``encode_frame(message_frame(id, payload, {},
# publish time, redelivery count))`` (base64 and the time need no JSON escaping).
PLAIN_HEAD = b'{"messageId":"'
PLAIN_PAYLOAD = b'","payload":"'


def plain_message_tail(publish_time_ms: int, redelivery_count: int) -> bytes:
    """The end of a plain message's encoded frame, from the payload's closing quote on."""
    return b'","properties":{},"publishTime":"%s","redeliveryCount":%d}' % (
        format_iso(publish_time_ms).encode(),
        redelivery_count,
    )


def _with_ids(deliveries: Sequence[Deliver], partition: int) -> Iterator[tuple[Deliver, str]]:
    """Each of ``deliveries`` with its message id as Pulsar encodes it. Deliveries come in
    runs of one entry: its id prefix is computed once per run."""
    ledger_id = entry_id = -1
    head, carry = "", b""
    for delivery in deliveries:
        routed = delivery.message
        p = routed.position
        if p.entry_id != entry_id or p.ledger_id != ledger_id:
            ledger_id, entry_id = p.ledger_id, p.entry_id
            head, carry = ids_head_base64(entry_prefix(ledger_id, entry_id, partition))
        yield delivery, head + id_rest_base64(carry, p.batch_index, routed.batch_size)


def delivery_frames(deliveries: Sequence[Deliver], partition: int) -> list[dict[str, Any]]:
    """The frames of ``deliveries`` (see ``message_frame``)."""
    frames = []
    for delivery, message_id in _with_ids(deliveries, partition):
        message = delivery.content
        if message.properties or message.event_time_ms or message.key is not None:
            frame = _full_frame(message_id, message, delivery.redelivery_count)
        else:  # message_frame of a message with no property, event time or key, inlined
            frame = {
                "messageId": message_id,
                "payload": b64encode_as_string(message.payload),
                "properties": {},
                "publishTime": format_iso(message.publish_time_ms),
                "redeliveryCount": delivery.redelivery_count,
            }
        frames.append(frame)
    return frames


def encoded_delivery_frames(deliveries: Sequence[Deliver], partition: int) -> tuple[list[str], list[bytes]]:
    """The message ids of ``deliveries`` and their frames encoded, each byte for byte
    ``encode_frame`` of its ``delivery_frames`` frame; a message with no property, event
    time or key is encoded without a dict, behind the tail its entry's messages share
    (``plain_message_tail``)."""
    ids: list[str] = []
    frames: list[bytes] = []
    plain_tail = b""
    publish_time = redeliveries = -1  # of ``plain_tail``; a redelivery count is never -1
    join = b"".join
    for delivery, message_id in _with_ids(deliveries, partition):
        message = delivery.content
        ids.append(message_id)
        if message.properties or message.event_time_ms or message.key is not None:
            frames.append(orjson.dumps(_full_frame(message_id, message, delivery.redelivery_count)))
            continue
        if message.publish_time_ms != publish_time or delivery.redelivery_count != redeliveries:
            publish_time, redeliveries = message.publish_time_ms, delivery.redelivery_count
            plain_tail = plain_message_tail(publish_time, redeliveries)
        payload = b64encode(message.payload)
        frames.append(join((PLAIN_HEAD, message_id.encode(), PLAIN_PAYLOAD, payload, plain_tail)))
    return ids, frames


def _full_frame(message_id: str, message: EntryMessage, redelivery_count: int) -> dict[str, Any]:
    """``message_frame`` of a message with a property, an event time or a key."""
    return message_frame(
        message_id,
        message.payload,
        message.properties,
        message.publish_time_ms,
        redelivery_count,
        message.event_time_ms or 0,
        message.key.decode("utf-8", "replace") if message.key is not None else None,
    )


def position_of(message_id: MessageId, partition: int) -> MessagePosition | None:
    """The position ``message_id`` names in a topic with ``partition`` (None: another topic)."""
    if message_id.partition != partition and not (partition < 0 and message_id.partition < 0):
        return None
    if message_id.ledger_id < 0 or message_id.entry_id < 0:
        return None
    return MessagePosition(message_id.ledger_id, message_id.entry_id, message_id.batch_index)
