"""Bodies and headers of the admin topic/subscription/message routes (pure).

Owns: parsing Pulsar's ``MessageId`` and ``ResetCursorData`` JSON bodies into
positions (``CursorTarget``), the JSON form of a message id, the ``X-Pulsar-*``
headers of a peeked message, the JSON item of Folio's message browse and the
id and metadata every JSON view of a message shows (browse and search).
Rules (docs/compatibility.md §1.8, §3.2): ``ResetCursorData`` is
``{ledgerId, entryId, partitionIndex?, batchIndex?, isExcluded?, excluded?,
properties?}`` (ids Java longs, indexes Java ints, the flags booleans -
``isExcluded`` wins over Jackson's ``excluded`` - and ``properties`` ignored) or
the string ``"earliest"``/``"latest"`` in any case; both ids negative is
earliest, Long.MAX:Long.MAX latest, one negative id is refused (the schema is
``gateway.api.admin_models.ResetCursorData``); ``X-Pulsar-Message-ID`` is ``L:E``,
plus ``:batchIndex`` when the entry holds several messages (a Folio addition:
Folio batches messages into entries itself, so each message gets its own id).
A bad body is ``InvalidArgument`` (400).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from gateway.broker.stats import iso_ms
from gateway.meta.errors import InvalidArgument
from storage.formats.entry_format import EntryMessage
from storage.formats.message_id import INT32_MAX, INT64_MAX, MessageId
from storage.formats.positions import EARLIEST, LATEST, NO_BATCH, MessagePosition, Position

_SAFE_VALUE = re.compile(r"[\x20-\x7e\xa0-\xff]*")
_TOKEN = re.compile(r"[A-Za-z0-9!#$&'*+.^_`|~-]+")


@dataclass(frozen=True, slots=True)
class CursorTarget:
    """Where an admin call points: an entry (or EARLIEST/LATEST), a batch index,
    and whether the position itself is excluded."""

    entry: Position
    batch_index: int = NO_BATCH
    excluded: bool = False

    @property
    def is_earliest(self) -> bool:
        return self.entry == EARLIEST

    @property
    def is_latest(self) -> bool:
        return self.entry == LATEST


def _int(data: dict[str, Any], name: str, high: int, default: int | None = None) -> int:
    """Field ``name``, an integer in ``[-high - 1, high]`` (a Java int or long)."""
    if name not in data and default is not None:
        return default
    value = data.get(name)
    if value is None:
        raise InvalidArgument(f"{name} is required (an integer)")
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name} must be an integer, got {value!r}"[:120])
    if not -high - 1 <= value <= high:
        raise InvalidArgument(f"{name} {value} is outside [{-high - 1}, {high}]")
    return value


def _flag(data: dict[str, Any], name: str) -> bool | None:
    value = data.get(name)
    if name in data and not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be true or false, got {value!r}"[:120])
    return value


def parse_target(value: Any, *, required: bool = True) -> CursorTarget | None:
    """A ``MessageId``/``ResetCursorData`` body, or ``"earliest"``/``"latest"``; None
    for no body (``None``) when not ``required``."""
    if value is None:
        if required:
            raise InvalidArgument("a ResetCursorData body is required")
        return None
    if isinstance(value, str):
        if value.lower() == "earliest":
            return CursorTarget(EARLIEST)
        if value.lower() == "latest":
            return CursorTarget(LATEST)
        raise InvalidArgument(f'expected "earliest", "latest" or a message id object, got {value[:40]!r}')
    if not isinstance(value, dict):
        raise InvalidArgument("expected a JSON object with ledgerId and entryId")
    ledger, entry = _int(value, "ledgerId", INT64_MAX), _int(value, "entryId", INT64_MAX)
    batch = _int(value, "batchIndex", INT32_MAX, NO_BATCH)
    _int(value, "partitionIndex", INT32_MAX, -1)
    flags = (_flag(value, "isExcluded"), _flag(value, "excluded"))
    excluded = next((flag for flag in flags if flag is not None), False)
    if ledger < 0 and entry < 0:
        return CursorTarget(EARLIEST, excluded=excluded)
    if ledger == INT64_MAX and entry == INT64_MAX:
        return CursorTarget(LATEST, excluded=excluded)
    if ledger < 0 or entry < 0:
        raise InvalidArgument(f"ledgerId and entryId must be >= 0, got {ledger}:{entry}")
    return CursorTarget(Position(ledger, entry), max(batch, NO_BATCH), excluded)


def message_id_json(position: MessagePosition, partition: int) -> dict[str, Any]:
    """Pulsar's ``MessageIdImpl`` JSON (``batchIndex`` only for a message of a batch)."""
    out: dict[str, Any] = {
        "ledgerId": position.ledger_id,
        "entryId": position.entry_id,
        "partitionIndex": partition,
    }
    if position.batch_index != NO_BATCH:
        out["batchIndex"] = position.batch_index
    return out


