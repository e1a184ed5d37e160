"""Consumer/reader frames (docs/compatibility.md §1.6.1, §1.6.3, §1.8): delivered
message shape byte for byte, every command both ways, unknown type -> ack,
id forms and garbage, limits, and the Folio notices."""

from __future__ import annotations

import orjson
import pybase64
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.broker.dispatch.base import HashRange
from gateway.protocol.errors import FrameError
from gateway.protocol.timefmt import EPOCH_MS_MAX, EPOCH_MS_MIN
from gateway.protocol.ws_commands import (
    ACK_BATCH_MAX,
    Ack,
    AckCumulative,
    IsEndOfTopic,
    Nack,
    Permit,
    Seek,
    Unsubscribe,
    parse_command,
    plain_ack_id,
)
from gateway.protocol.ws_frames import (
    active_notice,
    encode_frame,
    end_of_topic_reply,
    message_frame,
    messages_frame,
    ranges_notice,
)
from storage.formats.message_id import EARLIEST_ID, LATEST_ID, MessageId

pytestmark = pytest.mark.unit

ID_3_0 = MessageId(3, 0)
ID_P2 = MessageId(3, 0, partition=2)
ID_B1 = MessageId(3, 0, batch_index=1, batch_size=5)


# ------------------------------------------------------------------ deliveries


def test_message_frame_byte_for_byte() -> None:
    frame = message_frame("CAMQADAA", b"hello", {"a": "1"}, 1662512903260, 0)
    assert encode_frame(frame) == (
        b'{"messageId":"CAMQADAA","payload":"aGVsbG8=","properties":{"a":"1"},'
        b'"publishTime":"2022-09-07T01:08:23.26Z","redeliveryCount":0}'
    )
    full = message_frame("CAMQACABMAU=", b"", {}, 1662512903000, 2, event_time_ms=1635548498967, key="k")
    assert encode_frame(full) == (
        b'{"messageId":"CAMQACABMAU=","payload":"","properties":{},'
        b'"publishTime":"2022-09-07T01:08:23Z","redeliveryCount":2,'
        b'"eventTime":"2021-10-29T23:01:38.967Z","key":"k"}'
    )


def test_message_frame_omits_zero_event_time_and_absent_key() -> None:
    frame = message_frame("CAMQADAA", b"x", {}, 0, 0, event_time_ms=0, key=None)
    assert "eventTime" not in frame
    assert "key" not in frame
    assert message_frame("CAMQADAA", b"x", {}, 0, 0, key="")["key"] == ""


def test_batched_delivery_frame() -> None:
    one = message_frame("CAMQADAA", b"a", {}, 0, 0)
    assert messages_frame([encode_frame(one), encode_frame(one)]) == (
        b'{"type":"messages","messages":[' + encode_frame(one) + b"," + encode_frame(one) + b"]}"
    )


@given(
    st.binary(max_size=300),
    st.integers(min_value=EPOCH_MS_MIN, max_value=EPOCH_MS_MAX),
    st.integers(min_value=0, max_value=2**31),
)
def test_a_plain_message_frame_built_from_pieces_is_the_encoded_dict(
    payload: bytes, publish_time_ms: int, redelivery_count: int
) -> None:
    frame = message_frame("CAMQADAA", payload, {}, publish_time_ms, redelivery_count)
    from gateway.api.wire_mapping import PLAIN_HEAD, PLAIN_PAYLOAD, plain_message_tail

    pieces = (
        PLAIN_HEAD
        + b"CAMQADAA"
        + PLAIN_PAYLOAD
        + pybase64.b64encode(payload)
        + plain_message_tail(publish_time_ms, redelivery_count)
    )
    assert pieces == encode_frame(frame)
    assert orjson.loads(pieces) == frame


def test_server_notices() -> None:
    assert end_of_topic_reply(True) == b'{"endOfTopic":true}'
    assert end_of_topic_reply(False) == b'{"endOfTopic":false}'
    assert active_notice(True) == b'{"type":"active","active":true}'
    assert active_notice(False) == b'{"type":"active","active":false}'
    assert ranges_notice([HashRange(0, 16383), HashRange(32768, 65535)]) == (
        b'{"type":"ranges","ranges":[[0,16383],[32768,65535]]}'
    )
    assert ranges_notice([]) == b'{"type":"ranges","ranges":[]}'


