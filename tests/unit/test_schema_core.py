"""Schema types, payload encoding and the compatibility strategies (pure cores).

Every type round-trips (REST text -> the bytes Pulsar's schema writes -> the
value back); a table states which evolution each strategy accepts and refuses;
bad payloads and bad definitions are refused naming what is wrong.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

import orjson
import pytest

from gateway.meta.schema_compat import Strategy, is_compatible
from gateway.meta.schema_types import (
    DEFINITION_BYTES_MAX,
    InvalidSchema,
    SchemaInfo,
    SchemaMismatch,
    SchemaType,
    check_bytes,
    decode_payload,
    encode_text,
    info_json,
    parse_post_schema,
    parse_rest_schema,
    schema_info,
)

pytestmark = pytest.mark.unit


def record(*fields: dict[str, Any], name: str = "User") -> str:
    return orjson.dumps(
        {"type": "record", "name": name, "namespace": "com.example", "fields": list(fields)}
    ).decode()


NAME = {"name": "name", "type": "string"}
AGE = {"name": "age", "type": "int"}
AGE_DEFAULT = {"name": "age", "type": "int", "default": 0}
AGE_LONG = {"name": "age", "type": "long"}
NAME_INT = {"name": "name", "type": "int"}
USER = record(NAME, AGE_DEFAULT)


@pytest.mark.parametrize(
    ("kind", "text", "raw", "value"),
    [
        ("BYTES", "héllo", "héllo".encode(), "héllo".encode()),
        ("STRING", "héllo", "héllo".encode(), "héllo"),
        ("BOOLEAN", "true", b"\x01", True),
        ("BOOLEAN", "false", b"\x00", False),
        ("INT8", "-5", struct.pack(">b", -5), -5),
        ("INT16", "300", struct.pack(">h", 300), 300),
        ("INT32", "70000", struct.pack(">i", 70000), 70000),
        ("INT64", "-9007199254740993", struct.pack(">q", -9007199254740993), -9007199254740993),
        ("FLOAT", "1.5", struct.pack(">f", 1.5), 1.5),
        ("DOUBLE", "-2.25", struct.pack(">d", -2.25), -2.25),
        ("JSON", '{"name": "a", "age": 3}', b'{"name":"a","age":3}', {"name": "a", "age": 3}),
        ("AVRO", '{"name": "a", "age": 3}', b"\x02a\x06", {"name": "a", "age": 3}),
    ],
)
def test_every_type_round_trips(kind: str, text: str, raw: bytes, value: object) -> None:
    schema = schema_info(kind, USER if kind in ("JSON", "AVRO") else "", {})
    assert encode_text(schema, text, "messages[0].payload") == raw
    assert decode_payload(schema, raw) == value
    check_bytes(schema, raw, "messages[0].payload")
    # the admin API's and the REST producer's shapes give the same schema
    assert parse_post_schema({"type": kind, "schema": schema.definition}).same_as(schema)
    assert parse_rest_schema(orjson.dumps(info_json(schema)).decode(), "valueSchema").same_as(schema)


@pytest.mark.parametrize(
    ("kind", "text", "named"),
    [
        ("JSON", '{"name": "a", "age": "old"}', 'field `age` of User: expected an int, got the string "old"'),
        ("JSON", '{"age": 3}', "field `name` of User: expected a string, got nothing (missing or null)"),
        ("AVRO", '{"name": 5}', "field `name` of User: expected a string, got the integer 5"),
        ("JSON", "not json", "JSON text"),
        ("INT8", "200", "does not fit INT8"),
        ("INT32", "1.5", "an integer"),
        ("BOOLEAN", "yes", "true or false"),
        ("DOUBLE", "x", "a number"),
    ],
)
def test_a_payload_that_does_not_fit_names_the_field(kind: str, text: str, named: str) -> None:
    schema = schema_info(kind, USER if kind in ("JSON", "AVRO") else "", {})
    with pytest.raises(SchemaMismatch) as info:
        encode_text(schema, text, "messages[3].payload")
    assert str(info.value).startswith("messages[3].payload: ") and named in str(info.value), info.value


def test_base64_payloads_are_checked_as_the_schemas_bytes() -> None:
    with pytest.raises(SchemaMismatch, match=r"messages\[0\]\.payload"):
        check_bytes(schema_info("AVRO", USER, {}), b"\x02a\x06trailing", "messages[0].payload")
    with pytest.raises(SchemaMismatch):
        check_bytes(schema_info("INT32", "", {}), b"\x00\x01", "p")
    with pytest.raises(SchemaMismatch):
        check_bytes(schema_info("JSON", USER, {}), b'{"name":1}', "p")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"type": "XML", "schema": ""}, "not supported"),
        ({"type": "JSON", "schema": ""}, "needs an Avro record"),
        ({"type": "AVRO", "schema": '{"type":"string"}'}, "Avro record"),
        (
            {"type": "AVRO", "schema": '{"type":"record","name":"X","fields":[{"name":"a","type":"nope"}]}'},
            "Avro",
        ),
        ({"type": "JSON", "schema": "{"}, "not JSON"),
        ({"type": "JSON", "schema": USER, "properties": {"a": 1}}, "properties"),
        (
            {"type": "JSON", "schema": " " * (DEFINITION_BYTES_MAX + 1)},
            f"exceeds {DEFINITION_BYTES_MAX} bytes",
        ),
        ([], "JSON object"),
    ],
)
def test_bad_definitions_are_refused(body: object, problem: str) -> None:
    with pytest.raises(InvalidSchema, match=problem):
        parse_post_schema(body)


def test_rest_schema_info_decodes_base64_or_takes_schema_definition() -> None:
    encoded = base64.b64encode(USER.encode()).decode()
    from_b64 = parse_rest_schema(orjson.dumps({"name": "", "schema": encoded, "type": "JSON"}).decode(), "v")
    both = parse_rest_schema(
        orjson.dumps({"schema": "!!", "schemaDefinition": USER, "type": "JSON", "properties": {}}).decode(),
        "v",
    )
    assert from_b64.same_as(both) and from_b64.type is SchemaType.JSON
    with pytest.raises(InvalidSchema, match=r"valueSchema\.schema is not base64"):
        parse_rest_schema('{"schema":"%%","type":"JSON"}', "valueSchema")


# ------------------------------------------------------------------ compatibility

V1 = record(NAME)
ADD_WITH_DEFAULT = record(NAME, AGE_DEFAULT)
ADD_WITHOUT_DEFAULT = record(NAME, AGE)
V_AGE = record(NAME, AGE)
DROP_AGE = record(NAME)
V_INT_AGE = record(NAME, AGE)
PROMOTE_AGE = record(NAME, AGE_LONG)
RETYPE_NAME = record(NAME_INT)

# (existing versions, new version, strategies that accept it); every other strategy refuses
EVOLUTIONS: list[tuple[str, list[str], str, set[Strategy]]] = [
    (
        "add a field with a default",
        [V1],
        ADD_WITH_DEFAULT,
        {
            Strategy.BACKWARD,
            Strategy.FORWARD,
            Strategy.FULL,
            *{s for s in Strategy if "TRANSITIVE" in s.value},
        },
    ),
    (
        "add a field without a default",
        [V1],
        ADD_WITHOUT_DEFAULT,
        {Strategy.FORWARD, Strategy.FORWARD_TRANSITIVE},
    ),
    (
        "drop a field that had no default",
        [V_AGE],
        DROP_AGE,
        {Strategy.BACKWARD, Strategy.BACKWARD_TRANSITIVE},
    ),
    ("promote int to long", [V_INT_AGE], PROMOTE_AGE, {Strategy.BACKWARD, Strategy.BACKWARD_TRANSITIVE}),
    ("change a field's type", [V1], RETYPE_NAME, set()),
    (
        # against the last version only it is fine; against the first it is not
        "add a field without a default after one with a default",
        [V1, ADD_WITH_DEFAULT],
        ADD_WITHOUT_DEFAULT,
        {Strategy.BACKWARD, Strategy.FORWARD, Strategy.FULL, Strategy.FORWARD_TRANSITIVE},
    ),
]
ALWAYS = {Strategy.ALWAYS_COMPATIBLE}


@pytest.mark.parametrize(("what", "existing", "new", "accepted"), EVOLUTIONS, ids=[e[0] for e in EVOLUTIONS])
@pytest.mark.parametrize("strategy", [s for s in Strategy if s is not Strategy.UNDEFINED])
def test_each_strategy_accepts_and_refuses_the_right_evolutions(
    strategy: Strategy, what: str, existing: list[str], new: str, accepted: set[Strategy]
) -> None:
    old = [schema_info("AVRO", d, {}) for d in existing]
    assert is_compatible(strategy, old, schema_info("AVRO", new, {})) == (strategy in accepted | ALWAYS), what


def test_undefined_means_full_and_other_rules() -> None:
    old = [schema_info("JSON", V1, {})]
    assert is_compatible(Strategy.UNDEFINED, old, schema_info("JSON", ADD_WITH_DEFAULT, {}))
    assert not is_compatible(Strategy.UNDEFINED, old, schema_info("JSON", ADD_WITHOUT_DEFAULT, {}))
    # another type never follows, a primitive follows itself, anything may be first
    assert not is_compatible(Strategy.FULL, old, schema_info("AVRO", V1, {}))
    assert not is_compatible(Strategy.BACKWARD, [SchemaInfo(SchemaType.STRING)], SchemaInfo(SchemaType.INT32))
    assert is_compatible(
        Strategy.FULL_TRANSITIVE, [SchemaInfo(SchemaType.INT32)], SchemaInfo(SchemaType.INT32)
    )
    assert is_compatible(Strategy.ALWAYS_INCOMPATIBLE, [], SchemaInfo(SchemaType.STRING))
    assert not is_compatible(
        Strategy.ALWAYS_INCOMPATIBLE, [SchemaInfo(SchemaType.STRING)], SchemaInfo(SchemaType.STRING)
    )
