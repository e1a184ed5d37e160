"""WebSocket frames of the producer endpoint and the consumer/reader deliveries (pure).

Owns: publish requests (``PublishRequest``, ``parse_publish``), publish
replies (``publish_ok``, ``publish_error``, ``publish_batch_reply``), the
message frames pushed to consumers and readers (``message_frame``,
``messages_frame``), the small server frames (``end_of_topic_reply``,
``active_notice``, ``ranges_notice``) and ``encode_frame``. Consumer commands
live in ``ws_commands`` (their one home: import them from there).

Rules (docs/compatibility.md §1.5.1, §1.5.2, §1.6.1): field names and reply shapes
byte for byte as upstream - replies carry ``errorCode`` (0 on success; on a
failure 1 retriable or 2, the meaning Pulsar's REST producer gives it, where
upstream's WebSocket proxy left a contradicting 0) and ``schemaVersion``, and
omit null fields; ``context`` may be any JSON scalar and is echoed as text;
``payload`` is base64; times are ISO-8601 with offset; JSON errors are
``send-error:3`` without context, payload/eventTime errors ``send-error:7``, an
oversize payload ``send-error:8`` (a failed send, as upstream); unknown fields
are ignored. A bad frame raises a ``ProtocolError`` whose ``context`` is the
request's ``context`` whenever that was readable, so
``publish_error_for(exc)`` can echo it.

``deliverAt`` and ``deliverAfterMs`` are applied when > 0; if both are given
``deliverAfterMs`` wins (upstream calls ``deliverAt`` then ``deliverAfter`` on
the same builder). These and ``sequenceId``/``schemaVersion`` are Java
``long`` fields upstream, so a JSON string holding a decimal integer
(``"1000"``) is read as it, as Jackson does; other strings are
``send-error:3``. ``sequenceId`` (ignored upstream) is honoured for dedup;
``schemaVersion`` (in upstream's model, unused there) names the registered
schema version the payload was written with - the producer session checks the
payload against it and the reply's ``schemaVersion`` says it.

Folio extras (opt-in; a client that never sends them sees upstream behaviour):
- batched publish: ``{"type":"batch","context":"c","messages":[<publish>...]}``
  (1..``PUBLISH_BATCH_MAX`` messages). Validation is all-or-nothing: a bad
  message rejects the whole frame with ONE ``publish_error`` reply whose
  ``errorMsg`` starts ``messages[i]: `` and whose context is the frame's. A
  valid batch is answered by ONE ``publish_batch_reply``:
  ``{"type":"batch","context":"c","results":[<publish reply>...]}``, results in
  message order, each exactly a single-publish reply without ``context``.
- ``"duplicate":true`` in a publish reply when dedup recognised a repeat, only
  for a producer opened with ``markDuplicates=true`` (Pulsar's reply to a
  duplicate is a plain ok with message id -1:-1).
- batched delivery (consumer ``batchDelivery=true``):
  ``{"type":"messages","messages":[<message frame>...]}``.
- session notices: ``{"type":"active","active":true|false}`` when a Failover
  consumer becomes (in)active, ``{"type":"ranges","ranges":[[start,end],...]}``
  when a Key_Shared consumer's hash ranges change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import orjson
import pybase64

from gateway.broker.dispatch.base import HashRange
from gateway.protocol.errors import (
    ERROR_NOT_RETRIABLE,
    ERROR_RETRIABLE,
    WS_ERROR_DESCRIPTIONS,
    WS_FAILED_TO_DESERIALIZE,
    WS_PAYLOAD_ENCODING_ERROR,
    FrameError,
    ProtocolError,
)
from gateway.protocol.json_fields import (
    JsonObject,
    decode_base64_payload,
    get_long,
    get_properties,
    get_str,
    is_text,
    load_object,
)
from gateway.protocol.timefmt import EPOCH_MS_MAX, EPOCH_MS_MIN, format_iso, parse_iso
from storage.formats.message_id import INT64_MAX

PUBLISH_BATCH_MAX = 1000
DELIVER_AFTER_MAX_MS = 100 * 365 * 24 * 3600 * 1000  # a fixed bound (100 years) documents exactly

__all__ = [
    "PUBLISH_BATCH_MAX",
    "PublishBatch",
    "PublishRequest",
    "active_notice",
    "context_text",
    "encode_frame",
    "end_of_topic_reply",
    "message_frame",
    "messages_frame",
    "parse_publish",
    "parse_publish_object",
    "publish_batch_reply",
    "publish_error",
    "publish_error_dict",
    "publish_error_for",
    "publish_ok",
    "publish_ok_dict",
    "ranges_notice",
]


@dataclass(slots=True)  # not frozen: built per published message, frozen init costs ~2x
class PublishRequest:
    """One message to publish; times are epoch ms and 0 means "not set"."""

    payload: bytes
    properties: dict[str, str] = field(default_factory=dict)
    context: str | None = None
    key: str | None = None
    event_time_ms: int = 0
    deliver_at_ms: int = 0
    sequence_id: int | None = None  # None: the producer assigns the next one
    schema_version: int | None = None  # the topic schema version the payload was encoded with


def encode_frame(obj: object) -> bytes:
    return orjson.dumps(obj)


# ------------------------------------------------------------------ publish


class PublishBatch(list[PublishRequest]):
    """The requests of a Folio batch frame, with the frame's own ``context``."""

    context: str | None = None


