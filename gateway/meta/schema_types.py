"""Topic schemas as Pulsar defines them: types, definitions and payload encoding (pure).

Owns: ``SchemaType`` (the types Folio registers), ``SchemaInfo`` (one version
as stored), the parsers of Pulsar's two schema shapes - the admin API's
``PostSchemaPayload`` (``{"type","schema","properties"}``, the definition as
text) and the REST producer's ``keySchema``/``valueSchema`` (a JSON-serialised
``SchemaInfo`` whose ``schema`` is base64 of the definition bytes) - and
``encode_text`` / ``check_bytes``, which turn a REST payload into the bytes
Pulsar's schema would write, or check bytes against a schema. Rules
(docs/decisions/0010-schema-registry.md):
- BYTES and STRING have no definition; the primitives are Pulsar's fixed-width
  big-endian encodings (BOOLEAN 1 byte, INT8/16/32/64, FLOAT/DOUBLE IEEE-754);
- JSON and AVRO carry an Avro record definition, parsed and checked with
  fastavro (never by hand); a JSON payload is the JSON text (re-serialised
  compactly), an AVRO payload is Avro binary written from the JSON given;
- a payload that does not fit its schema raises ``SchemaMismatch`` naming the
  field, what it expects and what it got (``mismatch_sentences``, from
  fastavro's errors: ``field `year` of PC: expected an int, got the string
  "x"``); a bad definition ``InvalidSchema``;
- bounds: a definition up to ``DEFINITION_BYTES_MAX``, properties up to
  ``PROPERTIES_MAX`` entries.
"""

from __future__ import annotations

import base64
import binascii
import enum
import io
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import fastavro
import orjson
from fastavro.validation import ValidationError, validate

from gateway.errors import GatewayError

DEFINITION_BYTES_MAX = 64 * 1024  # one schema definition
PROPERTIES_MAX = 64  # properties of one schema


class SchemaType(enum.StrEnum):
    BYTES = "BYTES"
    STRING = "STRING"
    BOOLEAN = "BOOLEAN"
    INT8 = "INT8"
    INT16 = "INT16"
    INT32 = "INT32"
    INT64 = "INT64"
    FLOAT = "FLOAT"
    DOUBLE = "DOUBLE"
    JSON = "JSON"
    AVRO = "AVRO"

    @property
    def has_definition(self) -> bool:
        return self in (SchemaType.JSON, SchemaType.AVRO)


_INTEGERS: dict[SchemaType, tuple[str, int]] = {
    SchemaType.INT8: (">b", 8),
    SchemaType.INT16: (">h", 16),
    SchemaType.INT32: (">i", 32),
    SchemaType.INT64: (">q", 64),
}
_FLOATS: dict[SchemaType, str] = {SchemaType.FLOAT: ">f", SchemaType.DOUBLE: ">d"}


class InvalidSchema(GatewayError, code="invalid_schema"):
    """A schema whose type or definition cannot be read."""


class SchemaMismatch(GatewayError, code="schema_mismatch"):
    """A payload that its schema cannot encode or read."""


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    """One schema: its type, its definition text ("" for types without one) and properties."""

    type: SchemaType
    definition: str = ""
    properties: Mapping[str, str] = field(default_factory=dict)

    def same_as(self, other: SchemaInfo) -> bool:
        """Equal as schemas: same type, same parsed definition, same properties."""
        if self.type != other.type or dict(self.properties) != dict(other.properties):
            return False
        if not self.type.has_definition:
            return True
        return orjson.loads(self.definition) == orjson.loads(other.definition)

    def avro(self) -> Any:
        """The parsed Avro definition (JSON and AVRO types)."""
        return _parse_avro(self.definition)


