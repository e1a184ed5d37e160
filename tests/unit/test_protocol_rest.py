"""REST producer body and reply (docs/compatibility.md §2.1, §2.3), raw-body publish
headers and the HTTP consume shapes: defaults, every field, exact reply bytes,
quirks fixed as documented, and clear 400 errors."""

from __future__ import annotations

import base64

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.errors import BadRequest, PayloadTooLarge
from gateway.protocol.rest import (
    DEFAULT_PRODUCER_NAME,
    REST_BATCH_MAX,
    ProducerMessages,
    ack_error,
    ack_ok,
    fetch_response,
    parse_ack_body,
    parse_producer_messages,
    parse_raw_headers,
    producer_acks,
)
from gateway.protocol.ws_commands import ACK_BATCH_MAX
from gateway.protocol.ws_frames import PublishRequest, encode_frame, message_frame
from storage.formats.message_id import MessageId, duplicate_id

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
MAX = 64


def parse(body: object, max_payload: int = MAX) -> ProducerMessages:
    return parse_producer_messages(orjson.dumps(body), NOW, max_payload)


def bad(body: object | str) -> str:
    data = body if isinstance(body, str) else orjson.dumps(body)
    with pytest.raises(BadRequest) as info:
        parse_producer_messages(data, NOW, MAX)
    assert info.value.code == "bad_request"
    return info.value.message


# ------------------------------------------------------------------ ProducerMessages


def test_defaults() -> None:
    parsed = parse({"messages": [{"payload": "hello"}]})
    assert parsed == ProducerMessages(DEFAULT_PRODUCER_NAME, [PublishRequest(b"hello")], [True])
    assert parsed.producer_name == "RestProducer"
    assert parsed.messages[0].sequence_id is None  # upstream stamped 0: a dedup hazard


def test_every_field() -> None:
    parsed = parse(
        {
            "producerName": "rest-1",
            "schemaVersion": -1,
            "messages": [
                {
                    "payload": "héllo",
                    "key": "k",
                    "properties": {"a": "b"},
                    "replicationClusters": ["c"],
                    "disableReplication": False,
                    "eventTime": 1662512903260,
                    "sequenceId": 5,
                    "deliverAt": NOW + 10,
                },
                {"payload": base64.b64encode(b"\x00\x01").decode(), "payloadEncoding": "base64"},
                {"payload": "", "eventTime": "1662512903260", "deliverAfterMs": 250},
                {"payload": "t", "payloadEncoding": "text", "eventTime": "2022-09-07T03:08:23.26+02:00"},
            ],
        }
    )
    assert parsed == ProducerMessages(
        "rest-1",
        [
            PublishRequest(
                "héllo".encode(),
                {"a": "b"},
                None,
                "k",
                event_time_ms=1662512903260,
                deliver_at_ms=NOW + 10,
                sequence_id=5,
            ),
            PublishRequest(b"\x00\x01"),
            PublishRequest(b"", event_time_ms=1662512903260, deliver_at_ms=NOW + 250),
            PublishRequest(b"t", event_time_ms=1662512903260),
        ],
        [True, False, True, True],
    )


def test_schema_fields_are_kept_for_the_registry() -> None:
    parsed = parse({"schemaVersion": 3, "keySchema": "k", "valueSchema": "v", "messages": [{"payload": "x"}]})
    assert (parsed.schema_version, parsed.key_schema, parsed.value_schema) == (3, "k", "v")


def test_delays_do_not_depend_on_event_time() -> None:
    """Upstream applied deliverAt only with eventTime and added deliverAfterMs to eventTime."""
    parsed = parse(
        {
            "messages": [
                {"payload": "", "deliverAt": NOW + 7},
                {"payload": "", "deliverAfterMs": 7, "eventTime": 1000},
                {"payload": "", "deliverAt": NOW + 99, "deliverAfterMs": 7},
                {"payload": "", "deliverAt": 0, "deliverAfterMs": -3},
            ]
        }
    )
    assert [m.deliver_at_ms for m in parsed.messages] == [NOW + 7, NOW + 7, NOW + 7, 0]


