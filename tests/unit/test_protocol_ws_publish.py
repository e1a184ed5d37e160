"""Producer frames (docs/compatibility.md §1.5.1-1.5.2): every request field, typed
errors with the right ``send-error`` code and echoed context, payload limits,
Folio batch frames, and the reply shapes byte for byte."""

from __future__ import annotations

import base64
import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.errors import FrameError, PayloadTooLarge, ProtocolError
from gateway.protocol.ws_frames import (
    PUBLISH_BATCH_MAX,
    PublishRequest,
    parse_publish,
    publish_batch_reply,
    publish_error,
    publish_error_dict,
    publish_error_for,
    publish_ok,
    publish_ok_dict,
)

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
MAX = 1024


def frame(**fields: object) -> bytes:
    return orjson.dumps(fields)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def single(data: str | bytes, max_payload: int = MAX) -> PublishRequest:
    result = parse_publish(data, NOW, max_payload)
    assert isinstance(result, PublishRequest)
    return result


def error(data: str | bytes, max_payload: int = MAX) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        parse_publish(data, NOW, max_payload)
    return info.value


# ------------------------------------------------------------------ request fields


def test_minimal_request_defaults() -> None:
    assert single(frame(payload="aGVsbG8=")) == PublishRequest(payload=b"hello")
    request = single('{"payload":"aGVsbG8="}')
    assert (request.properties, request.context, request.key) == ({}, None, None)
    assert (request.event_time_ms, request.deliver_at_ms, request.sequence_id) == (0, 0, None)


def test_every_field() -> None:
    request = single(
        frame(
            payload=b64(b"\x00\xffdata"),
            properties={"a": "1", "b": ""},
            context="ctx-1",
            key="user-42",
            eventTime="2022-09-07T01:08:23.26Z",
            deliverAt=NOW + 5000,
            sequenceId=17,
            replicationClusters=["c1"],
            disableReplication=True,
            unknownField={"nested": [1, 2]},
        )
    )
    assert request == PublishRequest(
        payload=b"\x00\xffdata",
        properties={"a": "1", "b": ""},
        context="ctx-1",
        key="user-42",
        event_time_ms=1662512903260,
        deliver_at_ms=NOW + 5000,
        sequence_id=17,
    )


def test_event_time_with_offset() -> None:
    assert single(frame(payload="", eventTime="2021-10-29T16:01:38.967-07:00")).event_time_ms == 1635548498967


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"deliverAt": 0}, 0),
        ({"deliverAt": -5}, 0),
        ({"deliverAt": NOW + 1}, NOW + 1),
        ({"deliverAfterMs": 0}, 0),
        ({"deliverAfterMs": -1}, 0),
        ({"deliverAfterMs": 3000}, NOW + 3000),
        ({"deliverAt": NOW + 99_999, "deliverAfterMs": 3000}, NOW + 3000),  # deliverAfter wins, as upstream
        ({"deliverAt": NOW + 99_999, "deliverAfterMs": 0}, NOW + 99_999),
    ],
)
def test_delayed_delivery(fields: dict[str, int], expected: int) -> None:
    assert single(frame(payload="", **fields)).deliver_at_ms == expected


def test_null_fields_are_absent() -> None:
    request = single(
        '{"payload":"","properties":null,"context":null,"key":null,"eventTime":null,'
        '"deliverAt":null,"deliverAfterMs":null,"sequenceId":null}'
    )
    assert request == PublishRequest(payload=b"")


@pytest.mark.parametrize("text", ["QQ", "QQ==", "QUI", "QUI="])
def test_base64_padding_optional(text: str) -> None:
    assert single(frame(payload=text)).payload in (b"A", b"AB")


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("data", ["{", "", "[1,", "not json", '{"payload":"QQ=="', b"\xff\xfe", "[NaN]"])
def test_bad_json_is_code_3_without_context(data: str | bytes) -> None:
    exc = error(data)
    assert isinstance(exc, FrameError)
    assert (exc.ws_code, exc.context) == (3, None)


@pytest.mark.parametrize("data", ["[]", "1", '"payload"', "null"])
def test_non_object_is_code_3(data: str) -> None:
    exc = error(data)
    assert exc.ws_code == 3
    assert "expected a JSON object" in exc.message


def test_missing_payload_is_code_7_with_context() -> None:
    exc = error(frame(context="c9"))
    assert (exc.ws_code, exc.context) == (7, "c9")
    assert exc.message.startswith("Missing payload")


