"""The AsyncAPI 3 document of the WebSocket v2 endpoints (``openapi/asyncapi.json``).

Owns: the handshake query parameters (``PRODUCER_QUERY``, ``CONSUMER_QUERY``,
``READER_QUERY``: names, types, defaults as ``gateway.protocol.params`` reads
them) and assembling channels (producer, consumer, reader, pingpong with their
path parameters and ``ws`` query bindings), operations (from the gateway's
side: ``receive`` what clients send, ``send`` what it answers) and messages
around the frame schemas of ``gateway.api.asyncapi_frames``. Rule: the
committed file is exactly ``render()``; a test fails on drift, and
``python -m gateway.api.asyncapi > openapi/asyncapi.json`` regenerates it.
The app serves the same bytes at ``GET /asyncapi.json``.
"""

from __future__ import annotations

import sys
from typing import Any

import orjson

from gateway.api.asyncapi_frames import BASE64, CONSUMER_COMMANDS, FRAME_SCHEMAS, NAME, Schema
from gateway.api.messaging_models import NAME_RULE
from gateway.protocol.errors import WS_ERROR_DESCRIPTIONS
from gateway.protocol.params import (
    COMPRESSION_TYPES,
    CRYPTO_FAILURE_ACTIONS,
    HASHING_SCHEMES,
    INITIAL_POSITIONS,
    RECEIVER_QUEUE_MAX,
    SUBSCRIPTION_MODES,
)
from gateway.subscription_type import SubscriptionType
from storage.formats.message_id import INT32_MAX, INT64_MAX

VERSION = "0.3.0"

# ------------------------------------------------------------------ handshake query parameters (ws bindings)


def _bool(description: str) -> Schema:
    return {"type": "boolean", "default": False, "description": description}


def _int(low: int, high: int, default: int, description: str) -> Schema:
    return {
        "type": "integer",
        "minimum": low,
        "maximum": high,
        "default": default,
        "description": description,
    }


def _enum(values: tuple[str, ...], description: str) -> Schema:
    return {"enum": list(values), "default": values[0], "description": description}


_TOKEN: Schema = {"type": "string", "description": "auth token for browsers (no Authorization header)"}

PRODUCER_QUERY: Schema = {
    "type": "object",
    "properties": {
        "producerName": {**NAME, "description": "fixed name (one connected producer per name; dedup)"},
        "initialSequenceId": _int(-1, INT64_MAX, -1, "first auto-assigned sequence id is this + 1"),
        "sendTimeoutMillis": _int(0, INT32_MAX, 30_000, "per-message send timeout; 0 = none"),
        "batchingEnabled": _bool("accepted (the gateway batches entries itself)"),
        "batchingMaxMessages": _int(1, INT32_MAX, 1000, "accepted"),
        "maxPendingMessages": _int(0, INT32_MAX, 1000, "accepted"),
        "batchingMaxPublishDelay": _int(0, INT64_MAX, 10, "accepted"),
        "messageRoutingMode": _enum(
            ("SinglePartition", "RoundRobinPartition", "CustomPartition"),
            "partitioned topics without a key: one partition, or rotate (CustomPartition = Single)",
        ),
        "compressionType": _enum(COMPRESSION_TYPES, "validated and recorded"),
        "hashingScheme": _enum(HASHING_SCHEMES, "key -> partition hash"),
        "encryptionKeys": {
            "type": "string",
            "description": "accepted and ignored: no server-side crypto; "
            "client-encrypted payloads are stored as given",
        },
        "markDuplicates": _bool(
            'Folio: a reply to a repeat that deduplication dropped adds `"duplicate": true` '
            "(without it the reply is Pulsar's: result ok, message id -1:-1)"
        ),
        "token": _TOKEN,
    },
}

_QUEUE = _int(0, RECEIVER_QUEUE_MAX, 1000, "unacked messages outstanding (0 means 1)")

