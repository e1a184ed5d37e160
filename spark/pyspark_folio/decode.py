"""Typed decoding of schema'd payloads for ``decode=true`` (pure).

Owns: ``spark_type`` (an Avro record definition -> Spark ``StructType``),
``TopicSchema`` (a topic's versions as the registry stores them in etcd,
docs/decisions/0010-schema-registry.md) and ``PayloadDecoder`` (one payload ->
the ``decoded`` struct value, as Arrow takes it). Rules: JSON and AVRO schemas
carry an Avro record definition; records, primitives, ``["null", X]`` unions,
arrays, maps and fixed map to Spark types, enums to strings, and for AVRO the
logical types date, timestamp-*, local-timestamp-*, decimal and uuid; anything
else is a ``ValueError`` naming the field. Every decoded field is nullable (a
field added by a later version is null in older messages). A payload is read
with the version it was written with (fastavro ``schemaless_reader`` resolving
to the latest version for AVRO, orjson and validation against the writer's
definition for JSON); a payload that does not decode, or that carries no
version, decodes to null.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

import fastavro
import orjson
from fastavro.validation import validate
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

DECODED = "decoded"
KINDS = ("JSON", "AVRO")
_PRIMITIVES: dict[str, DataType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "string": StringType(),
    "bytes": BinaryType(),
}
_LOGICAL: dict[str, DataType] = {
    "date": DateType(),
    "timestamp-millis": TimestampType(),
    "timestamp-micros": TimestampType(),
    "local-timestamp-millis": TimestampNTZType(),
    "local-timestamp-micros": TimestampNTZType(),
    "uuid": StringType(),
}
_DEPTH_MAX = 32


def spark_type(definition: str, kind: str) -> StructType:
    """The Spark struct of an Avro record definition (logical types only for AVRO)."""
    parsed: Any = fastavro.parse_schema(orjson.loads(definition), expand=True)
    result = _map(parsed, str(parsed.get("name", "record")), kind == "AVRO", 0)
    assert isinstance(result, StructType)
    return result


def _map(schema: Any, where: str, logical: bool, depth: int) -> DataType:
    if depth > _DEPTH_MAX:
        raise ValueError(f"field {where}: nested deeper than {_DEPTH_MAX} (a recursive type?)")
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        raise ValueError(f"field {where}: Avro type {schema!r} is not supported by decode=true")
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1 and len(schema) == 2:
            return _map(branches[0], where, logical, depth + 1)
        raise ValueError(f"field {where}: only unions of null and one type are supported, got {schema}")
    kind = schema.get("type")
    if logical and schema.get("logicalType") in _LOGICAL:
        return _LOGICAL[schema["logicalType"]]
    if logical and schema.get("logicalType") == "decimal":
        return DecimalType(int(schema["precision"]), int(schema.get("scale", 0)))
    if logical and schema.get("logicalType") is not None:
        raise ValueError(f"field {where}: logical type {schema['logicalType']!r} is not supported")
    if kind == "record":
        return StructType(
            [
                StructField(f["name"], _map(f["type"], f"{where}.{f['name']}", logical, depth + 1), True)
                for f in schema["fields"]
            ]
        )
    if kind == "array":
        return ArrayType(_map(schema["items"], f"{where}[]", logical, depth + 1), True)
    if kind == "map":
        return MapType(StringType(), _map(schema["values"], f"{where}{{}}", logical, depth + 1), True)
    if kind == "enum":
        return StringType()
    if kind == "fixed":
        return BinaryType()
    return _map(kind, where, logical, depth + 1)


@dataclass(frozen=True, slots=True)
class SchemaVersionText:
    version: int
    kind: str
    definition: str


@dataclass(frozen=True)
class TopicSchema:
    """A topic's stored versions, tombstones dropped; ``latest`` is None when the
    topic has no schema (none registered, or the last version was deleted)."""

    versions: dict[int, SchemaVersionText] = field(default_factory=dict)
    latest: SchemaVersionText | None = None

    @classmethod
    def parse(cls, value: bytes | None) -> TopicSchema:
        if not value:
            return cls()
        versions: dict[int, SchemaVersionText] = {}
        latest = None
        for obj in orjson.loads(value)["versions"]:
            if obj.get("deleted"):
                latest = None
                continue
            latest = SchemaVersionText(int(obj["version"]), str(obj["type"]), str(obj.get("data", "")))
            versions[latest.version] = latest
        return cls(versions, latest)


@dataclass(frozen=True)
class DecodeSpec:
    """What the driver planned: the latest definition (the reader's) and its struct."""

    kind: str
    definition: str
    struct: StructType

    def same_as(self, other: DecodeSpec) -> bool:
        return self.kind == other.kind and orjson.loads(self.definition) == orjson.loads(other.definition)


class PayloadDecoder:
    """Decodes payloads of one topic (a task builds one; parsed versions are cached)."""

    def __init__(self, spec: DecodeSpec, schema: TopicSchema) -> None:
        self.spec = spec
        self._spec = spec
        self._schema = schema
        self._reader = fastavro.parse_schema(orjson.loads(spec.definition))
        self._parsed: dict[int, Any] = {}

    def _writer(self, version: int) -> Any:
        if version not in self._parsed:
            stored = self._schema.versions.get(version)
            if stored is None or stored.kind != self._spec.kind:
                self._parsed[version] = None
            else:
                self._parsed[version] = fastavro.parse_schema(orjson.loads(stored.definition))
        return self._parsed[version]

    def decode(self, version: int | None, payload: bytes) -> dict[str, Any] | None:
        """The struct value of ``payload`` written with ``version``; None if it does not decode."""
        if version is None:
            return None
        writer = self._writer(version)
        if writer is None:
            return None
        try:
            if self._spec.kind == "JSON":
                value = orjson.loads(payload)
                if not validate(value, writer, raise_errors=False):
                    return None
            else:
                stream = io.BytesIO(payload)
                value = fastavro.schemaless_reader(stream, writer, self._reader)
                if stream.tell() != len(payload):
                    return None
            shaped = _shape(value, self._spec.struct)
        except Exception:  # any JSON/Avro decoding or resolution error: the row's decoded is null
            return None
        assert shaped is None or isinstance(shaped, dict)
        return shaped


def _shape(value: Any, data_type: DataType) -> Any:
    """``value`` as Arrow takes it for ``data_type`` (maps as key/value pairs)."""
    if value is None:
        return None
    if isinstance(data_type, StructType):
        if not isinstance(value, dict):
            raise TypeError("a record is an object")
        return {f.name: _shape(value.get(f.name), f.dataType) for f in data_type.fields}
    if isinstance(data_type, ArrayType):
        return [_shape(v, data_type.elementType) for v in value]
    if isinstance(data_type, MapType):
        return [(k, _shape(v, data_type.valueType)) for k, v in value.items()]
    if isinstance(data_type, BinaryType) and isinstance(value, str):
        return value.encode("utf-8")
    return value
