"""The per-field profile over Arrow: the ``decoded`` struct column of ``decode=true`` reads.

Owns: ``field_specs`` (an Arrow struct type -> its leaves as dotted paths, in
schema order, with their kind) and ``fold_decoded`` (one ``decoded`` column ->
a ``FieldProfile``, vectorised: nulls by the column's null count, min/max by
Arrow's ``min_max``, distinct values hashed once per unique value). Rule: the
result equals ``fields.fold_records`` over the same records
(tests/unit/test_analytics_fields.py).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from folio_analytics.fields import FIELDS_MAX, FieldKind, FieldProfile, FieldSpec, ordered, value_bytes


def _kind(data_type: pa.DataType) -> FieldKind:
    if pa.types.is_integer(data_type) or pa.types.is_floating(data_type) or pa.types.is_decimal(data_type):
        return FieldKind.NUMBER
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return FieldKind.STRING
    if pa.types.is_boolean(data_type):
        return FieldKind.BOOLEAN
    return FieldKind.OTHER


def field_specs(struct_type: pa.StructType) -> list[tuple[FieldSpec, list[int]]]:
    """Every leaf of ``struct_type`` (nested records flattened to dotted paths), with
    the child indices that reach it; the first ``FIELDS_MAX`` in schema order."""
    out: list[tuple[FieldSpec, list[int]]] = []

    def walk(t: pa.StructType, prefix: str, indices: list[int]) -> None:
        for i in range(t.num_fields):
            child = t.field(i)
            path = f"{prefix}{child.name}"
            if pa.types.is_struct(child.type):
                walk(child.type, f"{path}.", [*indices, i])
            else:
                out.append((FieldSpec(path, _kind(child.type), len(out)), [*indices, i]))

    walk(struct_type, "", [])
    return out[:FIELDS_MAX]


def fold_decoded(column: pa.ChunkedArray | pa.Array) -> FieldProfile:
    """The field profile of one ``decoded`` column (null rows: did not decode)."""
    profile = FieldProfile(rows=len(column), undecoded=column.null_count)
    for spec, indices in field_specs(column.type):
        stats = profile.stats_for(spec)
        values = pc.struct_field(column, indices)  # null where the field or a parent is null
        stats.nulls = values.null_count
        if spec.kind is FieldKind.OTHER or stats.nulls == len(values):
            continue
        present = pc.drop_null(values)
        for value in pc.unique(present).to_pylist():
            stats.distinct.add(value_bytes(spec.kind, value))
        if spec.kind is FieldKind.NUMBER and pa.types.is_floating(present.type):
            present = pc.filter(present, pc.is_finite(present))
            if len(present) == 0:
                continue
        if pa.types.is_decimal(present.type):
            present = pc.cast(present, pa.float64())
        extremes = pc.min_max(present)
        stats.add_range(
            ordered(spec.kind, extremes["min"].as_py()), ordered(spec.kind, extremes["max"].as_py())
        )
    return profile