def test_whole_number_floats_are_integers() -> None:
    """JSON Schema (and Jackson) read 3178.0 as the integer 3178: so does the REST producer."""
    parsed = parse(
        {
            "messages": [
                {"payload": "", "eventTime": 3178.0, "sequenceId": 5.0},
                {"payload": "", "deliverAt": float(NOW + 7)},
                {"payload": "", "deliverAfterMs": 250.0, "eventTime": 1662512903260.0},
            ]
        }
    )
    first, second, third = parsed.messages
    assert (first.event_time_ms, first.sequence_id) == (3178, 5)
    assert type(first.event_time_ms) is int and type(first.sequence_id) is int
    assert second.deliver_at_ms == NOW + 7
    assert (third.deliver_at_ms, third.event_time_ms) == (NOW + 250, 1662512903260)


def test_long_fields_accept_decimal_strings_as_jackson_does() -> None:
    parsed = parse(
        {
            "schemaVersion": "-1",
            "messages": [
                {"payload": "", "sequenceId": "5", "deliverAfterMs": "250"},
                {"payload": "", "deliverAt": str(NOW + 7)},
            ],
        }
    )
    first, second = parsed.messages
    assert (first.sequence_id, first.deliver_at_ms, second.deliver_at_ms) == (5, NOW + 250, NOW + 7)
    assert parsed.schema_version is None
    assert bad({"messages": [{"payload": "", "sequenceId": "5x"}]}) == (
        "messages[0]: sequenceId must be an integer, got the string '5x'"
    )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("eventTime", 3178.5, "messages[0]: eventTime must be epoch milliseconds"),
        ("eventTime", 2.0**53 + 2, "messages[0]: eventTime must be epoch milliseconds"),
        ("eventTime", -1.0, "messages[0]: eventTime -1 is outside"),
        ("sequenceId", 0.5, "messages[0]: sequenceId must be an integer, got a number"),
        ("sequenceId", -1.0, "messages[0]: sequenceId -1 is outside"),
        ("deliverAt", 1e300, "messages[0]: deliverAt must be an integer, got a number"),
        ("deliverAfterMs", True, "messages[0]: deliverAfterMs must be an integer, got a boolean"),
    ],
)
def test_fractions_and_inexact_floats_are_not_integers(field: str, value: object, message: str) -> None:
    assert bad({"messages": [{"payload": "", field: value}]}).startswith(message)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{", "Invalid JSON body: "),
        ("[]", "Invalid JSON body: expected a JSON object"),
        ({}, "messages must be a non-empty array"),
        ({"messages": []}, "messages must be a non-empty array"),
        ({"messages": {"payload": ""}}, "messages must be a non-empty array"),
        ({"producerName": 5, "messages": [{"payload": ""}]}, "producerName must be a string"),
        ({"producerName": " ", "messages": [{"payload": ""}]}, "producerName must be 1..256"),
        ({"valueSchema": {}, "messages": [{"payload": ""}]}, "valueSchema must be a string"),
        ({"keySchema": 5, "messages": [{"payload": ""}]}, "keySchema must be a string"),
        ({"schemaVersion": "v1", "messages": [{"payload": ""}]}, "schemaVersion must be"),
        ({"messages": [{"payload": ""}, 5]}, "messages[1]: must be an object"),
        ({"messages": [{}]}, 'messages[0]: payload is required (use "" for an empty message)'),
        ({"messages": [{"payload": 5}]}, "messages[0]: payload must be a string"),
        (
            {"messages": [{"payload": "", "payloadEncoding": "hex"}]},
            'messages[0]: payloadEncoding must be "text"',
        ),
        (
            {"messages": [{"payload": "%%", "payloadEncoding": "base64"}]},
            "messages[0]: Invalid Base64 message-payload error=",
        ),
        ({"messages": [{"payload": "", "key": 1}]}, "messages[0]: key must be a string, got a number"),
        (
            {"messages": [{"payload": "", "properties": {"a": 1}}]},
            "messages[0]: properties['a'] must be a string",
        ),
        ({"messages": [{"payload": "", "eventTime": -1}]}, "messages[0]: eventTime -1 is outside"),
        (
            {"messages": [{"payload": "", "eventTime": "soon"}]},
            "messages[0]: eventTime must be epoch milliseconds",
        ),
        (
            {"messages": [{"payload": "", "eventTime": 1.5}]},
            "messages[0]: eventTime must be epoch milliseconds",
        ),
        (
            {"messages": [{"payload": "", "eventTime": 10**16}]},
            "messages[0]: eventTime 10000000000000000 is outside",
        ),
        ({"messages": [{"payload": "", "sequenceId": -1}]}, "messages[0]: sequenceId -1 is outside"),
        ({"messages": [{"payload": "", "deliverAt": "1 s"}]}, "messages[0]: deliverAt must be an integer"),
        ({"messages": [{"payload": "", "deliverAfterMs": 2**62}]}, "messages[0]: deliverAfterMs"),
    ],
)
def test_bad_bodies(body: object, message: str) -> None:
    assert bad(body).startswith(message)


