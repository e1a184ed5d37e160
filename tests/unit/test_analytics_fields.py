"""The per-field profile of JSON/AVRO payloads on plain Python data, and its Arrow fold (no Spark)."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pytest
from folio_analytics.arrow_fields import field_specs, fold_decoded
from folio_analytics.arrow_fold import fold_table
from folio_analytics.fields import FIELDS_MAX, STRING_CHARS, FieldKind, FieldProfile, fold_records
from folio_analytics.profile import Profile
from folio_analytics.results import RESULT_BYTES, STATE_BYTES, topic_results

from tests.unit.test_analytics_arrow import table_of
from tests.unit.test_analytics_core import messages

pytestmark = pytest.mark.unit

STRUCT = pa.struct(
    [
        ("name", pa.string()),
        ("age", pa.int32()),
        ("score", pa.float64()),
        ("vip", pa.bool_()),
        ("price", pa.decimal128(9, 2)),
        ("address", pa.struct([("city", pa.string()), ("zip", pa.int64())])),
        ("tags", pa.list_(pa.string())),
    ]
)


CITIES = ["Oslo", "Lima", "Pune"]


def records(n: int, seed: int) -> list[dict[str, Any] | None]:
    rng = random.Random(seed)
    out: list[dict[str, Any] | None] = []
    for i in range(n):
        if i % 23 == 0:
            out.append(None)  # did not decode
            continue
        out.append(
            {
                "name": f"user-{rng.randrange(200)}" + ("z" * 100 if i % 50 == 1 else ""),
                "age": rng.randrange(18, 90),
                "score": None if i % 7 == 0 else rng.choice([rng.uniform(-5, 5), float("nan"), 2.5]),
                "vip": rng.random() < 0.1,
                "price": Decimal(rng.randrange(0, 10_000)) / 100,
                "address": None if i % 11 == 0 else {"city": rng.choice(CITIES), "zip": None},
                "tags": ["a"] if i % 2 else None,
            }
        )
    return out


def specs() -> list[Any]:
    return [spec for spec, _ in field_specs(STRUCT)]


def test_fields_are_dotted_leaves_in_schema_order() -> None:
    got = [(s.path, s.kind, s.pos) for s in specs()]
    assert got == [
        ("name", FieldKind.STRING, 0),
        ("age", FieldKind.NUMBER, 1),
        ("score", FieldKind.NUMBER, 2),
        ("vip", FieldKind.BOOLEAN, 3),
        ("price", FieldKind.NUMBER, 4),
        ("address.city", FieldKind.STRING, 5),
        ("address.zip", FieldKind.NUMBER, 6),
        ("tags", FieldKind.OTHER, 7),
    ]


def test_profile_values_are_exact_where_they_can_be() -> None:
    rows = records(1000, 1)
    view = fold_records(rows, specs()).view()
    by = {f["path"]: f for f in view["fields"]}
    decoded = [r for r in rows if r is not None]
    assert (view["messages"], view["undecoded"]) == (1000, 1000 - len(decoded))
    ages = [r["age"] for r in decoded]
    assert (by["age"]["min"], by["age"]["max"]) == (min(ages), max(ages))
    assert by["age"]["nulls"] == 1000 - len(decoded)
    cities = {r["address"]["city"] for r in decoded if r["address"]}
    assert (by["address.city"]["min"], by["address.city"]["max"], by["address.city"]["distinct"]) == (
        min(cities),
        max(cities),
        len(cities),
    )
    assert by["address.zip"]["nullFraction"] == 1.0 and by["address.zip"]["min"] is None
    scores = [r["score"] for r in decoded if r["score"] is not None and r["score"] == r["score"]]
    assert (by["score"]["min"], by["score"]["max"]) == (min(scores), max(scores))  # NaN left out
    assert len(by["name"]["max"]) <= STRING_CHARS
    names = {r["name"] for r in decoded}
    assert abs(by["name"]["distinct"] - len(names)) <= 0.1 * len(names)
    assert by["tags"]["distinct"] is None
    assert by["tags"]["nulls"] == sum(1 for r in rows if not (r and r["tags"]))


@pytest.mark.parametrize("seed", [2, 3])
def test_fold_of_two_halves_equals_the_full_fold(seed: int) -> None:
    rows = records(800, seed)
    cut = random.Random(seed).randrange(1, 799)
    left, right = fold_records(rows[:cut], specs()), fold_records(rows[cut:], specs())
    left.merge(right)
    assert left.to_json() == fold_records(rows, specs()).to_json()
    again = FieldProfile.from_json(orjson.loads(orjson.dumps(left.to_json())))
    assert again.to_json() == left.to_json()


def test_a_field_a_later_schema_added_counts_earlier_rows_as_null() -> None:
    old = fold_records([{"a": 1}] * 5, [s for s in specs() if s.path == "age"])
    new = fold_records([{"age": 3, "name": "x"}] * 2, [s for s in specs() if s.path in ("age", "name")])
    old.merge(new)
    assert old.fields["name"].nulls == 5 and old.fields["age"].nulls == 5 and old.rows == 7


def test_arrow_fold_equals_the_reference_fold() -> None:
    rows = records(1500, 4)
    column = pa.chunked_array([pa.array(rows[:700], STRUCT), pa.array(rows[700:], STRUCT)])
    assert fold_decoded(column).to_json() == fold_records(rows, specs()).to_json()
    plain = messages(len(rows), 5)
    table = table_of(plain, "persistent://t/n/json", 0).append_column("decoded", column)
    profile = fold_table(table)[("persistent://t/n/json", 0)]
    assert profile.fields is not None and profile.fields.to_json() == fold_records(rows, specs()).to_json()
    back = Profile.from_json(orjson.loads(orjson.dumps(profile.to_json())))
    assert back.to_json() == profile.to_json()
    assert topic_results(back, 0, {}, {}, [])["fields"]["messages"] == len(rows)


def test_many_fields_are_bounded_in_state_and_results() -> None:
    wide = pa.struct([(f"f{i:03d}", pa.string()) for i in range(200)])
    rows = [{f"f{i:03d}": f"{'v' * 500}{n}-{i}" for i in range(200)} for n in range(300)]
    fields = fold_decoded(pa.array(rows, wide))
    assert len(fields.fields) == FIELDS_MAX and "f000" in fields.fields and "f199" not in fields.fields
    profile = Profile()
    profile.fields = fields
    assert len(orjson.dumps(profile.to_json())) <= STATE_BYTES
    assert len(orjson.dumps(topic_results(profile, 0, {}, {}, []))) <= RESULT_BYTES