# ------------------------------------------------------------------ commands


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ('{"messageId":"CAMQADAA"}', Ack([ID_3_0])),
        ('{"messageId":"CAMQABgCMAA="}', Ack([ID_P2])),
        ('{"messageId":"CAMQACABMAU="}', Ack([ID_B1])),
        ('{"messageId":"CAAQAw=="}', Ack([MessageId(0, 3)])),  # old clients: no batch_size
        ('{"messageId":"CAMQADAA","ackType":"individual"}', Ack([ID_3_0])),
        ('{"messageId":"3:0:-1"}', Ack([ID_3_0])),
        ('{"messageId":"3:0:2"}', Ack([ID_P2])),
        ('{"messageId":"3:0:-1:1"}', Ack([ID_B1])),
        ('{"messageId":"3:0"}', Ack([ID_3_0])),
        ('{"type":"ack","messageIds":["CAMQADAA","3:0:2"]}', Ack([ID_3_0, ID_P2])),
        ('{"type":"ack","messageId":"CAMQADAA"}', Ack([ID_3_0])),
        ('{"messageIds":["CAMQADAA"]}', Ack([ID_3_0])),
        ('{"type":"ackCumulative","messageId":"CAMQADAA"}', AckCumulative(ID_3_0)),
        ('{"messageId":"CAMQADAA","ackType":"cumulative"}', AckCumulative(ID_3_0)),
        ('{"type":"ack","messageId":"3:0","ackType":"cumulative"}', AckCumulative(ID_3_0)),
        ('{"type":"negativeAcknowledge","messageId":"CAMQADAA"}', Nack([ID_3_0])),
        ('{"type":"negativeAcknowledge","messageIds":["CAMQADAA","3:0:2"]}', Nack([ID_3_0, ID_P2])),
        ('{"type":"permit","permitMessages":100}', Permit(100)),
        ('{"type":"permit","permitMessages":0}', Permit(0)),
        ('{"type":"permit","permitMessages":2147483647}', Permit(2**31 - 1)),
        ('{"type":"unsubscribe"}', Unsubscribe()),
        ('{"type":"isEndOfTopic"}', IsEndOfTopic()),
        ('{"type":"seek","messageId":"CAMQADAA"}', Seek(ID_3_0, None)),
        ('{"type":"seek","messageId":"3:0:2","inclusive":false}', Seek(ID_P2, None, inclusive=False)),
        ('{"type":"seek","messageId":"earliest"}', Seek(EARLIEST_ID, None)),
        ('{"type":"seek","messageId":"latest"}', Seek(LATEST_ID, None)),
        ('{"type":"seek","timestamp":1662512903260}', Seek(None, 1662512903260)),
        ('{"type":"seek","timestamp":0,"messageId":null}', Seek(None, 0)),
        # unknown or absent type: an ack (upstream rule), unknown fields ignored
        ('{"type":"bogus","messageId":"CAMQADAA"}', Ack([ID_3_0])),
        ('{"type":null,"messageId":"CAMQADAA","x":[1]}', Ack([ID_3_0])),
        ('{"type":"Permit","messageId":"CAMQADAA"}', Ack([ID_3_0])),  # case-sensitive
    ],
)
def test_commands(text: str, command: object) -> None:
    assert parse_command(text) == command
    assert parse_command(text.encode()) == command


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", None),
        ("[]", "expected a JSON object"),
        ('"ack"', "expected a JSON object"),
        ("{}", "messageId is required"),
        ('{"type":"bogus"}', "messageId is required (unknown type 'bogus' is treated as an ack)"),
        ('{"type":"negativeAcknowledge"}', "messageId is required"),
        ('{"type":"ackCumulative"}', "messageId is required"),
        ('{"type":7,"messageId":"CAMQADAA"}', "type must be a string"),
        ('{"messageId":"garbage!"}', "Invalid messageId 'garbage!'"),
        ('{"messageId":"AAAA"}', "Invalid messageId 'AAAA'"),
        ('{"messageId":"CAM"}', "Invalid messageId 'CAM'"),
        ('{"messageId":"1:2:3:4:5"}', "Invalid messageId '1:2:3:4:5'"),
        ('{"messageId":"a:b"}', "Invalid messageId 'a:b'"),
        ('{"messageId":""}', "Invalid messageId ''"),
        ('{"messageId":5}', "messageId must be a string"),
        ('{"messageId":"CAMQADAA","messageIds":["CAMQADAA"]}', "give messageId or messageIds, not both"),
        ('{"type":"ack","messageIds":[]}', "messageIds must be a non-empty array"),
        ('{"type":"ack","messageIds":"CAMQADAA"}', "messageIds must be a non-empty array"),
        ('{"type":"ack","messageIds":["CAMQADAA","x!"]}', "Invalid messageIds[1] 'x!'"),
        ('{"type":"ack","messageIds":["CAMQADAA",null]}', "messageIds[1] must be a string"),
        ('{"messageId":"CAMQADAA","ackType":"cumul"}', 'ackType must be "individual" or "cumulative"'),
        ('{"messageIds":["CAMQADAA"],"ackType":"cumulative"}', "messageId is required"),
        ('{"type":"permit"}', "permitMessages is required"),
        ('{"type":"permit","permitMessages":null}', "permitMessages is required"),
        ('{"type":"permit","permitMessages":"5"}', "permitMessages must be an integer"),
        ('{"type":"permit","permitMessages":1.5}', "permitMessages must be an integer"),
        ('{"type":"permit","permitMessages":-1}', "permitMessages -1 is outside"),
        ('{"type":"permit","permitMessages":2147483648}', "permitMessages 2147483648 is outside"),
        ('{"type":"seek"}', "seek needs exactly one of messageId and timestamp"),
        ('{"type":"seek","messageId":"CAMQADAA","timestamp":5}', "seek needs exactly one"),
        ('{"type":"seek","timestamp":-1}', "timestamp -1 is outside"),
        ('{"type":"seek","timestamp":"5"}', "timestamp must be an integer"),
        ('{"type":"seek","messageId":"Earliest"}', "Invalid messageId 'Earliest'"),
        ('{"type":"seek","messageId":"CAMQADAA","inclusive":"no"}', "inclusive must be a boolean"),
    ],
)
def test_bad_commands_are_code_3(text: str, message: str | None) -> None:
    with pytest.raises(FrameError) as info:
        parse_command(text)
    assert info.value.ws_code == 3
    if message is not None:
        assert info.value.message.startswith(message)


