"""Handshake query parameters (docs/compatibility.md §1.5, §1.6, §1.7, §1.4): names,
defaults, every field both ways, and 400-style errors with the exact prefix."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.broker.dispatch.base import ConsumerInfo, HashRange, KeySharedMode
from gateway.protocol.errors import InvalidParams, ProtocolError
from gateway.protocol.params import (
    RECEIVER_QUEUE_MAX,
    STICKY_RANGES_MAX,
    ConsumerParams,
    ProducerParams,
    ReaderParams,
    parse_consumer_params,
    parse_producer_params,
    parse_reader_params,
    parse_sticky_ranges,
)
from storage.formats.message_id import EARLIEST_ID, LATEST_ID, MessageId

pytestmark = pytest.mark.unit


def invalid(parse: object, query: dict[str, str]) -> str:
    assert callable(parse)
    with pytest.raises(InvalidParams) as info:
        parse(query)
    assert info.value.code == "invalid_params"
    assert isinstance(info.value, ProtocolError)
    assert info.value.message.startswith("Invalid query params: ")
    assert str(info.value) == info.value.message
    return info.value.message


# ------------------------------------------------------------------ producer


def test_producer_defaults() -> None:
    params = parse_producer_params({})
    assert params == ProducerParams()
    assert params.producer_name is None
    assert params.initial_sequence_id == -1
    assert params.send_timeout_ms == 30_000
    assert params.batching_enabled is False
    assert params.batching_max_messages == 1000
    assert params.max_pending_messages == 1000
    assert params.batching_max_publish_delay_ms == 10
    assert params.message_routing_mode == "SinglePartition"
    assert params.compression_type == "NONE"
    assert params.hashing_scheme == "JavaStringHash"
    assert params.mark_duplicates is False  # Pulsar's reply to a duplicate has no "duplicate" field
    assert params.token is None


def test_producer_every_field() -> None:
    params = ProducerParams.from_query(
        {
            "producerName": "p-1",
            "initialSequenceId": "41",
            "sendTimeoutMillis": "0",
            "batchingEnabled": "TRUE",
            "batchingMaxMessages": "50",
            "maxPendingMessages": "7",
            "batchingMaxPublishDelay": "3",
            "messageRoutingMode": "RoundRobinPartition",
            "compressionType": "ZSTD",
            "hashingScheme": "Murmur3_32Hash",
            "markDuplicates": "True",
            "token": "eyJ",
            "somethingUnknown": "ignored",
        }
    )
    assert params == ProducerParams(
        producer_name="p-1",
        initial_sequence_id=41,
        send_timeout_ms=0,
        batching_enabled=True,
        batching_max_messages=50,
        max_pending_messages=7,
        batching_max_publish_delay_ms=3,
        message_routing_mode="RoundRobinPartition",
        compression_type="ZSTD",
        hashing_scheme="Murmur3_32Hash",
        mark_duplicates=True,
        token="eyJ",
    )


def test_custom_partition_is_single_partition() -> None:
    assert parse_producer_params({"messageRoutingMode": "CustomPartition"}).message_routing_mode == (
        "SinglePartition"
    )


@pytest.mark.parametrize("compression", ["NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"])
def test_compression_types(compression: str) -> None:
    assert parse_producer_params({"compressionType": compression}).compression_type == compression


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"messageRoutingMode": "roundRobinPartition"}, "Invalid messageRoutingMode roundRobinPartition"),
        ({"compressionType": "lz4"}, "Invalid compressionType lz4"),
        ({"hashingScheme": "Murmur3"}, "Invalid hashingScheme Murmur3"),
        ({"initialSequenceId": "abc"}, "Invalid initialSequenceId abc: not an integer"),
        ({"initialSequenceId": "-2"}, "Invalid initialSequenceId -2"),
        ({"sendTimeoutMillis": "-1"}, "Invalid sendTimeoutMillis -1"),
        ({"sendTimeoutMillis": "1.5"}, "Invalid sendTimeoutMillis 1.5"),
        ({"sendTimeoutMillis": " 5"}, "Invalid sendTimeoutMillis  5"),
        ({"batchingMaxMessages": "0"}, "Invalid batchingMaxMessages 0"),
        ({"batchingEnabled": "yes"}, "Invalid batchingEnabled yes: expected true or false"),
        ({"markDuplicates": "1"}, "Invalid markDuplicates 1: expected true or false"),
        ({"producerName": ""}, "Invalid producerName"),
        ({"producerName": "   "}, "Invalid producerName"),
        ({"producerName": "a\nb"}, "Invalid producerName"),
        ({"producerName": "x" * 257}, "Invalid producerName"),
    ],
)
def test_producer_bad_values(query: dict[str, str], expected: str) -> None:
    message = invalid(parse_producer_params, query)
    assert message.startswith(
        expected if expected.startswith("Invalid query") else f"Invalid query params: {expected}"
    )


def test_bad_value_is_truncated_in_message() -> None:
    message = invalid(parse_producer_params, {"compressionType": "Z" * 1000})
    assert len(message) < 200


# ------------------------------------------------------------------ consumer


def test_consumer_defaults() -> None:
    params = parse_consumer_params({})
    assert params == ConsumerParams()
    assert params.subscription_type == "Exclusive"
    assert params.subscription_mode == "Durable"
    assert params.initial_position == "Latest"
    assert params.receiver_queue_size == 1000
    assert params.consumer_name is None
    assert params.priority_level == 0
    assert params.ack_timeout_ms == 0
    assert params.negative_ack_redelivery_delay_ms == 60_000
    assert params.max_redeliver_count == 0
    assert params.dead_letter_topic is None
    assert params.pull_mode is False
    assert params.crypto_failure_action == "FAIL"
    assert params.key_shared_mode is KeySharedMode.AUTO_SPLIT
    assert params.sticky_ranges == ()
    assert params.batch_delivery is False


def test_consumer_every_field() -> None:
    params = ConsumerParams.from_query(
        {
            "subscriptionType": "Key_Shared",
            "subscriptionMode": "NonDurable",
            "subscriptionInitialPosition": "Earliest",
            "receiverQueueSize": "5000",
            "consumerName": "c1",
            "priorityLevel": "2",
            "ackTimeoutMillis": "1000",
            "negativeAckRedeliveryDelay": "0",
            "maxRedeliverCount": "3",
            "deadLetterTopic": "t/ns/dlq",
            "pullMode": "true",
            "cryptoFailureAction": "CONSUME",
            "keySharedMode": "STICKY",
            "stickyRanges": "32768-65535,0-16383",
            "batchDelivery": "True",
            "token": "tok",
        }
    )
    assert params == ConsumerParams(
        subscription_type="Key_Shared",
        subscription_mode="NonDurable",
        initial_position="Earliest",
        receiver_queue_size=5000,
        consumer_name="c1",
        priority_level=2,
        ack_timeout_ms=1000,
        negative_ack_redelivery_delay_ms=0,
        max_redeliver_count=3,
        dead_letter_topic="persistent://t/ns/dlq",
        pull_mode=True,
        crypto_failure_action="CONSUME",
        key_shared_mode=KeySharedMode.STICKY,
        sticky_ranges=(HashRange(0, 16383), HashRange(32768, 65535)),
        batch_delivery=True,
        token="tok",
    )
    assert params.to_consumer_info("c1") == ConsumerInfo(
        name="c1",
        priority_level=2,
        receiver_queue_size=5000,
        pull_mode=True,
        ack_timeout_ms=1000,
        nack_redelivery_delay_ms=0,
        max_redeliver_count=3,
        key_shared_mode=KeySharedMode.STICKY,
        sticky_ranges=(HashRange(0, 16383), HashRange(32768, 65535)),
    )


@pytest.mark.parametrize("kind", ["Exclusive", "Shared", "Failover", "Key_Shared"])
def test_subscription_types(kind: str) -> None:
    assert parse_consumer_params({"subscriptionType": kind}).subscription_type == kind


@pytest.mark.parametrize(
    ("size", "expected"), [("0", 1), ("1", 1), ("1001", 1001), (str(RECEIVER_QUEUE_MAX), RECEIVER_QUEUE_MAX)]
)
def test_receiver_queue_size_not_capped_at_1000(size: str, expected: int) -> None:
    assert parse_consumer_params({"receiverQueueSize": size}).receiver_queue_size == expected
    assert parse_reader_params({"receiverQueueSize": size}).receiver_queue_size == expected


@pytest.mark.parametrize("value", ["CONSUME", "DISCARD", "FAIL"])
def test_crypto_failure_action(value: str) -> None:
    assert parse_consumer_params({"cryptoFailureAction": value}).crypto_failure_action == value


@pytest.mark.parametrize("value", ["consume", "bogus", ""])
def test_invalid_crypto_failure_action_is_ignored(value: str) -> None:
    assert parse_consumer_params({"cryptoFailureAction": value}).crypto_failure_action == "FAIL"
    assert parse_reader_params({"cryptoFailureAction": value}).crypto_failure_action == "FAIL"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"subscriptionType": "Foo"}, "Invalid subscriptionType Foo"),
        ({"subscriptionType": "shared"}, "Invalid subscriptionType shared"),
        ({"subscriptionMode": "durable"}, "Invalid subscriptionMode durable"),
        ({"subscriptionInitialPosition": "latest"}, "Invalid subscriptionInitialPosition latest"),
        ({"receiverQueueSize": "abc"}, "Invalid receiverQueueSize abc: not an integer"),
        ({"receiverQueueSize": "-1"}, "Invalid receiverQueueSize -1"),
        (
            {"receiverQueueSize": str(RECEIVER_QUEUE_MAX + 1)},
            f"Invalid receiverQueueSize {RECEIVER_QUEUE_MAX + 1}",
        ),
        ({"receiverQueueSize": "99999999999999999999"}, "Invalid receiverQueueSize"),
        ({"priorityLevel": "-1"}, "Invalid priorityLevel -1"),
        ({"ackTimeoutMillis": "999"}, "Invalid ackTimeoutMillis 999: must be 0 (off) or at least 1000 ms"),
        ({"ackTimeoutMillis": "1"}, "Invalid ackTimeoutMillis 1"),
        ({"ackTimeoutMillis": "-5"}, "Invalid ackTimeoutMillis -5"),
        ({"negativeAckRedeliveryDelay": "-1"}, "Invalid negativeAckRedeliveryDelay -1"),
        ({"maxRedeliverCount": "x"}, "Invalid maxRedeliverCount x"),
        ({"deadLetterTopic": "a/b/c/d"}, "Invalid deadLetterTopic a/b/c/d"),
        ({"pullMode": "1"}, "Invalid pullMode 1: expected true or false"),
        ({"batchDelivery": "on"}, "Invalid batchDelivery on"),
        ({"consumerName": ""}, "Invalid consumerName"),
        ({"keySharedMode": "STICKY", "stickyRanges": "0-1"}, "keySharedMode and stickyRanges need"),
        (
            {"subscriptionType": "Shared", "keySharedMode": "AUTO_SPLIT"},
            "keySharedMode and stickyRanges need",
        ),
        ({"subscriptionType": "Key_Shared", "keySharedMode": "sticky"}, "Invalid keySharedMode sticky"),
        (
            {"subscriptionType": "Key_Shared", "keySharedMode": "STICKY"},
            "Invalid stickyRanges: keySharedMode=STICKY",
        ),
        (
            {"subscriptionType": "Key_Shared", "keySharedMode": "STICKY", "stickyRanges": ""},
            "Invalid stickyRanges: keySharedMode=STICKY needs non-empty",
        ),
        ({"subscriptionType": "Key_Shared", "stickyRanges": "0-5"}, "Invalid stickyRanges: only valid with"),
    ],
)
def test_consumer_bad_values(query: dict[str, str], expected: str) -> None:
    assert invalid(parse_consumer_params, query).startswith(f"Invalid query params: {expected}")


def test_ack_timeout_zero_and_large_are_fine() -> None:
    assert parse_consumer_params({"ackTimeoutMillis": "0"}).ack_timeout_ms == 0
    assert parse_consumer_params({"ackTimeoutMillis": "30000"}).ack_timeout_ms == 30000


def test_key_shared_auto_split_explicit() -> None:
    params = parse_consumer_params({"subscriptionType": "Key_Shared", "keySharedMode": "AUTO_SPLIT"})
    assert params.key_shared_mode is KeySharedMode.AUTO_SPLIT
    assert params.sticky_ranges == ()


# ------------------------------------------------------------------ sticky ranges


def test_sticky_ranges_parse_sorted_inclusive() -> None:
    assert parse_sticky_ranges("100-200, 0-99,65535-65535") == (
        HashRange(0, 99),
        HashRange(100, 200),
        HashRange(65535, 65535),
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("0-65536", "must have 0 <= start <= end <= 65535"),
        ("10-5", "must have 0 <= start <= end"),
        ("0-10,10-20", "[0, 10] overlaps [10, 20]"),
        ("0-100,50-60", "overlaps"),
        ("a-b", "expected start-end"),
        ("5", "expected start-end"),
        ("-1-5", "expected start-end"),
        ("0-5,", "expected start-end"),
        ("0-5;6-7", "expected start-end"),
    ],
)
def test_sticky_ranges_rejected(text: str, why: str) -> None:
    with pytest.raises(InvalidParams) as info:
        parse_sticky_ranges(text)
    assert info.value.message.startswith("Invalid query params: Invalid stickyRanges")
    assert why in info.value.message


def test_sticky_ranges_count_bounded() -> None:
    text = ",".join(f"{i}-{i}" for i in range(STICKY_RANGES_MAX + 1))
    with pytest.raises(InvalidParams, match="more than"):
        parse_sticky_ranges(text)
    assert (
        len(parse_sticky_ranges(",".join(f"{i}-{i}" for i in range(STICKY_RANGES_MAX)))) == STICKY_RANGES_MAX
    )


@given(st.lists(st.tuples(st.integers(0, 65535), st.integers(0, 65535)), min_size=1, max_size=20))
def test_sticky_ranges_accepts_exactly_disjoint_valid_sets(pairs: list[tuple[int, int]]) -> None:
    text = ",".join(f"{a}-{b}" for a, b in pairs)
    ranges = sorted(HashRange(a, b) for a, b in pairs)
    valid = all(r.is_valid() for r in ranges) and all(not x.overlaps(y) for x, y in pairwise(ranges))
    if valid:
        assert parse_sticky_ranges(text) == tuple(ranges)
    else:
        with pytest.raises(InvalidParams):
            parse_sticky_ranges(text)


# ------------------------------------------------------------------ reader


def test_reader_defaults() -> None:
    assert parse_reader_params({}) == ReaderParams()
    assert ReaderParams().start == "latest"


def test_reader_every_field() -> None:
    params = ReaderParams.from_query(
        {
            "messageId": "CAMQADAA",
            "receiverQueueSize": "10",
            "readerName": "r",
            "startMessageIdInclusive": "true",
            "cryptoFailureAction": "DISCARD",
            "batchDelivery": "true",
            "token": "t",
        }
    )
    assert params == ReaderParams(
        start=MessageId(3, 0),
        receiver_queue_size=10,
        reader_name="r",
        start_inclusive=True,
        crypto_failure_action="DISCARD",
        batch_delivery=True,
        token="t",
    )


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("earliest", "earliest"),
        ("latest", "latest"),
        ("CAMQABgCMAA=", MessageId(3, 0, partition=2)),
        ("CAMQACABMAU=", MessageId(3, 0, batch_index=1, batch_size=5)),
        (EARLIEST_ID.to_base64(), "earliest"),
        (LATEST_ID.to_base64(), "latest"),
    ],
)
def test_reader_start(text: str, start: object) -> None:
    assert parse_reader_params({"messageId": text}).start == start


@pytest.mark.parametrize("text", ["Earliest", "not base64!", "", "AAAA", "3:0:-1"])
def test_reader_bad_start(text: str) -> None:
    assert invalid(parse_reader_params, {"messageId": text}).startswith(
        "Invalid query params: Invalid messageId"
    )


def test_reader_bad_flags() -> None:
    assert "startMessageIdInclusive" in invalid(parse_reader_params, {"startMessageIdInclusive": "nope"})
    assert "readerName" in invalid(parse_reader_params, {"readerName": " "})