@pytest.mark.parametrize("payload", ["not base64!", "QQ=x", "Q", "QQ===", "Q Q==", "QQ\n==", "-_-_", "é"])
def test_invalid_base64_is_code_7(payload: str) -> None:
    exc = error(frame(payload=payload, context="c"))
    assert isinstance(exc, FrameError)
    assert (exc.ws_code, exc.context) == (7, "c")
    assert exc.message.startswith("Invalid Base64 message-payload error=")


@pytest.mark.parametrize(
    "event_time",
    ["2022-09-07T01:08:23.26", "yesterday", "1969-12-31T23:59:59Z", 1662512903260, 1.5],
)
def test_bad_event_time_is_code_7(event_time: object) -> None:
    exc = error(frame(payload="", eventTime=event_time, context="c"))
    assert (exc.ws_code, exc.context) == (7, "c")
    assert exc.message.startswith("eventTime")


@pytest.mark.parametrize(
    ("fragment", "name"),
    [
        ('"key":5', "key must be a string"),
        ('"key":["k"]', "key must be a string"),
        ('"payload":5', "payload must be a base64 string"),
        ('"properties":["a"]', "properties must be an object"),
        ('"properties":{"a":1}', "properties['a'] must be a string"),
        ('"properties":{"a":null}', "properties['a'] must be a string"),
        ('"eventTime":{"x":1}', "eventTime must be an ISO-8601 string"),
        ('"deliverAt":"12x"', "deliverAt must be an integer, got the string '12x'"),
        ('"deliverAt":"1.5"', "deliverAt must be an integer, got the string"),
        ('"deliverAfterMs":" 5"', "deliverAfterMs must be an integer, got the string"),
        ('"deliverAfterMs":""', "deliverAfterMs must be an integer, got the string"),
        ('"deliverAfterMs":"4611686018427387904"', "deliverAfterMs 4611686018427387904 is too large"),
        ('"deliverAt":1.5', "deliverAt must be an integer"),
        ('"deliverAt":true', "deliverAt must be an integer, got a boolean"),
        ('"deliverAfterMs":9223372036854775808', "deliverAfterMs 9223372036854775808 is outside"),
        ('"deliverAfterMs":4611686018427387904', "deliverAfterMs 4611686018427387904 is too large"),
        ('"sequenceId":-1', "sequenceId -1 is outside"),
        ('"sequenceId":"one"', "sequenceId must be an integer, got the string 'one'"),
        ('"sequenceId":"-1"', "sequenceId -1 is outside"),
        ('"sequenceId":"9223372036854775808"', "sequenceId 9223372036854775808 is outside"),
        ('"sequenceId":"12345678901234567890"', "sequenceId must be an integer, got the string"),
        ('"sequenceId":18446744073709551616', "sequenceId must be an integer"),  # orjson: float beyond u64
    ],
)
def test_wrong_types_are_code_3_with_context(fragment: str, name: str) -> None:
    exc = error('{"payload":"","context":"c",' + fragment + "}")
    assert (exc.ws_code, exc.context) == (3, "c")
    assert exc.message.startswith(name)


def test_long_fields_accept_decimal_strings_as_jackson_does() -> None:
    """Pulsar reads ``deliverAt``/``deliverAfterMs``/``sequenceId`` into Java longs with
    Jackson, which takes ``"1000"`` as 1000: clients that send strings must work."""
    request = single(frame(payload="", deliverAfterMs="1000", sequenceId="5", schemaVersion="-1"))
    assert (request.deliver_at_ms, request.sequence_id, request.schema_version) == (NOW + 1000, 5, None)
    assert single(frame(payload="", deliverAt=str(NOW + 7))).deliver_at_ms == NOW + 7
    top = single(frame(payload="", deliverAt="+0", sequenceId="9223372036854775807"))
    assert (top.deliver_at_ms, top.sequence_id) == (0, 2**63 - 1)
    assert single(frame(payload="", schemaVersion="3")).schema_version == 3
    batch = parse_publish(frame(type="batch", messages=[{"payload": "", "sequenceId": "8"}]), NOW, MAX)
    assert not isinstance(batch, PublishRequest) and batch[0].sequence_id == 8


@pytest.mark.parametrize("fragment", ['"key":"\\ud800"', '"properties":{"\\ud800":"v"}'])
def test_lone_surrogates_are_bad_json(fragment: str) -> None:
    exc = error('{"payload":"","context":"c",' + fragment + "}")
    assert (exc.ws_code, exc.context) == (3, None)


@pytest.mark.parametrize("context", ['["c"]', '{"a":1}', '"\\ud800"'])
def test_bad_context_is_code_3_without_context(context: str) -> None:
    exc = error('{"payload":"","context":' + context + "}")
    assert (exc.ws_code, exc.context) == (3, None)


