"""JSON Schemas of every WebSocket frame, both ways (data only).

Owns: ``FRAME_SCHEMAS`` (name -> JSON Schema, draft-07 compatible, ``$ref``
into ``#/components/schemas/``). Rule: each schema
states what the real parsers and encoders do - ``gateway.protocol.ws_frames``
(publish requests, replies, message frames, notices),
``gateway.protocol.ws_commands`` (consumer/reader commands), docs/compatibility.md
§1.5-1.7 - so a
frame the gateway refuses is refused by its schema too, and every frame the
gateway sends validates. Tests check both directions against the real code.
"""

from __future__ import annotations

from typing import Any

from gateway.api.messaging_models import (
    BASE64_PATTERN,
    ISO_PATTERN,
    LONG_TEXT_PATTERN,
    MESSAGE_ID_STRING_PATTERN,
)
from gateway.broker.dispatch.base import HASH_SLOTS
from gateway.protocol.json_fields import PROPERTIES_MAX
from gateway.protocol.params import (
    NAME_CHARS_MAX,
)
from gateway.protocol.ws_commands import ACK_BATCH_MAX, RECONSUME_DELAY_MAX_MS
from gateway.protocol.ws_frames import DELIVER_AFTER_MAX_MS, PUBLISH_BATCH_MAX
from storage.formats.message_id import INT32_MAX, INT64_MAX

Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


ISO_DATE_TIME = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,9})?)?"
    r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2}(?::[0-9]{2})?)$"
)
KNOWN_TYPES = ["permit", "unsubscribe", "isEndOfTopic", "negativeAcknowledge", "ackCumulative", "seek"]

BASE64: Schema = {"type": "string", "pattern": BASE64_PATTERN, "contentEncoding": "base64"}
_PROPERTIES: Schema = {
    "type": "object",
    "additionalProperties": {"type": "string"},
    "maxProperties": PROPERTIES_MAX,
    "description": "application properties (string -> string)",
}
NAME: Schema = {"type": "string", "minLength": 1, "maxLength": NAME_CHARS_MAX}


def _long(integer: Schema, description: str) -> Schema:
    """A Java ``long`` field: a JSON integer, or a string holding a decimal integer
    (Jackson reads ``"1000"`` as 1000; the range is checked after parsing)."""
    text = {"type": "string", "pattern": LONG_TEXT_PATTERN}
    return {"description": f"{description}; a decimal string too", "anyOf": [integer, text]}


MESSAGE_IDS: Schema = {
    "type": "array",
    "items": ref("MessageIdRef"),
    "minItems": 1,
    "maxItems": ACK_BATCH_MAX,
}


def _sent(kind: str, description: str, required: list[str], **properties: Schema) -> Schema:
    """A frame the gateway sends, ``"type": kind``: ``type`` and ``required`` always
    there, no property but these."""
    return {
        "type": "object",
        "description": description,
        "properties": {"type": {"const": kind}, **properties},
        "required": ["type", *required],
        "additionalProperties": False,
    }


def _ids_command(kind: str, description: str) -> Schema:
    """A command naming one id (``messageId``) or several (``messageIds``), not both."""
    return {
        "type": "object",
        "description": description,
        "properties": {
            "type": {"const": kind},
            "messageId": ref("MessageIdRef"),
            "messageIds": MESSAGE_IDS,
        },
        "required": ["type"],
        "oneOf": [{"required": ["messageId"]}, {"required": ["messageIds"]}],
    }


