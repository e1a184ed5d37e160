"""Bodies and headers of the REST producer and the HTTP consume API (pure).

Owns: the PIP-64 ``ProducerMessages`` body (``parse_producer_messages``) and
its ``ProducerAcks`` reply (``producer_acks``, ``ack_ok``, ``ack_error``), the
raw-body publish headers (``parse_raw_headers``) and the HTTP consume shapes
(``fetch_response``, ``parse_ack_body``). Rules (docs/compatibility.md §2.1, §2.3):
field names, defaults and the reply shape as upstream - ``messageId`` is the
string ``L:E:P`` (``L:E:P:B`` for a message inside a batch entry), errors carry
``errorCode`` 1 (retriable) or 2 and ``errorMsg``. Any malformed input raises
``BadRequest`` (HTTP 400) naming the place, e.g. ``messages[2]: key must be a
string, got a number``;
an oversize payload raises ``PayloadTooLarge``.

Deliberate fixes of upstream quirks (§2.1, §7 row 14), so WS and REST agree:
- ``payload`` is text stored as its UTF-8 bytes (upstream's default STRING
  schema); Folio extra ``"payloadEncoding":"base64"`` sends binary payloads.
  ``keySchema``/``valueSchema``/``schemaVersion`` are read here and applied by
  ``gateway.api.rest_schemas`` (the payload text is then encoded by the schema);
  ``replicationClusters`` and ``disableReplication`` are ignored (one cluster).
- ``eventTime`` is epoch ms (an integer - ``3178.0`` too, as Jackson reads a
  long - or a numeric string, as upstream) or an ISO-8601 string with offset
  (as WS); a fraction of a millisecond is refused.
- ``deliverAt`` is absolute and applied whenever > 0 (upstream needed
  ``eventTime``); ``deliverAfterMs`` is relative to the publish time (upstream
  added it to ``eventTime``); both given: ``deliverAfterMs`` wins, as WS.
- ``sequenceId`` absent means "assign one" (upstream stamped 0 on every message).
- ``sequenceId``, ``deliverAt``, ``deliverAfterMs`` and ``schemaVersion`` may
  be JSON strings holding a decimal integer, as Jackson reads a ``long``.
- a message dedup dropped is answered ``errorCode`` 0 with id ``-1:-1:P``;
  ``"duplicate":true`` is added only with the query ``markDuplicates=true``.

Raw-body publish uses the header names of Pulsar's peek responses:
``X-Pulsar-partition-key``, ``X-Pulsar-PROPERTY-<name>``,
``X-Pulsar-event-time``, ``X-Pulsar-sequence-id``, ``X-Pulsar-producer-name``,
``X-Pulsar-deliver-at-time`` and Folio's ``X-Pulsar-deliver-after-ms`` and
``X-Pulsar-context``. Header names are case-insensitive, so property names
given as headers arrive lower-cased; use the JSON body for others.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from gateway.protocol.errors import (
    ERROR_NOT_RETRIABLE,
    ERROR_RETRIABLE,
    BadRequest,
    FrameError,
    PayloadTooLarge,
    ProtocolError,
)
from gateway.protocol.json_fields import (
    PROPERTIES_MAX,
    JsonObject,
    as_int,
    decode_base64_payload,
    get_long,
    get_message_ids,
    get_properties,
    get_str,
    is_text,
    load_object,
)
from gateway.protocol.timefmt import EPOCH_MS_MAX, parse_iso
from gateway.protocol.ws_commands import ACK_BATCH_MAX
from gateway.protocol.ws_frames import PublishRequest, deliver_at
from storage.formats.message_id import INT64_MAX, MessageId

REST_BATCH_MAX = 10_000
DEFAULT_PRODUCER_NAME = "RestProducer"
PRODUCER_NAME_CHARS_MAX = 256

HEADER_KEY = "x-pulsar-partition-key"
HEADER_PROPERTY_PREFIX = "x-pulsar-property-"
HEADER_EVENT_TIME = "x-pulsar-event-time"
HEADER_SEQUENCE_ID = "x-pulsar-sequence-id"
HEADER_PRODUCER_NAME = "x-pulsar-producer-name"
HEADER_DELIVER_AT = "x-pulsar-deliver-at-time"
HEADER_DELIVER_AFTER = "x-pulsar-deliver-after-ms"
HEADER_CONTEXT = "x-pulsar-context"

_EPOCH_MS = re.compile(r"[0-9]{1,15}")
_INTEGER = re.compile(r"[+-]?[0-9]{1,19}")


@dataclass(frozen=True, slots=True)
class ProducerMessages:
    producer_name: str
    messages: list[PublishRequest]
    texts: list[bool]  # per message: the payload was given as text (not base64)
    schema_version: int | None = None  # ``schemaVersion``: use this registered version
    key_schema: str | None = None  # ``keySchema``: a JSON SchemaInfo
    value_schema: str | None = None  # ``valueSchema``: a JSON SchemaInfo


# ------------------------------------------------------------------ JSON publish


def parse_producer_messages(data: str | bytes, now_ms: int, max_payload: int) -> ProducerMessages:
    """The body of ``POST /topics/...``: 1..``REST_BATCH_MAX`` messages."""
    obj = _load(data)
    try:
        name = get_str(obj, "producerName")
    except FrameError as exc:
        raise BadRequest(exc.message) from exc
    if name is None:
        name = DEFAULT_PRODUCER_NAME
    elif not name.strip() or len(name) > PRODUCER_NAME_CHARS_MAX or not name.isprintable():
        raise BadRequest(f"producerName must be 1..{PRODUCER_NAME_CHARS_MAX} printable characters, not blank")
    schemas: dict[str, str | None] = {}
    for schema in ("keySchema", "valueSchema"):
        value = obj.get(schema)
        if value is not None and not isinstance(value, str):
            raise BadRequest(f"{schema} must be a string holding a JSON SchemaInfo")
        schemas[schema] = value
    try:
        version = get_long(obj, "schemaVersion", -(2**63), INT64_MAX)  # < 0: none (Pulsar's -1)
    except FrameError as exc:
        raise BadRequest(exc.message) from exc
    items = obj.get("messages")
    if not isinstance(items, list) or not items:
        raise BadRequest("messages must be a non-empty array")
    if len(items) > REST_BATCH_MAX:
        raise BadRequest(f"messages has {len(items)} entries, more than {REST_BATCH_MAX} per request")
    messages: list[PublishRequest] = []
    texts: list[bool] = []
    for index, item in enumerate(items):
        where = f"messages[{index}]"
        try:
            if not isinstance(item, dict):
                raise BadRequest("must be an object")
            messages.append(_message(item, now_ms, max_payload))
            texts.append(item.get("payloadEncoding") in (None, "text"))
        except PayloadTooLarge as exc:
            exc.message = f"{where}: {exc.message}"
            exc.args = (exc.message,)
            raise
        except ProtocolError as exc:
            raise BadRequest(f"{where}: {exc.message}") from exc
    return ProducerMessages(
        name,
        messages,
        texts,
        version if version is not None and version >= 0 else None,
        schemas["keySchema"],
        schemas["valueSchema"],
    )


def _message(obj: JsonObject, now_ms: int, max_payload: int) -> PublishRequest:
    encoding = get_str(obj, "payloadEncoding") or "text"
    if encoding not in ("text", "base64"):
        raise BadRequest('payloadEncoding must be "text" or "base64"')
    text = obj.get("payload")
    if text is None:
        raise BadRequest('payload is required (use "" for an empty message)')
    if not isinstance(text, str) or not is_text(text):
        raise BadRequest("payload must be a string")
    if encoding == "base64":
        payload = decode_base64_payload(text, max_payload)
    else:
        if len(text) > max_payload:  # every character is at least one UTF-8 byte
            raise _too_large(len(text.encode("utf-8")), max_payload)
        payload = text.encode("utf-8")
        if len(payload) > max_payload:
            raise _too_large(len(payload), max_payload)
    return PublishRequest(
        payload=payload,
        properties=get_properties(obj),
        key=get_str(obj, "key"),
        event_time_ms=_event_time(obj.get("eventTime")),
        deliver_at_ms=deliver_at(get_long(obj, "deliverAt"), get_long(obj, "deliverAfterMs"), now_ms),
        sequence_id=get_long(obj, "sequenceId", 0, INT64_MAX),
    )


def _event_time(value: object) -> int:
    if value is None:
        return 0
    number = as_int(value)
    if number is not None:
        ms = number
    elif isinstance(value, str) and _EPOCH_MS.fullmatch(value):
        ms = int(value)
    elif isinstance(value, str):
        try:
            ms = parse_iso(value)
        except FrameError as exc:
            raise BadRequest(f"eventTime must be epoch milliseconds or ISO-8601: {exc.message}") from exc
    else:
        raise BadRequest("eventTime must be epoch milliseconds (number or string) or an ISO-8601 string")
    if not 0 <= ms <= EPOCH_MS_MAX:
        raise BadRequest(f"eventTime {ms} is outside [0, {EPOCH_MS_MAX}]")
    return ms


# ------------------------------------------------------------------ replies


def ack_ok(message_id: MessageId, duplicate: bool = False) -> JsonObject:
    """A stored message: ``{"messageId":"L:E:P","errorCode":0,"schemaVersion":0}``."""
    result: JsonObject = {"messageId": str(message_id), "errorCode": 0, "schemaVersion": 0}
    if duplicate:
        result["duplicate"] = True
    return result


def ack_error(partition: int, message: str, retriable: bool) -> JsonObject:
    """A failed message; ``messageId`` is the partition it was routed to (as upstream)."""
    return {
        "messageId": str(partition),
        "errorCode": ERROR_RETRIABLE if retriable else ERROR_NOT_RETRIABLE,
        "errorMsg": message,
        "schemaVersion": 0,
    }


def producer_acks(results: Sequence[JsonObject], schema_version: int = 0) -> bytes:
    """``{"messagePublishResults":[...],"schemaVersion":0}`` (HTTP 200 even for failures)."""
    return orjson.dumps({"messagePublishResults": list(results), "schemaVersion": schema_version})


# ------------------------------------------------------------------ raw-body publish


def parse_raw_headers(
    headers: Mapping[str, str], body: bytes, now_ms: int, max_payload: int
) -> tuple[PublishRequest, str | None]:
    """A raw-body publish: the body is the payload, metadata comes from headers."""
    if len(body) > max_payload:
        raise _too_large(len(body), max_payload)
    lowered = {name.lower(): value for name, value in headers.items() if name.lower().startswith("x-pulsar-")}
    if not all(is_text(value) for value in lowered.values()):
        raise BadRequest("X-Pulsar-* header values must be valid Unicode")
    properties: dict[str, str] = {}
    for header, value in lowered.items():
        if header.startswith(HEADER_PROPERTY_PREFIX):
            prop = header[len(HEADER_PROPERTY_PREFIX) :]
            if not prop:
                raise BadRequest("X-Pulsar-PROPERTY- header needs a property name after the prefix")
            properties[prop] = value
    if len(properties) > PROPERTIES_MAX:
        raise BadRequest(f"{len(properties)} X-Pulsar-PROPERTY- headers, more than {PROPERTIES_MAX}")
    name = lowered.get(HEADER_PRODUCER_NAME)
    if name is not None and (not name.strip() or len(name) > PRODUCER_NAME_CHARS_MAX):
        raise BadRequest(f"X-Pulsar-producer-name must be 1..{PRODUCER_NAME_CHARS_MAX} characters")
    event_time = lowered.get(HEADER_EVENT_TIME)
    try:
        event_ms = 0 if event_time is None else _event_time(event_time.strip())
    except ProtocolError as exc:
        raise BadRequest(f"X-Pulsar-event-time: {exc.message}") from exc
    sequence_id = _header_int(lowered, HEADER_SEQUENCE_ID, 0, INT64_MAX)
    at_text = lowered.get(HEADER_DELIVER_AT)
    at_ms = None if at_text is None else _header_time(at_text)
    after = _header_int(lowered, HEADER_DELIVER_AFTER, -(2**63), INT64_MAX)
    try:
        deliver_at_ms = deliver_at(at_ms, after, now_ms)
    except ProtocolError as exc:
        raise BadRequest(f"X-Pulsar-deliver-after-ms: {exc.message}") from exc
    request = PublishRequest(
        payload=bytes(body),
        properties=properties,
        context=lowered.get(HEADER_CONTEXT),
        key=lowered.get(HEADER_KEY),
        event_time_ms=event_ms,
        deliver_at_ms=deliver_at_ms,
        sequence_id=sequence_id,
    )
    return request, name


def _header_int(headers: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    raw = headers.get(name)
    if raw is None:
        return None
    text = raw.strip()
    if not _INTEGER.fullmatch(text) or not low <= int(text) <= high:
        raise BadRequest(f"{_display(name)} must be an integer in [{low}, {high}], got {text[:40]!r}")
    return int(text)


def _header_time(text: str) -> int:
    text = text.strip()
    if _EPOCH_MS.fullmatch(text):
        return int(text)
    try:
        return parse_iso(text)
    except FrameError as exc:
        raise BadRequest(f"X-Pulsar-deliver-at-time must be epoch ms or ISO-8601: {exc.message}") from exc


# ------------------------------------------------------------------ HTTP consume


def fetch_response(messages: Sequence[JsonObject]) -> bytes:
    """``{"messages":[...]}``; each item is a WebSocket message frame (``message_frame``)."""
    return orjson.dumps({"messages": list(messages)})


def id_texts(data: str | bytes) -> list[str]:
    """The ids of an ack body exactly as sent (after ``parse_ack_body`` accepted it)."""
    items = _load(data).get("messageIds")
    return [str(i) for i in items] if isinstance(items, list) else []


def parse_ack_body(data: str | bytes) -> list[MessageId]:
    """``{"messageIds":[ID,...]}`` with base64 or ``L:E[:P[:B]]`` ids (1..``ACK_BATCH_MAX``)."""
    obj = _load(data)
    try:
        return get_message_ids(obj, "messageIds", ACK_BATCH_MAX)
    except FrameError as exc:
        raise BadRequest(exc.message) from exc


# ------------------------------------------------------------------ helpers


def _load(data: str | bytes) -> JsonObject:
    try:
        return load_object(data)
    except FrameError as exc:
        raise BadRequest(f"Invalid JSON body: {exc.message}") from exc


def _too_large(size: int, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(size, limit)


def _display(header: str) -> str:
    """``x-pulsar-sequence-id`` -> ``X-Pulsar-sequence-id`` (as the docs spell it)."""
    return "X-Pulsar-" + header.removeprefix("x-pulsar-")
