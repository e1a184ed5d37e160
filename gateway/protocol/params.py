"""Query parameters of the WebSocket producer, consumer and reader endpoints (pure).

Owns: ``ProducerParams``, ``ConsumerParams``, ``ReaderParams`` and their
parsers from the handshake's query ``Mapping[str, str]``. Rules
(docs/compatibility.md §1.5, §1.6, §1.7, §1.4):
- parameter names, defaults and enum values as upstream; enums are
  case-sensitive (Java ``Enum.valueOf``); a bad value raises ``InvalidParams``
  whose message starts ``"Invalid query params: "`` and names the parameter and
  value (e.g. ``Invalid subscriptionType Foo``) - HTTP 400 at the edge.
- integers are decimal (optional sign, like ``Long.parseLong``); booleans are
  ``true``/``false`` in any case; anything else is ``InvalidParams`` (upstream
  silently read a bad boolean as false - Folio refuses it).
- unknown parameters are ignored.
Deliberate differences from upstream, each for a reason stated inline:
``receiverQueueSize`` is not capped at 1000 (bounded by ``RECEIVER_QUEUE_MAX``),
``ackTimeoutMillis`` 1..999 is refused (the Java client refuses it too),
``encryptionKeys`` is accepted and ignored (Folio has no server-side crypto
key reader, and a payload the client encrypted itself is stored as the opaque
bytes it is), batching/compression/routing parameters are validated and
otherwise only recorded (the gateway batches entries itself and stores
payloads uncompressed), ``keySharedMode``/``stickyRanges``/
``batchDelivery``/``notices``/``startMessageIdInclusive``/``markDuplicates`` are
Folio extras, each off unless asked for, so a Pulsar client that never names
them gets only the frames and fields Pulsar sends.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal, TypeVar

from gateway.broker.dispatch.base import HASH_SLOTS, ConsumerInfo, HashRange, KeySharedMode
from gateway.names import InvalidName, TopicName
from gateway.protocol.errors import InvalidParams
from gateway.protocol.json_fields import message_id_forms, message_id_refused
from gateway.subscription_type import SubscriptionType
from storage.formats.errors import MessageIdError
from storage.formats.message_id import EARLIEST_ID, INT32_MAX, INT64_MAX, LATEST_ID, MessageId

RECEIVER_QUEUE_MAX = 100_000
RECEIVER_QUEUE_DEFAULT = 1000
NAME_CHARS_MAX = 256  # producerName, consumerName, readerName
STICKY_RANGES_MAX = 1024
ACK_TIMEOUT_MS_MIN = 1000
VALUE_CHARS_SHOWN = 64

SubscriptionMode = Literal["Durable", "NonDurable"]
InitialPosition = Literal["Latest", "Earliest"]
RoutingMode = Literal["SinglePartition", "RoundRobinPartition"]
CompressionType = Literal["NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"]
HashingScheme = Literal["JavaStringHash", "Murmur3_32Hash"]
CryptoFailureAction = Literal["FAIL", "DISCARD", "CONSUME"]
ReaderStart = MessageId | Literal["earliest", "latest"]

SUBSCRIPTION_MODES: tuple[SubscriptionMode, ...] = ("Durable", "NonDurable")
INITIAL_POSITIONS: tuple[InitialPosition, ...] = ("Latest", "Earliest")
COMPRESSION_TYPES: tuple[CompressionType, ...] = ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY")
HASHING_SCHEMES: tuple[HashingScheme, ...] = ("JavaStringHash", "Murmur3_32Hash")
CRYPTO_FAILURE_ACTIONS: tuple[CryptoFailureAction, ...] = ("FAIL", "DISCARD", "CONSUME")

_INTEGER = re.compile(r"[+-]?[0-9]{1,19}")
_RANGE = re.compile(r"([0-9]{1,5})-([0-9]{1,5})")
_T = TypeVar("_T", bound=str)


@dataclass(frozen=True, slots=True)
class ProducerParams:
    producer_name: str | None = None  # None: the gateway generates a unique name
    initial_sequence_id: int = -1  # first auto-assigned sequence id is this + 1
    send_timeout_ms: int = 30_000  # 0 = no timeout
    batching_enabled: bool = False
    batching_max_messages: int = 1000
    max_pending_messages: int = 1000
    batching_max_publish_delay_ms: int = 10
    message_routing_mode: RoutingMode = "SinglePartition"
    compression_type: CompressionType = "NONE"  # validated and recorded only
    hashing_scheme: HashingScheme = "JavaStringHash"
    mark_duplicates: bool = False  # Folio: ``"duplicate":true`` in replies to a deduplicated repeat
    token: str | None = None

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> ProducerParams:
        return parse_producer_params(query)


@dataclass(frozen=True, slots=True)
class ConsumerParams:
    subscription_type: SubscriptionType = SubscriptionType.EXCLUSIVE
    subscription_mode: SubscriptionMode = "Durable"
    initial_position: InitialPosition = "Latest"
    receiver_queue_size: int = RECEIVER_QUEUE_DEFAULT
    consumer_name: str | None = None  # None: the caller generates one
    priority_level: int = 0
    ack_timeout_ms: int = 0  # 0 = off
    negative_ack_redelivery_delay_ms: int = 60_000
    max_redeliver_count: int = 0  # 0 = no dead-letter topic
    dead_letter_topic: str | None = None  # None: "{topic}-{subscription}-DLQ" when enabled
    pull_mode: bool = False
    crypto_failure_action: CryptoFailureAction = "FAIL"
    key_shared_mode: KeySharedMode = KeySharedMode.AUTO_SPLIT
    sticky_ranges: tuple[HashRange, ...] = ()  # sorted, disjoint; STICKY only
    batch_delivery: bool = False  # Folio: several messages per frame
    notices: bool = False  # Folio: "active" (Failover) and "ranges" (Key_Shared) notice frames
    token: str | None = None

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> ConsumerParams:
        return parse_consumer_params(query)

    def to_consumer_info(self, name: str) -> ConsumerInfo:
        return ConsumerInfo(
            name=name,
            priority_level=self.priority_level,
            receiver_queue_size=self.receiver_queue_size,
            pull_mode=self.pull_mode,
            ack_timeout_ms=self.ack_timeout_ms,
            nack_redelivery_delay_ms=self.negative_ack_redelivery_delay_ms,
            max_redeliver_count=self.max_redeliver_count,
            key_shared_mode=self.key_shared_mode,
            sticky_ranges=self.sticky_ranges,
        )


@dataclass(frozen=True, slots=True)
class ReaderParams:
    start: ReaderStart = "latest"  # base64 ids of -1:-1 / Long.MAX:Long.MAX become the sentinels
    receiver_queue_size: int = RECEIVER_QUEUE_DEFAULT
    reader_name: str | None = None
    start_inclusive: bool = False  # Folio: also deliver the start message itself
    crypto_failure_action: CryptoFailureAction = "FAIL"
    batch_delivery: bool = False
    token: str | None = None

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> ReaderParams:
        return parse_reader_params(query)


def parse_producer_params(query: Mapping[str, str]) -> ProducerParams:
    routing = query.get("messageRoutingMode", "SinglePartition")
    if routing == "CustomPartition":  # upstream ignores it: no custom router can be given over WS
        routing = "SinglePartition"
    return ProducerParams(
        producer_name=_name(query, "producerName"),
        initial_sequence_id=_int(query, "initialSequenceId", -1, -1, INT64_MAX),
        send_timeout_ms=_int(query, "sendTimeoutMillis", 30_000, 0, INT32_MAX),
        batching_enabled=_bool(query, "batchingEnabled", False),
        batching_max_messages=_int(query, "batchingMaxMessages", 1000, 1, INT32_MAX),
        max_pending_messages=_int(query, "maxPendingMessages", 1000, 0, INT32_MAX),
        batching_max_publish_delay_ms=_int(query, "batchingMaxPublishDelay", 10, 0, INT64_MAX),
        message_routing_mode=_enum(
            {"messageRoutingMode": routing}, "messageRoutingMode", ("SinglePartition", "RoundRobinPartition")
        ),
        compression_type=_enum(query, "compressionType", COMPRESSION_TYPES),
        hashing_scheme=_enum(query, "hashingScheme", HASHING_SCHEMES),
        mark_duplicates=parse_mark_duplicates(query),
        token=query.get("token"),
    )


def parse_authoritative(query: Mapping[str, str]) -> bool:
    """``authoritative`` (lookup, REST, WebSocket): the caller already asked the owner,
    so its answer is final (a gateway forwarding to the owner sets it). Anything but
    ``true`` (any case) is false, as upstream reads it."""
    return query.get("authoritative", "false").lower() == "true"


def parse_mark_duplicates(query: Mapping[str, str]) -> bool:
    """``markDuplicates`` (WebSocket producer and REST publish): whether a reply to a
    repeat that dedup dropped says ``"duplicate":true``. Off by default: Pulsar answers
    a duplicate with a plain ok and message id -1:-1, nothing more."""
    return _bool(query, "markDuplicates", False)


def parse_consumer_params(query: Mapping[str, str]) -> ConsumerParams:
    subscription_type = _enum(query, "subscriptionType", tuple(SubscriptionType))
    ack_timeout_ms = _int(query, "ackTimeoutMillis", 0, 0, INT64_MAX)
    if 0 < ack_timeout_ms < ACK_TIMEOUT_MS_MIN:
        raise InvalidParams(
            f"Invalid ackTimeoutMillis {ack_timeout_ms}: must be 0 (off) or at least {ACK_TIMEOUT_MS_MIN} ms"
        )
    key_shared_mode, sticky_ranges = _key_shared(query, subscription_type)
    return ConsumerParams(
        subscription_type=subscription_type,
        subscription_mode=_enum(query, "subscriptionMode", SUBSCRIPTION_MODES),
        initial_position=_enum(query, "subscriptionInitialPosition", INITIAL_POSITIONS),
        receiver_queue_size=_receiver_queue_size(query),
        consumer_name=_name(query, "consumerName"),
        priority_level=_int(query, "priorityLevel", 0, 0, INT32_MAX),
        ack_timeout_ms=ack_timeout_ms,
        negative_ack_redelivery_delay_ms=_int(query, "negativeAckRedeliveryDelay", 60_000, 0, INT32_MAX),
        max_redeliver_count=_int(query, "maxRedeliverCount", 0, 0, INT32_MAX),
        dead_letter_topic=_topic(query, "deadLetterTopic"),
        pull_mode=_bool(query, "pullMode", False),
        crypto_failure_action=_crypto_failure_action(query),
        key_shared_mode=key_shared_mode,
        sticky_ranges=sticky_ranges,
        batch_delivery=_bool(query, "batchDelivery", False),
        notices=_bool(query, "notices", False),
        token=query.get("token"),
    )


def parse_reader_params(query: Mapping[str, str]) -> ReaderParams:
    return ReaderParams(
        start=_reader_start(query.get("messageId", "latest")),
        receiver_queue_size=_receiver_queue_size(query),
        reader_name=_name(query, "readerName"),
        start_inclusive=_bool(query, "startMessageIdInclusive", False),
        crypto_failure_action=_crypto_failure_action(query),
        batch_delivery=_bool(query, "batchDelivery", False),
        token=query.get("token"),
    )


def parse_sticky_ranges(text: str) -> tuple[HashRange, ...]:
    """``"0-16383,32768-65535"``: inclusive ranges within 0..65535, not overlapping; sorted."""
    parts = text.split(",")
    if len(parts) > STICKY_RANGES_MAX:
        raise InvalidParams(f"Invalid stickyRanges: more than {STICKY_RANGES_MAX} ranges")
    ranges: list[HashRange] = []
    for part in parts:
        match = _RANGE.fullmatch(part.strip())
        if match is None:
            raise InvalidParams(f"Invalid stickyRanges {_shown(text)}: expected start-end[,start-end...]")
        hash_range = HashRange(int(match.group(1)), int(match.group(2)))
        if not hash_range.is_valid():
            raise InvalidParams(
                f"Invalid stickyRanges {_shown(text)}: range {part.strip()} must have "
                f"0 <= start <= end <= {HASH_SLOTS - 1}"
            )
        ranges.append(hash_range)
    ranges.sort()
    for previous, current in pairwise(ranges):
        if previous.overlaps(current):
            raise InvalidParams(f"Invalid stickyRanges {_shown(text)}: {previous} overlaps {current}")
    return tuple(ranges)


# ------------------------------------------------------------------ helpers


def _shown(value: str) -> str:
    return value if len(value) <= VALUE_CHARS_SHOWN else value[:VALUE_CHARS_SHOWN] + "..."


def _int(query: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = query.get(name)
    if text is None:
        return default
    if not _INTEGER.fullmatch(text):
        raise InvalidParams(f"Invalid {name} {_shown(text)}: not an integer")
    value = int(text)
    if not low <= value <= high:
        raise InvalidParams(f"Invalid {name} {value}: must be between {low} and {high}")
    return value


def _bool(query: Mapping[str, str], name: str, default: bool) -> bool:
    text = query.get(name)
    if text is None:
        return default
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise InvalidParams(f"Invalid {name} {_shown(text)}: expected true or false")
    return lowered == "true"


def _enum(query: Mapping[str, str], name: str, allowed: tuple[_T, ...]) -> _T:
    text = query.get(name)
    if text is None:
        return allowed[0]
    for value in allowed:
        if text == value:
            return value
    raise InvalidParams(f"Invalid {name} {_shown(text)}: expected one of {', '.join(allowed)}")


def _name(query: Mapping[str, str], name: str) -> str | None:
    text = query.get(name)
    if text is None:
        return None
    if not text.strip() or len(text) > NAME_CHARS_MAX or not text.isprintable():
        raise InvalidParams(
            f"Invalid {name} {_shown(text)}: must be 1..{NAME_CHARS_MAX} printable characters, not blank"
        )
    return text


def _receiver_queue_size(query: Mapping[str, str]) -> int:
    size = _int(query, "receiverQueueSize", RECEIVER_QUEUE_DEFAULT, 0, RECEIVER_QUEUE_MAX)
    return max(size, 1)  # upstream: 0 -> 1 (at least one message outstanding in push mode)


def _topic(query: Mapping[str, str], name: str) -> str | None:
    text = query.get(name)
    if text is None:
        return None
    try:
        return str(TopicName.parse(text))
    except InvalidName as exc:
        raise InvalidParams(f"Invalid {name} {_shown(text)}: {exc}") from exc


def _crypto_failure_action(query: Mapping[str, str]) -> CryptoFailureAction:
    text = query.get("cryptoFailureAction")
    for value in CRYPTO_FAILURE_ACTIONS:
        if text == value:
            return value
    return "FAIL"  # upstream logs an invalid value and keeps the default


def _key_shared(
    query: Mapping[str, str], subscription_type: SubscriptionType
) -> tuple[KeySharedMode, tuple[HashRange, ...]]:
    mode_text = query.get("keySharedMode")
    ranges_text = query.get("stickyRanges")
    if subscription_type is not SubscriptionType.KEY_SHARED:
        if mode_text is not None or ranges_text is not None:  # as the Java client's builder
            raise InvalidParams("keySharedMode and stickyRanges need subscriptionType=Key_Shared")
        return KeySharedMode.AUTO_SPLIT, ()
    mode = KeySharedMode[_enum(query, "keySharedMode", ("AUTO_SPLIT", "STICKY"))]
    if mode is KeySharedMode.AUTO_SPLIT:
        if ranges_text is not None:
            raise InvalidParams("Invalid stickyRanges: only valid with keySharedMode=STICKY")
        return mode, ()
    if not ranges_text:
        raise InvalidParams("Invalid stickyRanges: keySharedMode=STICKY needs non-empty stickyRanges")
    return mode, parse_sticky_ranges(ranges_text)


def _reader_start(text: str) -> ReaderStart:
    if text in ("earliest", "latest"):
        return "earliest" if text == "earliest" else "latest"
    try:
        start = MessageId.from_base64(text)
    except MessageIdError as exc:
        forms = message_id_forms(sentinels=True, strings=False)
        raise InvalidParams(message_id_refused("messageId", text, str(exc), forms)) from exc
    if start == EARLIEST_ID:
        return "earliest"
    if start == LATEST_ID:
        return "latest"
    return start