CONSUMER_QUERY: Schema = {
    "type": "object",
    "properties": {
        "subscriptionType": _enum(tuple(SubscriptionType), "case-sensitive"),
        "subscriptionMode": _enum(SUBSCRIPTION_MODES, "NonDurable: the cursor is not stored"),
        "subscriptionInitialPosition": _enum(INITIAL_POSITIONS, "where a new subscription starts"),
        "receiverQueueSize": _QUEUE,
        "consumerName": {**NAME, "description": "Failover order, Key_Shared hashing"},
        "priorityLevel": _int(0, INT32_MAX, 0, "lower = higher priority"),
        "ackTimeoutMillis": {
            "description": "redeliver unacked messages after this long; 0 (off) or >= 1000",
            "anyOf": [{"const": 0}, {"type": "integer", "minimum": 1000, "maximum": INT64_MAX}],
            "default": 0,
        },
        "negativeAckRedeliveryDelay": _int(0, INT32_MAX, 60_000, "ms before a nacked message returns"),
        "maxRedeliverCount": _int(0, INT32_MAX, 0, "> 0 enables the dead-letter topic"),
        "deadLetterTopic": {"type": "string", "description": "default `{topic}-{subscription}-DLQ`"},
        "pullMode": _bool("deliver only against `permit` credits"),
        "cryptoFailureAction": _enum(CRYPTO_FAILURE_ACTIONS, "accepted (no encryption)"),
        "keySharedMode": {
            "enum": ["AUTO_SPLIT", "STICKY"],
            "default": "AUTO_SPLIT",
            "description": "Key_Shared only",
        },
        "stickyRanges": {
            "type": "string",
            "pattern": r"^[0-9]{1,5}-[0-9]{1,5}(,[0-9]{1,5}-[0-9]{1,5})*$",
            "description": "keySharedMode=STICKY: inclusive hash ranges `start-end,...` within 0..65535",
        },
        "batchDelivery": _bool("Folio: deliver `MessagesBatch` frames"),
        "notices": _bool("Folio: send `ActiveNotice` (Failover) and `RangesNotice` (Key_Shared) frames"),
        "token": _TOKEN,
    },
}

READER_QUERY: Schema = {
    "type": "object",
    "properties": {
        "messageId": {
            "description": "where to start: `earliest`, `latest` (default) or a base64 message id (excluded)",
            "anyOf": [{"enum": ["earliest", "latest"]}, BASE64],
            "default": "latest",
        },
        "receiverQueueSize": _QUEUE,
        "readerName": {**NAME, "description": "shown in stats"},
        "startMessageIdInclusive": _bool("Folio: also deliver the start message"),
        "cryptoFailureAction": _enum(CRYPTO_FAILURE_ACTIONS, "accepted (no encryption)"),
        "batchDelivery": _bool("Folio: deliver `MessagesBatch` frames"),
        "token": _TOKEN,
    },
}


CLOSE_CODES = {
    1000: "normal close (client or gateway shutting a session down cleanly)",
    **{4000 + n: f"Pulsar WebSocketError {n}: {text}" for n, text in WS_ERROR_DESCRIPTIONS.items()},
    4400: "bad request",
    4404: "the subscription was deleted",
    4409: "conflict",
    4413: "too large",
    4429: "the client does not read fast enough",
    4500: "internal error",
    4503: "the topic moved or its owner went away: reconnect (to any gateway)",
}

_DESCRIPTION = (
    "Pulsar-compatible WebSocket v2 API of a Folio gateway (docs/compatibility.md §1). Every frame is a text "
    "frame holding one JSON object. A refused handshake is answered with an HTTP status and an "
    "`ErrorBody` JSON (`{reason, code}`): 400 bad query parameter or name, 404 unknown namespace/topic, "
    "409 producer/consumer busy, 503 unavailable. Sessions are closed with codes in the valid private "
    "range 4000-4999 (4000 + Pulsar's WebSocketError number for protocol errors, 4000 + HTTP status "
    "otherwise): "
    + "; ".join(f"`{code}` {text}" for code, text in CLOSE_CODES.items())
    + ". Any gateway accepts any session and relays it to the topic's owner transparently."
)


def _message(name: str, summary: str, schema: str | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "title": name,
        "summary": summary,
        "contentType": "application/json",
        "payload": {"$ref": f"#/components/schemas/{schema or name}"},
    }


MESSAGES: dict[str, dict[str, Any]] = {
    "PublishRequest": _message("PublishRequest", "Publish one message"),
    "PublishBatch": _message("PublishBatch", "Publish several messages (Folio)"),
    "PublishReply": _message("PublishReply", "Result of one publish: ok or send-error:N"),
    "PublishBatchReply": _message("PublishBatchReply", "Results of a batch publish (Folio)"),
    "ConsumerMessage": _message("ConsumerMessage", "A delivered message"),
    "MessagesBatch": _message("MessagesBatch", "Several delivered messages (Folio, batchDelivery=true)"),
    "EndOfTopicReply": _message("EndOfTopicReply", "Answer to isEndOfTopic"),
    "ActiveNotice": _message("ActiveNotice", "Failover: became (in)active (Folio, only with notices=true)"),
    "RangesNotice": _message(
        "RangesNotice", "Key_Shared: owned hash ranges changed (Folio, only with notices=true)"
    ),
    "ErrorNotice": _message("ErrorNotice", "A command could not be applied (Folio)"),
    **{name: _message(name, FRAME_SCHEMAS[name]["description"].split(".")[0]) for name in CONSUMER_COMMANDS},
}

