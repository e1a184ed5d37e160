"""Commands a WebSocket consumer or reader sends to the gateway (pure).

Owns: the ``Command`` union and ``parse_command``, and ``plain_ack_id``: the id
of the one-id ack frame Pulsar's clients send, read without parsing JSON.
Rules (docs/compatibility.md §1.6.3, §7 rows 1 and 4): dispatch on ``type``; a
frame whose ``type`` is absent, null or not a known value is an individual ack
(upstream behaviour).
Bad JSON, a wrong field type, a missing or undecodable id, or a bad
``permitMessages`` is ``FrameError`` ws_code 3 (upstream closes the socket
with code 3). Ids are base64 ``MessageIdData`` or the string ``L:E[:P[:B]]``.

| frame | command |
|---|---|
| ``{"messageId":ID}`` (no/unknown ``type``) | ``Ack([ID])`` |
| ``{"messageId":ID,"ackType":"cumulative"}`` | ``AckCumulative(ID)`` (Folio) |
| ``{"type":"ack","messageIds":[ID,...]}`` | ``Ack([...])`` (Folio, <= ``ACK_BATCH_MAX``) |
| ``{"type":"ackCumulative","messageId":ID}`` | ``AckCumulative(ID)`` (Folio) |
| ``{"type":"negativeAcknowledge","messageId":ID}`` (or ``messageIds``) | ``Nack([...])`` |
| ``{"type":"permit","permitMessages":N}`` | ``Permit(N)``, 0 <= N <= 2^31-1 |
| ``{"type":"unsubscribe"}`` | ``Unsubscribe()`` |
| ``{"type":"isEndOfTopic"}`` | ``IsEndOfTopic()`` |
| ``{"type":"seek","messageId":ID\\|"earliest"\\|"latest"}`` | ``Seek(id, None)`` (Folio) |
| ``{"type":"seek","timestamp":MS}`` | ``Seek(None, MS)`` (Folio) |

An ack or nack frame may carry ``messageId`` or ``messageIds``, not both.
``ackType`` may be ``"individual"`` (default) or ``"cumulative"``. ``Seek`` has
``inclusive`` (default true: the message at the id is delivered again, as
Pulsar's ``Consumer.seek``); ``{"inclusive":false}`` starts after it.
Readers use the same parser: any command but ``IsEndOfTopic`` is flow control.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.protocol.errors import WS_FAILED_TO_DESERIALIZE, FrameError
from gateway.protocol.json_fields import (
    ID_CHARS_SHOWN,
    JsonObject,
    get_bool,
    get_int,
    get_message_ids,
    load_object,
    parse_message_id,
)
from storage.formats.message_id import EARLIEST_ID, INT32_MAX, INT64_MAX, LATEST_ID, MessageId

ACK_BATCH_MAX = 10_000


@dataclass(frozen=True, slots=True)
class Ack:
    message_ids: list[MessageId]


@dataclass(frozen=True, slots=True)
class AckCumulative:
    message_id: MessageId


@dataclass(frozen=True, slots=True)
class Nack:
    message_ids: list[MessageId]


@dataclass(frozen=True, slots=True)
class Permit:
    n: int


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    pass


@dataclass(frozen=True, slots=True)
class IsEndOfTopic:
    pass


@dataclass(frozen=True, slots=True)
class Seek:
    """Exactly one of ``message_id`` (``EARLIEST_ID``/``LATEST_ID`` for the
    sentinels) and ``timestamp_ms`` (publish time, epoch ms) is set."""

    message_id: MessageId | None
    timestamp_ms: int | None
    inclusive: bool = True


@dataclass(frozen=True, slots=True)
class ReconsumeLater:
    """Retry-letter topic (Folio; the Java client's ``reconsumeLater``): ack the
    message and publish a copy to the retry topic, delivered after ``delay_ms``."""

    message_id: MessageId
    delay_ms: int


RECONSUME_DELAY_MAX_MS = 7 * 24 * 3600 * 1000
_PLAIN_ACK_HEAD = '{"messageId":"'
_PLAIN_ACK_TAIL = '"}'
_PLAIN_ACK_CHARS = len(_PLAIN_ACK_HEAD) + len(_PLAIN_ACK_TAIL)

Command = Ack | AckCumulative | Nack | Permit | Unsubscribe | IsEndOfTopic | Seek | ReconsumeLater


def parse_command(data: str | bytes) -> Command:
    obj = load_object(data)
    kind = obj.get("type")
    if kind is not None and not isinstance(kind, str):
        raise FrameError(WS_FAILED_TO_DESERIALIZE, "type must be a string")
    if kind == "permit":
        return _permit(obj)
    if kind == "unsubscribe":
        return Unsubscribe()
    if kind == "isEndOfTopic":
        return IsEndOfTopic()
    if kind == "negativeAcknowledge":
        return Nack(_ids(obj, kind))
    if kind == "ackCumulative":
        return AckCumulative(_single_id(obj, kind))
    if kind == "seek":
        return _seek(obj)
    if kind == "reconsumeLater":
        delay = get_int(obj, "delayMs", 0, RECONSUME_DELAY_MAX_MS)
        return ReconsumeLater(_single_id(obj, kind), delay or 0)
    return _ack(obj, kind)


def plain_ack_id(data: str) -> str | None:
    """The id text of a frame that is exactly ``{"messageId":"ID"}`` (no space, no other
    field, no quote or backslash in ``ID``: the frame Pulsar's clients send to ack one
    message), found without parsing the frame; else None. For an ``ID`` the gateway sent
    (base64) that frame is ``parse_command``'s ``Ack([ID])``; any other text (one holding
    a control character JSON forbids raw, say) must go through ``parse_command``."""
    if len(data) >= _PLAIN_ACK_CHARS and data.startswith(_PLAIN_ACK_HEAD) and data.endswith(_PLAIN_ACK_TAIL):
        text = data[len(_PLAIN_ACK_HEAD) : -len(_PLAIN_ACK_TAIL)]
        if '"' not in text and "\\" not in text:
            return text
    return None


def _ack(obj: JsonObject, kind: str | None) -> Ack | AckCumulative:
    ack_type = obj.get("ackType")
    if ack_type == "cumulative":
        return AckCumulative(_single_id(obj, kind))
    if ack_type not in (None, "individual"):
        raise FrameError(WS_FAILED_TO_DESERIALIZE, 'ackType must be "individual" or "cumulative"')
    return Ack(_ids(obj, kind))


def _ids(obj: JsonObject, kind: str | None) -> list[MessageId]:
    if "messageIds" in obj:
        if "messageId" in obj:
            raise FrameError(WS_FAILED_TO_DESERIALIZE, "give messageId or messageIds, not both")
        return get_message_ids(obj, "messageIds", ACK_BATCH_MAX)
    return [_single_id(obj, kind)]


def _single_id(obj: JsonObject, kind: str | None) -> MessageId:
    value = obj.get("messageId")
    if value is None:
        why = ""
        if kind is not None and kind not in ("ack", "ackCumulative", "negativeAcknowledge", "reconsumeLater"):
            why = f" (unknown type {kind[:ID_CHARS_SHOWN]!r} is treated as an ack)"
        raise FrameError(WS_FAILED_TO_DESERIALIZE, f"messageId is required{why}")
    return parse_message_id(value)


def _permit(obj: JsonObject) -> Permit:
    if obj.get("permitMessages") is None:
        raise FrameError(WS_FAILED_TO_DESERIALIZE, "permitMessages is required for a permit command")
    n = get_int(obj, "permitMessages", 0, INT32_MAX)
    assert n is not None
    return Permit(n)


def _seek(obj: JsonObject) -> Seek:
    inclusive = get_bool(obj, "inclusive")
    inclusive = True if inclusive is None else inclusive
    has_id, has_time = obj.get("messageId") is not None, obj.get("timestamp") is not None
    if has_id == has_time:
        raise FrameError(WS_FAILED_TO_DESERIALIZE, "seek needs exactly one of messageId and timestamp")
    if has_time:
        return Seek(None, get_int(obj, "timestamp", 0, INT64_MAX), inclusive)
    value = obj["messageId"]
    if value == "earliest":
        return Seek(EARLIEST_ID, None, inclusive)
    if value == "latest":
        return Seek(LATEST_ID, None, inclusive)
    return Seek(parse_message_id(value, sentinels=True), None, inclusive)