def test_batch_size_limit() -> None:
    assert len(parse({"messages": [{"payload": ""}] * REST_BATCH_MAX}).messages) == REST_BATCH_MAX
    assert "more than 10000 per request" in bad({"messages": [{"payload": ""}] * (REST_BATCH_MAX + 1)})


@pytest.mark.parametrize("encoding", ["text", "base64"])
def test_payload_size_limit(encoding: str) -> None:
    def body(size: int) -> dict[str, object]:
        data = b"x" * size
        text = base64.b64encode(data).decode() if encoding == "base64" else data.decode()
        return {
            "messages": [
                {"payload": "", "payloadEncoding": encoding},
                {"payload": text, "payloadEncoding": encoding},
            ]
        }

    assert parse(body(MAX)).messages[1].payload == b"x" * MAX
    with pytest.raises(PayloadTooLarge) as info:
        parse(body(MAX + 1))
    assert info.value.message.startswith("messages[1]: Message payload of 65 bytes exceeds the limit of 64")


def test_text_payload_limit_counts_utf8_bytes() -> None:
    assert parse({"messages": [{"payload": "é" * 32}]}).messages[0].payload == "é".encode() * 32
    with pytest.raises(PayloadTooLarge):
        parse({"messages": [{"payload": "é" * 33}]})


# ------------------------------------------------------------------ ProducerAcks


def test_producer_acks_byte_for_byte() -> None:
    results = [ack_ok(MessageId(12, 3)), ack_error(7, "Topic not owned by current broker.", retriable=False)]
    assert producer_acks(results) == (
        b'{"messagePublishResults":['
        b'{"messageId":"12:3:-1","errorCode":0,"schemaVersion":0},'
        b'{"messageId":"7","errorCode":2,"errorMsg":"Topic not owned by current broker.","schemaVersion":0}],'
        b'"schemaVersion":0}'
    )


def test_ack_variants() -> None:
    assert ack_ok(MessageId(12, 3, 1, 4, 9)) == {"messageId": "12:3:1:4", "errorCode": 0, "schemaVersion": 0}
    assert ack_ok(duplicate_id(), duplicate=True) == {
        "messageId": "-1:-1:-1",
        "errorCode": 0,
        "schemaVersion": 0,
        "duplicate": True,
    }
    assert ack_error(-1, "timeout", retriable=True)["errorCode"] == 1
    assert producer_acks([]) == b'{"messagePublishResults":[],"schemaVersion":0}'


# ------------------------------------------------------------------ raw-body publish


def test_raw_headers_every_field() -> None:
    headers = {
        "X-Pulsar-partition-key": "k1",
        "X-Pulsar-PROPERTY-Color": "red",
        "x-pulsar-property-size": "L",
        "X-Pulsar-event-time": "1662512903260",
        "X-Pulsar-sequence-id": "12",
        "X-Pulsar-producer-name": "curl",
        "X-Pulsar-deliver-at-time": str(NOW + 5),
        "X-Pulsar-context": "c1",
        "Content-Type": "application/octet-stream",
    }
    request, name = parse_raw_headers(headers, b"\x00body", NOW, MAX)
    assert name == "curl"
    assert request == PublishRequest(
        payload=b"\x00body",
        properties={"color": "red", "size": "L"},
        context="c1",
        key="k1",
        event_time_ms=1662512903260,
        deliver_at_ms=NOW + 5,
        sequence_id=12,
    )