def message_headers(
    position: MessagePosition, message: EntryMessage, entry_size: int, partition: int
) -> dict[str, str]:
    """Pulsar's peek/get-message headers for one message (body = its payload)."""
    headers = {
        "X-Pulsar-Message-ID": str(position),
        "X-Pulsar-publish-time": iso_ms(message.publish_time_ms),
        "X-Pulsar-producer-name": message.producer_name,
        "X-Pulsar-sequence-id": str(message.sequence_id),
        "X-Pulsar-uncompressed-size": str(len(message.payload)),
        "X-Pulsar-num-batch-message": "1",
    }
    if entry_size > 1:
        headers["X-Pulsar-batch-size"] = str(entry_size)
        headers["X-Pulsar-batch-index"] = str(position.batch_index)
    if partition >= 0:
        headers["X-Pulsar-partition-index"] = str(partition)
    if message.event_time_ms:
        headers["X-Pulsar-event-time"] = iso_ms(message.event_time_ms)
    if message.schema_version is not None:
        headers["X-Pulsar-schema-version"] = str(message.schema_version)
    if message.key is not None:
        headers["X-Pulsar-partition-key"] = message.key.decode("utf-8", "replace")
    if message.ordering_key is not None:
        headers["X-Pulsar-ordering-key"] = base64.b64encode(message.ordering_key).decode()
    if message.deliver_at_ms:
        headers["X-Pulsar-deliver-at-time"] = iso_ms(message.deliver_at_ms)
    for name, value in message.properties.items():
        headers[f"X-Pulsar-PROPERTY-{_token(name)}"] = value
    return {k: _latin1(v) for k, v in headers.items()}


def shown_message_id(position: MessagePosition, entry_size: int, partition: int) -> MessageId:
    """The id a JSON view of a message gives it: its batch index and batch size only when
    its entry holds more than one message."""
    batched = entry_size > 1
    return MessageId(
        position.ledger_id,
        position.entry_id,
        partition,
        position.batch_index if batched else NO_BATCH,
        entry_size if batched else 0,
    )


def message_fields(message: EntryMessage) -> dict[str, Any]:
    """The metadata every JSON view of a message shows (browse and search)."""
    return {
        "key": message.key.decode("utf-8", "replace") if message.key is not None else None,
        "properties": dict(message.properties),
        "publishTime": message.publish_time_ms,
        "eventTime": message.event_time_ms or 0,
        "producerName": message.producer_name,
    }


def browse_item(
    position: MessagePosition, message: EntryMessage, entry_size: int, partition: int
) -> dict[str, Any]:
    """One message of Folio's JSON browse (``messages`` routes)."""
    return {
        "messageId": shown_message_id(position, entry_size, partition).to_base64(),
        "ledgerId": position.ledger_id,
        "entryId": position.entry_id,
        "batchIndex": position.batch_index if entry_size > 1 else None,
        **message_fields(message),
        "sequenceId": message.sequence_id,
        "schemaVersion": message.schema_version,
        "payload": base64.b64encode(message.payload).decode(),
    }


def _latin1(value: str) -> str:
    """Header values must be latin-1 without control characters: else percent-escaped."""
    if _SAFE_VALUE.fullmatch(value):
        return value
    return quote(value, safe="")


def _token(name: str) -> str:
    """A property name as a header-name token (percent-escaped if it is not one)."""
    return name if _TOKEN.fullmatch(name) else quote(name, safe="")