@pytest.mark.parametrize(
    ("context", "echoed"),
    [("5", "5"), ("-7", "-7"), ("2.5", "2.5"), ("true", "true"), ("false", "false"), ("null", None)],
)
def test_scalar_context_is_echoed_as_text(context: str, echoed: str | None) -> None:
    """Pulsar's documented Python producer sends ``"context": 5``; Pulsar echoes ``"5"``."""
    assert single('{"payload":"","context":' + context + "}").context == echoed


def test_payload_size_limit() -> None:
    at_limit = b64(b"x" * MAX)
    assert len(single(frame(payload=at_limit)).payload) == MAX
    exc = error(frame(payload=b64(b"x" * (MAX + 1)), context="big"))
    assert isinstance(exc, PayloadTooLarge)
    assert (exc.code, exc.ws_code, exc.context, exc.size, exc.limit) == (
        "payload_too_large",
        8,
        "big",
        MAX + 1,
        MAX,
    )
    # the size is known before decoding: garbage of a large size is too large, not invalid
    assert isinstance(error(frame(payload="!" * 4 * MAX)), PayloadTooLarge)


@given(st.integers(0, 64), st.booleans())
def test_payload_limit_is_exact(size: int, padded: bool) -> None:
    text = b64(b"\x07" * size)
    if not padded:
        text = text.rstrip("=")
    if size <= 32:
        assert single(frame(payload=text), 32).payload == b"\x07" * size
    else:
        with pytest.raises(PayloadTooLarge):
            parse_publish(frame(payload=text), NOW, 32)


@given(
    st.binary(max_size=200),
    st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=5),
    st.none() | st.text(max_size=20),
    st.none() | st.text(max_size=20),
    st.none() | st.integers(0, 2**63 - 1),
)
def test_round_trip(
    payload: bytes, properties: dict[str, str], key: str | None, context: str | None, sequence_id: int | None
) -> None:
    fields: dict[str, object] = {"payload": b64(payload), "properties": properties, "sequenceId": sequence_id}
    if key is not None:
        fields["key"] = key
    if context is not None:
        fields["context"] = context
    assert single(orjson.dumps(fields)) == PublishRequest(
        payload, properties, context, key, 0, 0, sequence_id
    )


# ------------------------------------------------------------------ batch frames


def test_batch_frame() -> None:
    result = parse_publish(
        frame(
            type="batch",
            context="b",
            messages=[{"payload": "QQ==", "key": "k"}, {"payload": "", "context": "x"}],
        ),
        NOW,
        MAX,
    )
    assert result == [PublishRequest(b"A", key="k"), PublishRequest(b"", context="x")]


@pytest.mark.parametrize(
    "messages", [[], None, "x", {"payload": ""}, [{"payload": ""}] * (PUBLISH_BATCH_MAX + 1)]
)
def test_batch_frame_shape_errors(messages: object) -> None:
    exc = error(frame(type="batch", context="b", messages=messages))
    assert (exc.ws_code, exc.context) == (3, "b")
    assert exc.message.startswith("messages must be an array of 1..1000")


def test_batch_at_limit_is_fine() -> None:
    result = parse_publish(frame(type="batch", messages=[{"payload": ""}] * PUBLISH_BATCH_MAX), NOW, MAX)
    assert isinstance(result, list)
    assert len(result) == PUBLISH_BATCH_MAX


def test_batch_rejected_as_a_whole_with_index() -> None:
    exc = error(frame(type="batch", context="b", messages=[{"payload": ""}, {"payload": "", "key": 1}]))
    assert (exc.ws_code, exc.context) == (3, "b")
    assert exc.message == "messages[1]: key must be a string, got a number"
    exc = error(frame(type="batch", messages=[{"payload": "%%", "context": "inner"}]))
    assert (exc.ws_code, exc.context) == (7, None)
    exc = error(frame(type="batch", messages=[{"payload": ""}, 3]))
    assert exc.message == "messages[1]: must be an object"
    exc = error(frame(type="batch", context="b", messages=[{"payload": b64(b"x" * (MAX + 1))}]))
    assert isinstance(exc, PayloadTooLarge)
    assert exc.message.startswith("messages[0]: Message payload of 1025 bytes")
    assert exc.context == "b"


def test_other_type_values_are_single_frames() -> None:
    assert single(frame(type="whatever", payload="")) == PublishRequest(b"")


# ------------------------------------------------------------------ replies


