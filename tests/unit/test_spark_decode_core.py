"""decode=true on plain data (no Spark session): Avro definitions -> Spark types,
the registry's stored versions, and payloads decoded with the version they were
written with (bytes made by the gateway's own encoder)."""

from __future__ import annotations

import io
import re
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import fastavro
import orjson
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from pyspark_folio.decode import DecodeSpec, PayloadDecoder, TopicSchema, spark_type
from pyspark_folio.names import TopicPartition
from pyspark_folio.plan import ReadRange
from pyspark_folio.rows import RowsBuilder

from gateway.meta.schema_types import SchemaInfo, SchemaType, encode_text
from storage.formats.entry_format import EntryMessage, encode_entry

pytestmark = pytest.mark.unit

ADDRESS = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}
RICH = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "paid", "type": "boolean"},
        {"name": "total", "type": "double"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": "int"}},
        {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "DONE"]}},
        {"name": "ship", "type": ADDRESS},
        {"name": "bill", "type": ["null", "Address"], "default": None},
        {"name": "digest", "type": {"type": "fixed", "name": "D", "size": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    ],
}
USER = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
USER_V2 = {
    **USER,
    "fields": [*USER["fields"], {"name": "email", "type": ["null", "string"], "default": None}],
}


def _f(name: str, data_type: Any) -> StructField:
    return StructField(name, data_type, True)


def test_avro_record_maps_to_a_spark_struct() -> None:
    city = StructType([_f("city", StringType())])
    expected = StructType(
        [
            _f("id", LongType()),
            _f("paid", BooleanType()),
            _f("total", DoubleType()),
            _f("note", StringType()),
            _f("tags", ArrayType(StringType(), True)),
            _f("counts", MapType(StringType(), IntegerType(), True)),
            _f("state", StringType()),
            _f("ship", city),
            _f("bill", city),
            _f("digest", BinaryType()),
            _f("day", DateType()),
            _f("at", TimestampType()),
            _f("price", DecimalType(9, 2)),
        ]
    )
    assert spark_type(orjson.dumps(RICH).decode(), "AVRO") == expected
    as_json = spark_type(orjson.dumps(RICH).decode(), "JSON")  # JSON payloads carry the plain values
    assert [f.dataType for f in as_json.fields][-3:] == [IntegerType(), LongType(), BinaryType()]


@pytest.mark.parametrize(
    ("field_type", "named"),
    [
        (["int", "string"], "User.odd"),
        ({"type": "int", "logicalType": "time-millis"}, "User.odd"),
        ({"type": "array", "items": ["null", "int", "string"]}, "User.odd[]"),
    ],
)
def test_unsupported_avro_type_is_an_error_naming_the_field(field_type: Any, named: str) -> None:
    definition = {**USER, "fields": [*USER["fields"], {"name": "odd", "type": field_type}]}
    with pytest.raises(ValueError, match=re.escape(f"field {named}:")):
        spark_type(orjson.dumps(definition).decode(), "AVRO")


def _stored(kind: str, *definitions: dict[str, Any] | None) -> bytes:
    """The registry's etcd value: a version per definition, None for a tombstone."""
    versions = [
        {"version": i, "type": kind, "data": orjson.dumps(d).decode() if d else "", "properties": {}}
        | {"timestamp": 1, "deleted": d is None}
        for i, d in enumerate(definitions)
    ]
    return orjson.dumps({"versions": versions})


def test_stored_versions_and_tombstones() -> None:
    assert TopicSchema.parse(None).latest is None
    live = TopicSchema.parse(_stored("AVRO", USER, USER_V2))
    assert live.latest is not None and live.latest.version == 1 and set(live.versions) == {0, 1}
    assert TopicSchema.parse(_stored("AVRO", USER, None)).latest is None
    after = TopicSchema.parse(_stored("AVRO", USER, None, USER_V2)).latest
    assert after is not None and after.version == 2


def _decoder(kind: str) -> PayloadDecoder:
    schema = TopicSchema.parse(_stored(kind, USER, USER_V2))
    assert schema.latest is not None
    definition = schema.latest.definition
    return PayloadDecoder(DecodeSpec(kind, definition, spark_type(definition, kind)), schema)


def _encoded(kind: str, definition: dict[str, Any], value: dict[str, Any]) -> bytes:
    info = SchemaInfo(SchemaType(kind), orjson.dumps(definition).decode())
    return encode_text(info, orjson.dumps(value).decode(), "payload")


@pytest.mark.parametrize("kind", ["AVRO", "JSON"])
def test_payloads_decode_with_the_version_they_were_written_with(kind: str) -> None:
    decoder = _decoder(kind)
    old = _encoded(kind, USER, {"name": "ann", "age": 30})
    new = _encoded(kind, USER_V2, {"name": "bob", "age": 41, "email": "b@x"})
    assert decoder.decode(0, old) == {"name": "ann", "age": 30, "email": None}
    assert decoder.decode(1, new) == {"name": "bob", "age": 41, "email": "b@x"}
    assert decoder.decode(None, old) is None  # written without a schema
    assert decoder.decode(7, old) is None  # no such version
    assert decoder.decode(1, b"\xff\xfe garbage") is None
    assert decoder.decode(0, old + b"\x00\x00" if kind == "AVRO" else b'{"name":1}') is None


def test_rows_carry_the_decoded_struct_as_arrow() -> None:
    definition = orjson.dumps(RICH).decode()
    schema = TopicSchema.parse(_stored("AVRO", RICH))
    decoder = PayloadDecoder(DecodeSpec("AVRO", definition, spark_type(definition, "AVRO")), schema)
    order = {
        "id": 7,
        "paid": True,
        "total": 2.5,
        "note": None,
        "tags": ["a", "b"],
        "counts": {"x": 1},
        "state": "DONE",
        "ship": {"city": "Oslo"},
        "bill": None,
        "digest": b"ab",
        "day": date(2024, 10, 4),
        "at": datetime.fromtimestamp(1_700_000_000, UTC),
        "price": Decimal("12.34"),
    }
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(RICH), order)
    payload = out.getvalue()
    entry = encode_entry(
        [
            EntryMessage(payload, 1, "p", 1, schema_version=0),
            EntryMessage(b"\x01", 2, "p", 2, schema_version=0),
        ]
    )
    log = TopicPartition("persistent://t/n/x", "persistent://t/n/x", -1)
    read = ReadRange(log, 3, 0, 0)
    builder = RowsBuilder(read, decoder=decoder)
    builder.add_entry(0, entry)
    rows = builder.take().to_pylist()
    first = rows[0]["decoded"]
    assert first["tags"] == ["a", "b"] and first["counts"] == [("x", 1)] and first["state"] == "DONE"
    assert first["ship"] == {"city": "Oslo"} and first["bill"] is None and first["digest"] == b"ab"
    assert first["day"] == date(2024, 10, 4)
    assert first["at"] == datetime.fromtimestamp(1_700_000_000, UTC)
    assert first["price"] == Decimal("12.34")
    assert rows[1]["decoded"] is None  # one byte is no Order
