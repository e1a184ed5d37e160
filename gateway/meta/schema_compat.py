"""Schema compatibility strategies, as Pulsar names and applies them (pure).

Owns: ``Strategy`` (Pulsar's ``SchemaCompatibilityStrategy``), ``is_compatible``
(may a new schema follow the existing versions?) and ``can_read`` (Avro schema
resolution: can a reader schema read what a writer schema wrote?). Rules
(docs/decisions/0010-schema-registry.md):
- BACKWARD: the new schema reads data written with the last version; FORWARD:
  the last version reads data the new one writes; FULL: both; the
  ``_TRANSITIVE`` forms check every version since the last deletion instead of
  only the last; ALWAYS_COMPATIBLE accepts anything, ALWAYS_INCOMPATIBLE
  nothing once a version exists; UNDEFINED means the broker default, FULL;
- a schema of another type is incompatible (except under ALWAYS_COMPATIBLE);
  schemas of the same type without a definition (BYTES, STRING, primitives)
  are compatible; JSON and AVRO definitions follow Avro's resolution rules:
  record fields matched by name (or a reader alias), a reader field missing
  from the writer needs a default, writer fields the reader lacks are skipped;
  numeric promotion int->long->float->double, string<->bytes; enum symbols of
  the writer must be known to the reader (or the reader has a default);
  unions resolve branch by branch; fixed sizes and named-type names must match.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import fastavro

from gateway.meta.schema_types import SchemaInfo


class Strategy(enum.StrEnum):
    UNDEFINED = "UNDEFINED"
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    def effective(self) -> Strategy:
        return Strategy.FULL if self is Strategy.UNDEFINED else self


DEFAULT_STRATEGY = Strategy.FULL  # what UNDEFINED means (Pulsar's broker default)
_PROMOTIONS = {
    ("long", "int"),
    ("float", "int"),
    ("double", "int"),
    ("float", "long"),
    ("double", "long"),
    ("double", "float"),
    ("string", "bytes"),
    ("bytes", "string"),
}


def is_compatible(strategy: Strategy, existing: Sequence[SchemaInfo], new: SchemaInfo) -> bool:
    """May ``new`` become the next version after ``existing`` (oldest first, since the
    last deletion)?"""
    strategy = strategy.effective()
    if not existing or strategy is Strategy.ALWAYS_COMPATIBLE:
        return True
    if strategy is Strategy.ALWAYS_INCOMPATIBLE:
        return False
    transitive = strategy.value.endswith("_TRANSITIVE")
    base = strategy.value.removesuffix("_TRANSITIVE")
    against = existing if transitive else existing[-1:]
    for old in against:
        if old.type != new.type:
            return False
        if not new.type.has_definition:
            continue
        new_avro, old_avro = _expanded(new), _expanded(old)
        if base in ("BACKWARD", "FULL") and not can_read(new_avro, old_avro):
            return False
        if base in ("FORWARD", "FULL") and not can_read(old_avro, new_avro):
            return False
    return True


def can_read(reader: Any, writer: Any) -> bool:
    """Avro schema resolution: can data written with ``writer`` be read with ``reader``?
    Both are fastavro-parsed, expanded schemas."""
    return _can_read(reader, writer, set())


def _expanded(schema: SchemaInfo) -> Any:
    return fastavro.parse_schema(schema.avro(), expand=True)


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        kind = schema["type"]
        return kind if isinstance(kind, str) else _kind(kind)
    return str(schema)


def _can_read(reader: Any, writer: Any, seen: set[tuple[str, str]]) -> bool:
    r_kind, w_kind = _kind(reader), _kind(writer)
    if w_kind == "union":  # every branch the writer may have used must be readable
        return all(_can_read(reader, branch, seen) for branch in writer)
    if r_kind == "union":  # the writer's type must match one of the reader's branches
        return any(_can_read(branch, writer, seen) for branch in reader)
    if r_kind != w_kind:
        return (r_kind, w_kind) in _PROMOTIONS
    if r_kind == "record":
        pair = (reader["name"], writer["name"])
        if pair in seen:  # a recursive type already being compared
            return True
        if not _same_name(reader, writer):
            return False
        seen = seen | {pair}
        written = {f["name"]: f for f in writer["fields"]}
        for field in reader["fields"]:
            names = [field["name"], *field.get("aliases", [])]
            match = next((written[n] for n in names if n in written), None)
            if match is None:
                if "default" not in field:
                    return False
            elif not _can_read(field["type"], match["type"], seen):
                return False
        return True
    if r_kind == "enum":
        if not _same_name(reader, writer):
            return False
        return "default" in reader or set(writer["symbols"]) <= set(reader["symbols"])
    if r_kind == "fixed":
        return _same_name(reader, writer) and reader["size"] == writer["size"]
    if r_kind == "array":
        return _can_read(reader["items"], writer["items"], seen)
    if r_kind == "map":
        return _can_read(reader["values"], writer["values"], seen)
    return True  # the same primitive


def _same_name(reader: dict[str, Any], writer: dict[str, Any]) -> bool:
    """Named types match by full name, or by the unqualified name, or a reader alias."""
    r_name, w_name = reader["name"], writer["name"]
    short = w_name.rsplit(".", 1)[-1]
    return r_name == w_name or r_name.rsplit(".", 1)[-1] == short or w_name in reader.get("aliases", [])