def schema_info(type_text: object, definition: object, properties: object) -> SchemaInfo:
    """A validated ``SchemaInfo`` from its parts (``InvalidSchema`` on any defect)."""
    if not isinstance(type_text, str):
        raise InvalidSchema("type must be a string")
    try:
        schema_type = SchemaType(type_text.upper())
    except ValueError as exc:
        known = ", ".join(t.value for t in SchemaType)
        raise InvalidSchema(f"schema type {type_text!r} is not supported: one of {known}") from exc
    props = _properties(properties)
    if definition is None:
        definition = ""
    if not isinstance(definition, str):
        raise InvalidSchema("schema must be a string")
    if len(definition.encode("utf-8", "replace")) > DEFINITION_BYTES_MAX:
        raise InvalidSchema(f"schema definition exceeds {DEFINITION_BYTES_MAX} bytes")
    if not schema_type.has_definition:
        return SchemaInfo(schema_type, "", props)  # Pulsar ignores the data of these types
    if not definition.strip():
        raise InvalidSchema(f"a {schema_type.value} schema needs an Avro record definition")
    try:
        loaded = orjson.loads(definition)
    except orjson.JSONDecodeError as exc:
        raise InvalidSchema(f"schema definition is not JSON: {exc}") from exc
    _parse_avro_value(loaded)
    return SchemaInfo(schema_type, orjson.dumps(loaded).decode(), props)


def parse_post_schema(body: object) -> SchemaInfo:
    """The admin API's ``PostSchemaPayload``: ``{"type":"AVRO","schema":"<definition>","properties":{}}``."""
    if not isinstance(body, dict):
        raise InvalidSchema("the body must be a JSON object with type, schema and properties")
    return schema_info(body.get("type"), body.get("schema"), body.get("properties"))


def parse_rest_schema(text: object, name: str) -> SchemaInfo:
    """The REST producer's ``keySchema``/``valueSchema``: a JSON-serialised ``SchemaInfo``
    (``{"name","schema":<base64 of the definition>,"type","properties"}``); Pulsar's
    clients also send ``schemaDefinition`` (the definition as text), used when present."""
    if not isinstance(text, str):
        raise InvalidSchema(f"{name} must be a string holding a JSON SchemaInfo")
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidSchema(f"{name} is not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise InvalidSchema(f"{name} must be a JSON object")
    definition = obj.get("schemaDefinition")
    if definition is None:
        encoded = obj.get("schema")
        if encoded is None:
            definition = ""
        elif not isinstance(encoded, str):
            raise InvalidSchema(f"{name}.schema must be base64 text")
        else:
            try:
                definition = base64.b64decode(encoded, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError) as exc:
                raise InvalidSchema(f"{name}.schema is not base64 of UTF-8 text: {exc}") from exc
    try:
        return schema_info(obj.get("type"), definition, obj.get("properties"))
    except InvalidSchema as exc:
        raise InvalidSchema(f"{name}: {exc}") from exc


def encode_text(schema: SchemaInfo, text: str, where: str) -> bytes:
    """A REST payload (text) as the bytes ``schema`` writes; ``SchemaMismatch`` naming ``where``."""
    kind = schema.type
    if kind in (SchemaType.BYTES, SchemaType.STRING):
        return text.encode("utf-8")
    if kind is SchemaType.BOOLEAN:
        if text not in ("true", "false"):
            raise SchemaMismatch(f"{where}: a BOOLEAN payload is true or false, got {_shown(text)}")
        return b"\x01" if text == "true" else b"\x00"
    if kind in _INTEGERS:
        fmt, bits = _INTEGERS[kind]
        try:
            number = int(text.strip())
        except ValueError as exc:
            raise SchemaMismatch(
                f"{where}: an {kind.value} payload is an integer, got {_shown(text)}"
            ) from exc
        if not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
            raise SchemaMismatch(f"{where}: {number} does not fit {kind.value}")
        return struct.pack(fmt, number)
    if kind in _FLOATS:
        try:
            number_f = float(text.strip())
        except ValueError as exc:
            raise SchemaMismatch(f"{where}: a {kind.value} payload is a number, got {_shown(text)}") from exc
        if kind is SchemaType.FLOAT and math.isfinite(number_f) and abs(number_f) > 3.4028234663852886e38:
            raise SchemaMismatch(f"{where}: {text} does not fit FLOAT")
        return struct.pack(_FLOATS[kind], number_f)
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise SchemaMismatch(f"{where}: a {kind.value} payload is JSON text: {exc}") from exc
    parsed = schema.avro()
    _validate(value, parsed, where)
    if kind is SchemaType.JSON:
        return orjson.dumps(value)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, value)
    return out.getvalue()