_PRODUCER_IN = ["PublishRequest", "PublishBatch"]
_PRODUCER_OUT = ["PublishReply", "PublishBatchReply"]
_CONSUMER_OUT = [
    "ConsumerMessage",
    "MessagesBatch",
    "EndOfTopicReply",
    "ActiveNotice",
    "RangesNotice",
    "ErrorNotice",
]
_READER_OUT = ["ConsumerMessage", "MessagesBatch", "EndOfTopicReply"]


def _parameters(*names: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        if name == "domain":
            out[name] = {"enum": ["persistent", "non-persistent"], "default": "persistent"}
        else:
            out[name] = {"description": f"{name} name: {NAME_RULE}"}
    return out


def _channel(
    address: str, description: str, messages: list[str], query: dict[str, Any] | None
) -> dict[str, Any]:
    params = [part[1:-1] for part in address.split("/") if part.startswith("{")]
    channel: dict[str, Any] = {
        "address": address,
        "description": description,
        "messages": {name: {"$ref": f"#/components/messages/{name}"} for name in messages},
    }
    if params:
        channel["parameters"] = _parameters(*params)
    if query is not None:
        channel["bindings"] = {"ws": {"method": "GET", "query": query, "bindingVersion": "0.1.0"}}
    return channel


CHANNELS: dict[str, dict[str, Any]] = {
    "producer": _channel(
        "/ws/v2/producer/{domain}/{tenant}/{namespace}/{topic}",
        "Publish messages (docs/compatibility.md §1.5). A frame that cannot be parsed gets a `send-error:N` "
        "reply and the session stays open; a send the topic fails ends the session (4503).",
        _PRODUCER_IN + _PRODUCER_OUT,
        PRODUCER_QUERY,
    ),
    "consumer": _channel(
        "/ws/v2/consumer/{domain}/{tenant}/{namespace}/{topic}/{subscription}",
        "Consume a subscription (docs/compatibility.md §1.6). A command that cannot be parsed closes the "
        "session with 4003.",
        [*CONSUMER_COMMANDS, *_CONSUMER_OUT],
        CONSUMER_QUERY,
    ),
    "reader": _channel(
        "/ws/v2/reader/{domain}/{tenant}/{namespace}/{topic}",
        "Read a topic from a position without a durable subscription (docs/compatibility.md §1.7). Frames "
        "from the client only release flow-control credit, except `isEndOfTopic`.",
        [*CONSUMER_COMMANDS, *_READER_OUT],
        READER_QUERY,
    ),
    "pingpong": _channel(
        "/ws/v2/pingpong",
        "Keep-alive check: WebSocket PING control frames are answered with PONG; no data frames.",
        [],
        None,
    ),
}


def _operation(action: str, channel: str, messages: list[str], summary: str) -> dict[str, Any]:
    return {
        "action": action,
        "channel": {"$ref": f"#/channels/{channel}"},
        "summary": summary,
        "messages": [{"$ref": f"#/channels/{channel}/messages/{name}"} for name in messages],
    }


OPERATIONS: dict[str, dict[str, Any]] = {
    "receivePublish": {
        **_operation("receive", "producer", _PRODUCER_IN, "Clients publish; one reply per frame"),
        "reply": {
            "channel": {"$ref": "#/channels/producer"},
            "messages": [{"$ref": f"#/channels/producer/messages/{name}"} for name in _PRODUCER_OUT],
        },
    },
    "sendDeliveries": _operation("send", "consumer", _CONSUMER_OUT, "Deliveries, replies and notices"),
    "receiveConsumerCommands": _operation(
        "receive", "consumer", CONSUMER_COMMANDS, "Acks and other commands"
    ),
    "sendReaderDeliveries": _operation("send", "reader", _READER_OUT, "Messages read and replies"),
    "receiveReaderCommands": _operation("receive", "reader", CONSUMER_COMMANDS, "Flow control, isEndOfTopic"),
}


def document() -> dict[str, Any]:
    return {
        "asyncapi": "3.0.0",
        "info": {"title": "Folio gateway WebSocket API", "version": VERSION, "description": _DESCRIPTION},
        "defaultContentType": "application/json",
        "servers": {
            "gateway": {
                "host": "127.0.0.1:8080",
                "protocol": "ws",
                "description": "any gateway of the cluster",
            }
        },
        "channels": CHANNELS,
        "operations": OPERATIONS,
        "components": {"schemas": FRAME_SCHEMAS, "messages": MESSAGES},
    }


def frame_schema(name: str) -> dict[str, Any]:
    """A self-contained JSON Schema of frame ``name`` (its ``$ref`` s resolve inside it)."""
    return {"$ref": f"#/components/schemas/{name}", "components": {"schemas": FRAME_SCHEMAS}}


def render() -> bytes:
    return orjson.dumps(document(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


if __name__ == "__main__":
    sys.stdout.buffer.write(render())
