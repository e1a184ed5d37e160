"""Refusals that say what is wrong and what to do: a topic not created yet, a value
that is not a message id, a payload that does not fit its schema (the SQL service's
are in test_analytics_sql_core.py)."""

from __future__ import annotations

import pytest

from gateway.broker.log_state import TopicNotFound, topic_missing
from gateway.meta.schema_types import SchemaMismatch, encode_text, mismatch_sentences, schema_info
from gateway.protocol.errors import FrameError, InvalidParams
from gateway.protocol.json_fields import parse_message_id
from gateway.protocol.params import parse_reader_params
from gateway.protocol.ws_commands import parse_command

pytestmark = pytest.mark.unit

TOPIC = "persistent://public/default/nosuchtopic"
PATH = "persistent/public/default/nosuchtopic"


def test_a_topic_not_created_yet_in_a_namespace_that_auto_creates() -> None:
    error = topic_missing(TOPIC, PATH, "public/default", auto_create=True)
    assert isinstance(error, TopicNotFound)
    text = str(error)
    assert text.startswith(f"topic {TOPIC} does not exist yet: namespace public/default creates it")
    assert "first publish or subscribe" in text and f"PUT /admin/v2/{PATH}" in text
    assert "auto-creation is off" not in text and "does not create" not in text


def test_a_topic_missing_in_a_namespace_that_does_not_auto_create() -> None:
    text = str(topic_missing(TOPIC, PATH, "public/default", auto_create=False))
    assert text.startswith(f"topic {TOPIC} does not exist and namespace public/default does not create")
    assert f"create it with PUT /admin/v2/{PATH}, or check the name" in text


def test_a_reader_start_that_is_no_message_id_lists_the_accepted_forms() -> None:
    with pytest.raises(InvalidParams) as info:
        parse_reader_params({"messageId": "earlest"})
    text = str(info.value)
    assert "Invalid messageId 'earlest': not a valid message id" in text
    assert "(did you mean 'earliest'?)" in text
    assert text.endswith("use earliest, latest or a base64 message id as delivered (e.g. CAMQADAA)")
    assert "truncated field" not in text.split("(", maxsplit=1)[0]  # the decoder's detail: in parentheses


def test_a_value_far_from_any_keyword_gets_no_guess() -> None:
    with pytest.raises(InvalidParams) as info:
        parse_reader_params({"messageId": "zzzzzz!"})
    assert "did you mean" not in str(info.value)


def test_an_ack_or_seek_id_lists_the_string_forms_too() -> None:
    with pytest.raises(FrameError) as info:
        parse_message_id("lates")
    text = str(info.value)
    assert "not a valid message id" in text
    assert text.endswith(
        "use a base64 message id as delivered (e.g. CAMQADAA) "
        "or ledger:entry[:partition[:batchIndex]] (e.g. 3:0)"
    )
    assert "earliest" not in text.split("use ")[1]  # an ack cannot name a sentinel
    with pytest.raises(FrameError) as seek:
        parse_command('{"type":"seek","messageId":"lates"}')
    assert "(did you mean 'latest'?)" in str(seek.value)
    assert "use earliest, latest, a base64 message id" in str(seek.value)


USER = (
    '{"type":"record","name":"User","namespace":"com.example","fields":['
    '{"name":"name","type":"string"},{"name":"age","type":"int"},'
    '{"name":"address","type":["null",{"type":"record","name":"Address","fields":['
    '{"name":"zip","type":["null","int"]}]}],"default":null}]}'
)


@pytest.mark.parametrize("kind", ["JSON", "AVRO"])
@pytest.mark.parametrize(
    ("payload", "sentence"),
    [
        ('{"name":"ann","age":"thirty"}', 'field `age` of User: expected an int, got the string "thirty"'),
        ('{"age":3}', "field `name` of User: expected a string, got nothing (missing or null)"),
        ('{"name":"ann","age":true}', "field `age` of User: expected an int, got the boolean true"),
        ('{"name":"ann","age":1.5}', "field `age` of User: expected an int, got the number 1.5"),
        (
            '{"name":"ann","age":3,"address":{"zip":"x"}}',
            'field `zip` of Address: expected null or an int, got the string "x"',
        ),
        ("[1, 2]", "expected a User record (a JSON object), got an array"),
    ],
)
def test_a_schema_mismatch_reads_as_a_sentence(kind: str, payload: str, sentence: str) -> None:
    with pytest.raises(SchemaMismatch) as info:
        encode_text(schema_info(kind, USER, {}), payload, "messages[0].payload")
    assert str(info.value) == f"messages[0].payload: {sentence}"


def test_a_long_string_value_is_cut_and_fields_of_nested_records_are_dotted() -> None:
    named = frozenset({"com.example.User", "com.example.Address"})
    text = mismatch_sentences([("com.example.User.address.com.example.Address.zip", "z" * 100, "int")], named)
    assert text == 'field `address.zip` of User: expected an int, got the string "' + "z" * 40 + '..."'