FRAME_SCHEMAS: dict[str, Schema] = {
    # ---------------------------------------------------------------- shared
    "MessageIdRef": {
        "description": "a delivered `messageId` (base64 MessageIdData, docs/compatibility.md §1.8) or "
        "`ledger:entry[:partition[:batchIndex]]`",
        "anyOf": [
            {**BASE64, "minLength": 4},
            {"type": "string", "pattern": MESSAGE_ID_STRING_PATTERN},
        ],
    },
    # ---------------------------------------------------------------- producer, client -> gateway
    "PublishRequest": {
        "type": "object",
        "description": "Publish one message (docs/compatibility.md §1.5.1). Unknown fields are ignored.",
        "properties": {
            "payload": {**BASE64, "description": "base64 of the message bytes (required)"},
            "properties": _PROPERTIES,
            "context": {
                "type": ["string", "number", "boolean", "null"],
                "description": 'echoed in the reply as text (`5` comes back as `"5"`)',
            },
            "key": {"type": "string", "description": "routing / Key_Shared key"},
            "eventTime": {
                "type": "string",
                "pattern": ISO_PATTERN,
                "description": "ISO-8601 with offset (documented for years 1971..9998, days 01..28)",
            },
            "deliverAt": _long({"type": "integer"}, "deliver at this epoch ms (when > 0)"),
            "deliverAfterMs": _long(
                {"type": "integer", "maximum": DELIVER_AFTER_MAX_MS},
                "deliver after this delay (when > 0; wins)",
            ),
            "sequenceId": _long(
                {"type": "integer", "minimum": 0, "maximum": INT64_MAX}, "producer sequence id (dedup)"
            ),
            "schemaVersion": _long(
                {"type": "integer", "minimum": -(2**63), "maximum": INT64_MAX},
                "a registered version of the topic's schema the payload was written with "
                "(checked; < 0 = none)",
            ),
            "type": {"not": {"const": "batch"}},
        },
        "required": ["payload"],
    },
    "PublishBatch": {
        "type": "object",
        "description": "Folio: publish several messages in one frame; all-or-nothing validation, "
        "answered by ONE `PublishBatchReply` (or one `PublishReply` error naming `messages[i]`).",
        "properties": {
            "type": {"const": "batch"},
            "context": {"type": "string"},
            "messages": {
                "type": "array",
                "items": ref("PublishRequest"),
                "minItems": 1,
                "maxItems": PUBLISH_BATCH_MAX,
            },
        },
        "required": ["type", "messages"],
    },
    # ---------------------------------------------------------------- producer, gateway -> client
    "PublishReply": {
        "description": "The reply to one publish (docs/compatibility.md §1.5.2); "
        "replies come in completion order.",
        "oneOf": [ref("PublishOk"), ref("PublishError")],
    },
    "PublishOk": {
        "type": "object",
        "properties": {
            "result": {"const": "ok"},
            "messageId": {**BASE64, "description": "base64 MessageIdData of the stored message"},
            "context": {"type": "string"},
            "errorCode": {"const": 0},
            "schemaVersion": {
                "type": "integer",
                "minimum": 0,
                "maximum": INT64_MAX,
                "description": "the schema version the request named (0 when none)",
            },
            "duplicate": {
                "const": True,
                "description": "Folio, only for a producer opened with markDuplicates=true: deduplication "
                "recognised a repeat (the reply Pulsar sends has no such field)",
            },
        },
        "required": ["result", "messageId", "errorCode", "schemaVersion"],
        "additionalProperties": False,
    },
    "PublishError": {
        "type": "object",
        "description": "`send-error:3` unparsable frame (no context), `:7` bad payload or eventTime, "
        "`:8` too large (the session stays open) or a send the topic failed (no write quorum, "
        "topic moved...): the messages queued behind it fail too and the session closes with 4503 "
        "(docs/compatibility.md §1.5.3).",
        "properties": {
            "result": {"type": "string", "pattern": "^send-error:[1-8]$"},
            "errorMsg": {"type": "string"},
            "context": {"type": "string"},
            "errorCode": {"enum": [1, 2], "description": "1 failed but retriable, 2 failed"},
            "schemaVersion": {"const": 0},
        },
        "required": ["result", "errorMsg", "errorCode", "schemaVersion"],
        "additionalProperties": False,
    },
    "PublishBatchReply": _sent(
        "batch",
        "Folio: the reply to a `PublishBatch`, one result per message in order.",
        ["results"],
        context={"type": "string"},
        results={"type": "array", "items": ref("PublishReply"), "minItems": 1},
    ),
    # ---------------------------------------------------------------- consumer/reader, gateway -> client
    "ConsumerMessage": {
        "type": "object",
        "description": "A delivered message (docs/compatibility.md §1.6.1).",
        "properties": {
            "messageId": {**BASE64, "description": "base64 MessageIdData; ack with it"},
            "payload": {**BASE64, "description": "base64 of the message bytes"},
            "properties": _PROPERTIES,
            "publishTime": {"type": "string", "pattern": ISO_DATE_TIME},
            "redeliveryCount": {"type": "integer", "minimum": 0},
            "eventTime": {"type": "string", "pattern": ISO_DATE_TIME, "description": "only when set"},
            "key": {"type": "string", "description": "only when the message has a key"},
        },
        "required": ["messageId", "payload", "properties", "publishTime", "redeliveryCount"],
        "additionalProperties": False,
    },
    "MessagesBatch": _sent(
        "messages",
        "Folio (`batchDelivery=true`): several messages in one frame.",
        ["messages"],
        messages={"type": "array", "items": ref("ConsumerMessage"), "minItems": 1},
    ),
    "EndOfTopicReply": {
        "type": "object",
        "description": "The answer to `isEndOfTopic`.",
        "properties": {"endOfTopic": {"type": "boolean"}},
        "required": ["endOfTopic"],
        "additionalProperties": False,
    },
    "ActiveNotice": _sent(
        "active",
        "Folio, Failover: this consumer became (or stopped being) the active one.",
        ["active"],
        active={"type": "boolean"},
    ),
    "RangesNotice": _sent(
        "ranges",
        "Folio, Key_Shared: the inclusive hash ranges this consumer now owns.",
        ["ranges"],
        ranges={
            "type": "array",
            "items": {
                "type": "array",
                "items": {"type": "integer", "minimum": 0, "maximum": HASH_SLOTS - 1},
                "minItems": 2,
                "maxItems": 2,
            },
        },
    ),
    "ErrorNotice": _sent(
        "error",
        "Folio: a command that could not be applied, e.g. `ackCumulative` on a Shared "
        "subscription; the session stays open.",
        ["code", "errorMsg"],
        code={"type": "string"},
        errorMsg={"type": "string"},
    ),
    # ---------------------------------------------------------------- consumer/reader, client -> gateway
    "Ack": {
        "type": "object",
        "description": "Acknowledge (docs/compatibility.md §1.6.3): any frame whose `type` "
        "is absent or unknown is "
        'an ack. `"ackType":"cumulative"` makes it cumulative (Folio). On a reader: flow control only.',
        "properties": {
            "type": {"type": "string", "not": {"enum": [*KNOWN_TYPES, "reconsumeLater"]}},
            "messageId": ref("MessageIdRef"),
            "messageIds": MESSAGE_IDS,
            "ackType": {"enum": ["individual", "cumulative"]},
        },
        "oneOf": [
            {"required": ["messageId"]},
            {"required": ["messageIds"], "properties": {"ackType": {"const": "individual"}}},
        ],
    },
    "BatchedAck": {
        **_ids_command("ack", "Folio: acknowledge several ids in one frame."),
        "required": ["type", "messageIds"],
    },
    "AckCumulative": {
        "type": "object",
        "description": "Folio: acknowledge everything up to and including `messageId` (Exclusive, Failover).",
        "properties": {"type": {"const": "ackCumulative"}, "messageId": ref("MessageIdRef")},
        "required": ["type", "messageId"],
    },
    "NegativeAcknowledge": _ids_command(
        "negativeAcknowledge", "Redeliver after `negativeAckRedeliveryDelay` (docs/compatibility.md §1.6.3)."
    ),
    "Permit": {
        "type": "object",
        "description": "Pull mode: allow `permitMessages` more deliveries.",
        "properties": {
            "type": {"const": "permit"},
            "permitMessages": {"type": "integer", "minimum": 0, "maximum": INT32_MAX},
        },
        "required": ["type", "permitMessages"],
    },
    "Unsubscribe": {
        "type": "object",
        "description": "Delete the subscription; refused (close 4003) while other consumers are connected.",
        "properties": {"type": {"const": "unsubscribe"}},
        "required": ["type"],
    },
    "IsEndOfTopic": {
        "type": "object",
        "description": "Ask whether the topic is terminated and fully consumed (`EndOfTopicReply`).",
        "properties": {"type": {"const": "isEndOfTopic"}},
        "required": ["type"],
    },
    "Seek": {
        "type": "object",
        "description": "Folio: move the cursor to an id (`earliest`/`latest` too) or to a publish time.",
        "properties": {
            "type": {"const": "seek"},
            "messageId": {"anyOf": [{"enum": ["earliest", "latest"]}, ref("MessageIdRef")]},
            "timestamp": {"type": "integer", "minimum": 0, "maximum": INT64_MAX},
            "inclusive": {"type": "boolean", "description": "default true: the message at the id again"},
        },
        "required": ["type"],
        "oneOf": [{"required": ["messageId"]}, {"required": ["timestamp"]}],
    },
    "ReconsumeLater": {
        "type": "object",
        "description": "Folio: ack the message and publish a copy to the retry-letter topic, delivered "
        "after `delayMs`.",
        "properties": {
            "type": {"const": "reconsumeLater"},
            "messageId": ref("MessageIdRef"),
            "delayMs": {"type": "integer", "minimum": 0, "maximum": RECONSUME_DELAY_MAX_MS},
        },
        "required": ["type", "messageId"],
    },
}

CONSUMER_COMMANDS = [
    "Ack",
    "BatchedAck",
    "AckCumulative",
    "NegativeAcknowledge",
    "Permit",
    "Unsubscribe",
    "IsEndOfTopic",
    "Seek",
    "ReconsumeLater",
]
FRAME_SCHEMAS["ConsumerCommand"] = {
    "description": "Any frame a consumer or reader may send.",
    "anyOf": [ref(name) for name in CONSUMER_COMMANDS],
}