def parse_publish(data: str | bytes, now_ms: int, max_payload: int) -> PublishRequest | PublishBatch:
    """A producer frame: one request, or a ``PublishBatch`` (a list) for a Folio batch frame."""
    obj = load_object(data)
    if obj.get("type") != "batch":
        return parse_publish_object(obj, now_ms, max_payload)
    context = _context(obj)
    messages = obj.get("messages")
    if not isinstance(messages, list) or not 1 <= len(messages) <= PUBLISH_BATCH_MAX:
        raise FrameError(
            WS_FAILED_TO_DESERIALIZE,
            f"messages must be an array of 1..{PUBLISH_BATCH_MAX} publish objects",
            context,
        )
    requests = PublishBatch()
    requests.context = context
    for index, item in enumerate(messages):
        try:
            if not isinstance(item, dict):
                raise FrameError(WS_FAILED_TO_DESERIALIZE, "must be an object")
            requests.append(parse_publish_object(item, now_ms, max_payload))
        except ProtocolError as exc:
            exc.message = f"messages[{index}]: {exc.message}"
            exc.args = (exc.message,)
            exc.context = context
            raise
    return requests


def parse_publish_object(obj: JsonObject, now_ms: int, max_payload: int) -> PublishRequest:
    """One publish object (§1.5.1) already decoded from JSON."""
    payload_text = obj.get("payload")
    if type(payload_text) is str:
        if len(obj) == 1:  # a payload alone (the usual batch item)
            return PublishRequest(decode_base64_payload(payload_text, max_payload))
        if len(obj) == 2:  # payload and a text context (the usual one-message frame)
            context = obj.get("context")
            if type(context) is str and is_text(context):
                return PublishRequest(decode_base64_payload(payload_text, max_payload, context), {}, context)
            # payload and a plain sequence id (a deduplicating writer's batch item, as
            # the Spark connector writes them)
            sequence_id = obj.get("sequenceId")
            if type(sequence_id) is int and 0 <= sequence_id <= INT64_MAX:
                payload = decode_base64_payload(payload_text, max_payload)
                return PublishRequest(payload, sequence_id=sequence_id)
    context = _context(obj)
    if payload_text is None:
        raise FrameError(WS_PAYLOAD_ENCODING_ERROR, "Missing payload: a base64 string is required", context)
    if not isinstance(payload_text, str):
        raise FrameError(WS_FAILED_TO_DESERIALIZE, "payload must be a base64 string", context)
    payload = decode_base64_payload(payload_text, max_payload, context)
    # optional fields are looked at only when present (the hot path is payload + context)
    return PublishRequest(
        payload=payload,
        properties=get_properties(obj, "properties", context) if "properties" in obj else {},
        context=context,
        key=get_str(obj, "key", context) if "key" in obj else None,
        event_time_ms=_event_time(obj["eventTime"], context) if "eventTime" in obj else 0,
        deliver_at_ms=deliver_at(
            get_long(obj, "deliverAt", context=context),
            get_long(obj, "deliverAfterMs", context=context),
            now_ms,
            context,
        )
        if "deliverAt" in obj or "deliverAfterMs" in obj
        else 0,
        sequence_id=get_long(obj, "sequenceId", 0, INT64_MAX, context) if "sequenceId" in obj else None,
        schema_version=_schema_version(obj, context) if "schemaVersion" in obj else None,
    )