def check_bytes(schema: SchemaInfo, payload: bytes, where: str) -> None:
    """``SchemaMismatch`` unless ``payload`` is bytes ``schema`` wrote (a base64 payload)."""
    kind = schema.type
    if kind is SchemaType.BYTES:
        return
    try:
        decode_payload(schema, payload)
    except SchemaMismatch as exc:
        raise SchemaMismatch(f"{where}: {exc}") from exc


def decode_payload(schema: SchemaInfo, payload: bytes) -> Any:
    """The value ``payload`` holds under ``schema`` (for display and checks)."""
    kind = schema.type
    try:
        if kind is SchemaType.BYTES:
            return payload
        if kind is SchemaType.STRING:
            return payload.decode("utf-8")
        if kind is SchemaType.BOOLEAN:
            if payload not in (b"\x00", b"\x01"):
                raise SchemaMismatch("a BOOLEAN payload is one byte, 0 or 1")
            return payload == b"\x01"
        if kind in _INTEGERS:
            return struct.unpack(_INTEGERS[kind][0], payload)[0]
        if kind in _FLOATS:
            return struct.unpack(_FLOATS[kind], payload)[0]
        parsed = schema.avro()
        if kind is SchemaType.JSON:
            value = orjson.loads(payload)
            _validate(value, parsed, "payload")
            return value
        stream = io.BytesIO(payload)
        value = fastavro.schemaless_reader(stream, parsed, None)
        if stream.tell() != len(payload):
            raise SchemaMismatch(f"{len(payload) - stream.tell()} bytes after the Avro record")
        return value
    except SchemaMismatch:
        raise
    except Exception as exc:  # struct.error, UnicodeDecodeError, JSON or Avro decoding errors
        raise SchemaMismatch(f"not a {kind.value} payload: {exc}") from exc


def display_value(schema: SchemaInfo, payload: bytes) -> Any:
    """What ``payload`` holds under ``schema``, as JSON for display (a JSON or Avro record
    as an object, a number, a boolean, text); None for BYTES or a payload that does not fit."""
    if schema.type is SchemaType.BYTES:
        return None
    try:
        value = decode_payload(schema, payload)
    except SchemaMismatch:
        return None
    return orjson.loads(orjson.dumps(value, default=_bytes_as_base64))


def _bytes_as_base64(value: object) -> str:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON")


def info_json(schema: SchemaInfo) -> dict[str, Any]:
    """Pulsar's ``SchemaInfo`` JSON as REST producers send it (``schema`` is base64)."""
    return {
        "name": "",
        "schema": base64.b64encode(schema.definition.encode()).decode(),
        "type": schema.type.value,
        "properties": dict(schema.properties),
    }


# ------------------------------------------------------------------ helpers


def _validate(value: object, parsed: Any, where: str) -> None:
    try:
        validate(value, parsed, raise_errors=True)
    except ValidationError as exc:
        named = frozenset(parsed.get("__named_schemas", {})) if isinstance(parsed, dict) else frozenset()
        found = [(e.field, e.datum, e.schema) for e in exc.errors]
        problems = mismatch_sentences(found, named) or str(exc)
        raise SchemaMismatch(f"{where}: {problems}") from exc


_PRIMITIVES = {
    "null": "null",
    "boolean": "a boolean",
    "int": "an int",
    "long": "a long",
    "float": "a float",
    "double": "a double",
    "bytes": "bytes",
    "string": "a string",
}
SHOWN_CHARS = 40  # how much of a refused string value a sentence repeats