def test_ack_batch_limit() -> None:
    ids = [f"1:{i}" for i in range(ACK_BATCH_MAX)]
    command = parse_command(orjson.dumps({"type": "ack", "messageIds": ids}))
    assert isinstance(command, Ack)
    assert len(command.message_ids) == ACK_BATCH_MAX
    with pytest.raises(FrameError, match="more than 10000"):
        parse_command(orjson.dumps({"type": "ack", "messageIds": [*ids, "1:0"]}))
    with pytest.raises(FrameError, match="more than 10000"):
        parse_command(orjson.dumps({"type": "negativeAcknowledge", "messageIds": [*ids, "1:0"]}))


ids = st.builds(
    MessageId,
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-1, 2**31 - 1),
    st.integers(-1, 2**31 - 1),
)


@given(st.lists(ids, min_size=1, max_size=5), st.booleans())
def test_id_round_trip_both_forms(message_ids: list[MessageId], as_string: bool) -> None:
    texts = [str(i) if as_string else i.to_base64() for i in message_ids]
    assert parse_command(orjson.dumps({"type": "ack", "messageIds": texts})) == Ack(message_ids)
    assert parse_command(orjson.dumps({"messageId": texts[0]})) == Ack(message_ids[:1])
    assert parse_command(orjson.dumps({"type": "ackCumulative", "messageId": texts[0]})) == AckCumulative(
        message_ids[0]
    )


@given(st.text(max_size=30))
def test_garbage_never_escapes_as_another_error(text: str) -> None:
    try:
        parse_command(orjson.dumps({"messageId": text}))
    except FrameError as exc:
        assert exc.ws_code == 3


@given(ids, st.text(max_size=30))
def test_plain_ack_id_is_the_id_json_reads(message_id: MessageId, text: str) -> None:
    sent = message_id.to_base64()
    frame = orjson.dumps({"messageId": sent}).decode()
    assert plain_ack_id(frame) == sent
    assert parse_command(frame) == Ack([message_id])
    found = plain_ack_id(orjson.dumps({"messageId": text}).decode())
    assert found == (None if '"' in text or "\\" in text or any(c < " " for c in text) else text)


@pytest.mark.parametrize(
    "frame",
    [
        '{"messageId": "CAMQADAA"}',
        '{"messageId":"CAMQADAA"} ',
        '{"messageId":"CAMQADAA","ackType":"cumulative"}',
        '{"type":"negativeAcknowledge","messageId":"CAMQADAA"}',
        '{"messageId":"CA\\u004dQADAA"}',
        '{"messageId":"}',
        '[{"messageId":"CAMQADAA"}]',
    ],
)
def test_plain_ack_id_of_any_other_frame_is_none(frame: str) -> None:
    assert plain_ack_id(frame) is None