def _schema_version(obj: JsonObject, context: str | None) -> int | None:
    """``schemaVersion``: a registered version of the topic's schema the payload was
    written with (>= 0); a negative value (Pulsar's -1) means none."""
    version = get_long(obj, "schemaVersion", -(2**63), INT64_MAX, context)
    return version if version is not None and version >= 0 else None


def deliver_at(at_ms: int | None, after_ms: int | None, now_ms: int, context: str | None = None) -> int:
    """Absolute delivery time from ``deliverAt``/``deliverAfterMs`` (each applied when > 0,
    ``deliverAfterMs`` last); 0 when neither asks for a delay."""
    result = at_ms if at_ms is not None and at_ms > 0 else 0
    if after_ms is not None and after_ms > 0:
        if after_ms > min(DELIVER_AFTER_MAX_MS, EPOCH_MS_MAX - now_ms):
            raise FrameError(WS_FAILED_TO_DESERIALIZE, f"deliverAfterMs {after_ms} is too large", context)
        result = now_ms + after_ms
    return result


def _context(obj: JsonObject) -> str | None:
    return context_text(obj.get("context"))


def context_text(value: object) -> str | None:
    """A request's ``context`` as the text echoed back: Pulsar reads it into a Java
    ``String``, so any JSON scalar is taken and a number or boolean comes back as its
    JSON text (``5`` -> ``"5"``, ``true`` -> ``"true"``); null is no context. An
    array or object is ``send-error:3`` (Jackson cannot read either as a string)."""
    if value is None:
        return None
    if isinstance(value, str):
        if not is_text(value):
            raise FrameError(WS_FAILED_TO_DESERIALIZE, "context must be valid Unicode text")
        return value
    if isinstance(value, bool | int | float):
        return orjson.dumps(value).decode()
    raise FrameError(WS_FAILED_TO_DESERIALIZE, "context must be a JSON string, number or boolean")


def _event_time(value: object, context: str | None) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        try:
            ms = parse_iso(value)
        except FrameError as exc:
            raise FrameError(WS_PAYLOAD_ENCODING_ERROR, f"eventTime: {exc.message}", context) from exc
        if ms < 0:
            raise FrameError(WS_PAYLOAD_ENCODING_ERROR, f"eventTime {value} is before 1970", context)
        return ms
    if isinstance(value, int | float) and not isinstance(value, bool):  # upstream: coerced, then unparsable
        raise FrameError(
            WS_PAYLOAD_ENCODING_ERROR,
            "eventTime must be an ISO-8601 string with offset (e.g. 2022-09-07T01:08:23.26Z), not a number",
            context,
        )
    raise FrameError(WS_FAILED_TO_DESERIALIZE, "eventTime must be an ISO-8601 string", context)


# ------------------------------------------------------------------ publish replies