def test_reply_shapes_byte_for_byte() -> None:
    assert publish_ok("CAMQADAA", "1") == (
        b'{"result":"ok","messageId":"CAMQADAA","context":"1","errorCode":0,"schemaVersion":0}'
    )
    assert publish_ok("CAMQADAA") == b'{"result":"ok","messageId":"CAMQADAA","errorCode":0,"schemaVersion":0}'
    assert publish_ok("CP///////////wEQ////////////ATAA", "7", duplicate=True) == (
        b'{"result":"ok","messageId":"CP///////////wEQ////////////ATAA","context":"7",'
        b'"errorCode":0,"schemaVersion":0,"duplicate":true}'
    )
    assert publish_error(3, "Unexpected character ...", None) == (
        b'{"result":"send-error:3","errorMsg":"Unexpected character ...","errorCode":2,"schemaVersion":0}'
    )
    assert publish_error(8, "Timeout", "c", retriable=True) == (
        b'{"result":"send-error:8","errorMsg":"Timeout","context":"c","errorCode":1,"schemaVersion":0}'
    )


def test_error_reply_for_exception_echoes_context() -> None:
    exc = error(frame(payload="%%", context="ctx"))
    assert orjson.loads(publish_error_for(exc)) == {
        "result": "send-error:7",
        "errorMsg": exc.message,
        "context": "ctx",
        "errorCode": 2,
        "schemaVersion": 0,
    }
    assert orjson.loads(publish_error_for(error("{")))["result"] == "send-error:3"


def test_batch_reply() -> None:
    reply = publish_batch_reply([publish_ok_dict("CAMQADAA"), publish_error_dict(8, "quota")], "b")
    assert reply == (
        b'{"type":"batch","context":"b","results":['
        b'{"result":"ok","messageId":"CAMQADAA","errorCode":0,"schemaVersion":0},'
        b'{"result":"send-error:8","errorMsg":"quota","errorCode":2,"schemaVersion":0}]}'
    )
    assert publish_batch_reply([]) == b'{"type":"batch","results":[]}'


def test_error_codes_are_checked() -> None:
    with pytest.raises(AssertionError):
        publish_error(9, "x")


@pytest.mark.parametrize(
    ("payload", "context"),
    [
        (b64(b"hello"), "c1"),
        (b64(b""), ""),
        (b64(b"x" * 10), "caf\u00e9 \u2603"),
        ("aGk", "unpadded"),  # padding optional: the slower decode, same answer
    ],
)
def test_a_payload_with_a_text_context_reads_as_with_any_other_field(payload: str, context: str) -> None:
    """The usual one-message frame (payload and context only) takes a shorter way: same request."""
    short = single(frame(payload=payload, context=context))
    full = single(frame(payload=payload, context=context, key=None))  # a third field: the general way
    assert short == full and short.context == context and short.properties == {}


@pytest.mark.parametrize(
    ("data", "code", "context"),
    [
        ('{"payload":"!!!!","context":"c"}', 7, "c"),  # bad base64: the context is echoed
        ('{"payload":"' + "A" * 4000 + '","context":"c"}', 8, "c"),  # past the payload limit
        ('{"payload":"","context":"\\ud800"}', 3, None),  # a lone surrogate is no text
        ('{"payload":"","context":["c"]}', 3, None),
    ],
)
def test_a_payload_and_context_frame_fails_as_before(data: str, code: int, context: str | None) -> None:
    exc = error(data)
    assert (exc.ws_code, exc.context) == (code, context)


def test_a_number_context_comes_back_as_its_json_text_on_the_short_way_too() -> None:
    assert single(frame(payload="", context=5)).context == "5"


def _parsed(data: bytes) -> PublishRequest | tuple[int, str]:
    try:
        parsed = parse_publish(data, NOW, MAX)
    except ProtocolError as exc:
        return exc.ws_code, exc.message
    assert isinstance(parsed, PublishRequest)
    return parsed


@given(
    st.one_of(
        st.integers(-(2**64), 2**64),
        st.sampled_from([0, 2**63 - 1, 2**63, -1, 3.0, 3.5, True, "7", "x", None, [1], {}]),
    ),
    st.binary(max_size=8),
)
def test_payload_and_sequence_id_read_as_every_other_field_set(sequence_id: object, payload: bytes) -> None:
    """``{payload, sequenceId}`` (a deduplicating writer's item) has its own short path:
    it must answer what the general reading answers, which a null context leads to."""
    fields = {"payload": b64(payload), "sequenceId": sequence_id}
    fast = _parsed(json.dumps(fields).encode())  # json: orjson writes no int beyond 64 bits
    general = _parsed(json.dumps({**fields, "context": None}).encode())
    assert fast == general