def test_raw_headers_defaults_and_iso_times() -> None:
    assert parse_raw_headers({}, b"", NOW, MAX) == (PublishRequest(b""), None)
    request, _ = parse_raw_headers(
        {"x-pulsar-event-time": "2022-09-07T01:08:23.26Z", "x-pulsar-deliver-after-ms": "100"}, b"x", NOW, MAX
    )
    assert (request.event_time_ms, request.deliver_at_ms) == (1662512903260, NOW + 100)
    request, _ = parse_raw_headers({"x-pulsar-deliver-at-time": "2022-09-07T01:08:23.26Z"}, b"x", NOW, MAX)
    assert request.deliver_at_ms == 1662512903260


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"x-pulsar-sequence-id": "abc"}, "X-Pulsar-sequence-id must be an integer"),
        ({"x-pulsar-sequence-id": "-1"}, "X-Pulsar-sequence-id must be an integer in [0,"),
        ({"x-pulsar-event-time": "soon"}, "X-Pulsar-event-time: eventTime must be epoch milliseconds"),
        ({"x-pulsar-deliver-at-time": "soon"}, "X-Pulsar-deliver-at-time must be epoch ms or ISO-8601"),
        ({"x-pulsar-deliver-after-ms": "1.5"}, "X-Pulsar-deliver-after-ms must be an integer"),
        ({"x-pulsar-deliver-after-ms": str(2**62)}, "X-Pulsar-deliver-after-ms: deliverAfterMs"),
        ({"x-pulsar-producer-name": " "}, "X-Pulsar-producer-name must be 1..256"),
        ({"x-pulsar-property-": "v"}, "X-Pulsar-PROPERTY- header needs a property name"),
    ],
)
def test_raw_headers_errors(headers: dict[str, str], message: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_raw_headers(headers, b"", NOW, MAX)
    assert info.value.message.startswith(message)


def test_raw_body_size_limit() -> None:
    assert parse_raw_headers({}, b"x" * MAX, NOW, MAX)[0].payload == b"x" * MAX
    with pytest.raises(PayloadTooLarge):
        parse_raw_headers({}, b"x" * (MAX + 1), NOW, MAX)


# ------------------------------------------------------------------ HTTP consume


def test_fetch_response_shape() -> None:
    frame = message_frame("CAMQADAA", b"hi", {}, 0, 1)
    assert fetch_response([frame]) == b'{"messages":[' + encode_frame(frame) + b"]}"
    assert fetch_response([]) == b'{"messages":[]}'


def test_parse_ack_body() -> None:
    assert parse_ack_body('{"messageIds":["CAMQADAA","3:0:2","CAMQACABMAU="]}') == [
        MessageId(3, 0),
        MessageId(3, 0, 2),
        MessageId(3, 0, batch_index=1, batch_size=5),
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{", "Invalid JSON body"),
        ("{}", "messageIds must be a non-empty array"),
        ('{"messageIds":[]}', "messageIds must be a non-empty array"),
        ('{"messageIds":["zz!"]}', "Invalid messageIds[0] 'zz!'"),
        ('{"messageIds":[1]}', "messageIds[0] must be a string"),
    ],
)
def test_parse_ack_body_errors(body: str, message: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_ack_body(body)
    assert info.value.message.startswith(message)


def test_ack_body_limit() -> None:
    ids = [f"1:{i}" for i in range(ACK_BATCH_MAX + 1)]
    with pytest.raises(BadRequest, match="more than 10000"):
        parse_ack_body(orjson.dumps({"messageIds": ids}))
    assert len(parse_ack_body(orjson.dumps({"messageIds": ids[:-1]}))) == ACK_BATCH_MAX


@given(st.text(max_size=40), st.none() | st.text(max_size=10))
def test_text_payload_round_trip(text: str, key: str | None) -> None:
    message: dict[str, object] = {"payload": text}
    if key is not None:
        message["key"] = key
    parsed = parse({"messages": [message]}, max_payload=1000)
    assert parsed.messages == [PublishRequest(text.encode(), key=key)]