def publish_ok_dict(
    message_id_b64: str, context: str | None = None, duplicate: bool = False, schema_version: int = 0
) -> JsonObject:
    reply: JsonObject = {"result": "ok", "messageId": message_id_b64}
    if context is not None:
        reply["context"] = context
    reply["errorCode"] = 0
    reply["schemaVersion"] = schema_version
    if duplicate:
        reply["duplicate"] = True
    return reply


def publish_error_dict(
    ws_code: int, message: str, context: str | None = None, retriable: bool = False
) -> JsonObject:
    """A failed publish. ``errorCode`` carries the meaning Pulsar's REST producer gives
    it - 1 failed but retriable, 2 failed - never 0, which means stored."""
    assert ws_code in WS_ERROR_DESCRIPTIONS, ws_code
    reply: JsonObject = {"result": f"send-error:{ws_code}", "errorMsg": message}
    if context is not None:
        reply["context"] = context
    reply["errorCode"] = ERROR_RETRIABLE if retriable else ERROR_NOT_RETRIABLE
    reply["schemaVersion"] = 0
    return reply


def publish_ok(message_id_b64: str, context: str | None = None, duplicate: bool = False) -> bytes:
    """``{"result":"ok","messageId":..,"context":..,"errorCode":0,"schemaVersion":0}``."""
    return orjson.dumps(publish_ok_dict(message_id_b64, context, duplicate))


def publish_error(ws_code: int, message: str, context: str | None = None, retriable: bool = False) -> bytes:
    """``{"result":"send-error:N","errorMsg":..,"context":..,"errorCode":1|2,"schemaVersion":0}``."""
    return orjson.dumps(publish_error_dict(ws_code, message, context, retriable))


def publish_error_for(exc: ProtocolError) -> bytes:
    """The reply to a publish frame rejected with ``exc`` (echoes its context if known)."""
    return publish_error(exc.ws_code, exc.message, exc.context)


def publish_batch_reply(results: Sequence[JsonObject], context: str | None = None) -> bytes:
    """The reply to a batch frame: ``results`` are ``publish_ok_dict``/``publish_error_dict``
    values in message order (built without context)."""
    reply: JsonObject = {"type": "batch"}
    if context is not None:
        reply["context"] = context
    reply["results"] = list(results)
    return orjson.dumps(reply)


# ------------------------------------------------------------------ deliveries


def message_frame(
    message_id_b64: str,
    payload: bytes,
    properties: Mapping[str, str],
    publish_time_ms: int,
    redelivery_count: int,
    event_time_ms: int = 0,
    key: str | None = None,
) -> JsonObject:
    """A message pushed to a consumer or reader (§1.6.1); ``eventTime`` only if non-zero,
    ``key`` only if set."""
    frame: JsonObject = {
        "messageId": message_id_b64,
        "payload": pybase64.b64encode_as_string(payload),
        "properties": dict(properties) if properties else {},  # most have none: no copy
        "publishTime": format_iso(publish_time_ms),
        "redeliveryCount": redelivery_count,
    }
    if event_time_ms and EPOCH_MS_MIN <= event_time_ms <= EPOCH_MS_MAX:
        frame["eventTime"] = format_iso(event_time_ms)
    if key is not None:
        frame["key"] = key
    return frame


def messages_frame(frames: Sequence[bytes]) -> bytes:
    """Folio batched delivery of encoded message frames: ``{"type":"messages","messages":[...]}``."""
    return b'{"type":"messages","messages":[' + b",".join(frames) + b"]}"


def end_of_topic_reply(flag: bool) -> bytes:
    return orjson.dumps({"endOfTopic": flag})


def active_notice(active: bool) -> bytes:
    """Failover: this consumer became the active one (true) or stopped being it (false)."""
    return orjson.dumps({"type": "active", "active": active})


def ranges_notice(ranges: Sequence[HashRange]) -> bytes:
    """Key_Shared: the inclusive hash ranges this consumer now owns."""
    return orjson.dumps({"type": "ranges", "ranges": [[r.start, r.end] for r in ranges]})