def mismatch_sentences(found: list[tuple[str, object, object]], named: frozenset[str]) -> str:
    """fastavro's validation errors ``(field path, value, expected schema)`` as sentences,
    one per field (a union's branches are one field: "expected null or an int"), e.g.
    ``field `age` of User: expected an int, got the string "thirty"``; ``named`` are
    the full names of the schema's named types, to split a path such as
    ``com.example.User.addr.com.example.Addr.zip`` into record and fields (pure)."""
    expected: dict[str, list[str]] = {}
    values: dict[str, object] = {}
    for path, value, schema in found:
        wanted = expected.setdefault(path, [])
        text = _expected(schema)
        if text not in wanted:
            wanted.append(text)
        values[path] = value
    parts = []
    for path, wanted in expected.items():
        if any(other is not values[path] and _holds(values[path], other) for other in values.values()):
            continue  # a union's record branch: the error inside it is the one to tell
        record, fields = _record_and_fields(path, named)
        where = f"field `{'.'.join(fields)}` of {record}: " if fields else ""
        parts.append(f"{where}expected {' or '.join(wanted)}, got {_got(values[path])}")
    return "; ".join(parts)


def _holds(container: object, value: object) -> bool:
    """Whether ``value`` is (by identity) inside the JSON object or array ``container``."""
    if isinstance(container, dict):
        children: list[object] = list(container.values())
    elif isinstance(container, list):
        children = container
    else:
        return False
    return any(child is value or _holds(child, value) for child in children)


def _short(full_name: str) -> str:
    return full_name.rsplit(".", 1)[-1]


def _record_and_fields(path: str, named: frozenset[str]) -> tuple[str, list[str]]:
    segments = path.split(".") if path else []
    record = ""
    fields: list[str] = []
    i = 0
    while i < len(segments):
        end = next((j for j in range(len(segments), i, -1) if ".".join(segments[i:j]) in named), None)
        if end is None:
            fields.append(segments[i])
            i += 1
            continue
        record = record or _short(".".join(segments[i:end]))
        i = end
    return record or "the record", fields


def _expected(schema: object) -> str:
    if isinstance(schema, str):
        return _PRIMITIVES.get(schema, f"a {_short(schema)} record (a JSON object)")
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "record":
            return f"a {_short(str(schema.get('name', '')))} record (a JSON object)"
        if kind == "array":
            return "an array"
        if kind == "map":
            return "a map (a JSON object)"
        if kind == "enum":
            return "one of " + ", ".join(str(s) for s in schema.get("symbols", []))
        if kind == "fixed":
            return f"{schema.get('size')} bytes"
        return _expected(kind)
    if isinstance(schema, list):
        return " or ".join(_expected(s) for s in schema)
    return str(schema)


def _got(value: object) -> str:
    if value is None:
        return "nothing (missing or null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value}"
    if isinstance(value, str):
        shown = value if len(value) <= SHOWN_CHARS else value[:SHOWN_CHARS] + "..."
        return "the string " + orjson.dumps(shown).decode()
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _parse_avro(definition: str) -> Any:
    return _parse_avro_value(orjson.loads(definition))


def _parse_avro_value(value: object) -> Any:
    if not isinstance(value, dict) or value.get("type") != "record":
        raise InvalidSchema('a JSON or AVRO schema definition is an Avro record ({"type":"record",...})')
    try:
        return fastavro.parse_schema(value)
    except Exception as exc:  # fastavro raises SchemaParseException, ValueError, KeyError, TypeError
        raise InvalidSchema(f"invalid Avro definition: {exc}") from exc


def _properties(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InvalidSchema("properties must be an object of strings")
    if len(value) > PROPERTIES_MAX:
        raise InvalidSchema(f"more than {PROPERTIES_MAX} schema properties")
    return dict(value)


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")
