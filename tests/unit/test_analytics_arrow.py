"""The Arrow fold the Spark job runs equals the plain-Python reference fold (no Spark)."""

from __future__ import annotations

import numpy as np
import orjson
import pyarrow as pa
import pytest
from folio_analytics.arrow_fold import cells_of, fold_partials, fold_table
from folio_analytics.job import entries_per_task
from folio_analytics.profile import Profile, fold_messages
from folio_analytics.sketches import cell_of
from pyspark_folio.plan import ENTRIES_PER_RANGE

from tests.unit.test_analytics_core import messages

pytestmark = pytest.mark.unit


def table_of(rows: list, topic: str, partition: int) -> pa.Table:
    return pa.table(
        {
            "topic": pa.array([topic] * len(rows), pa.string()),
            "partition": pa.array([partition] * len(rows), pa.int32()),
            "ledger_id": pa.array([m.ledger_id for m in rows], pa.int64()),
            "entry_id": pa.array([m.entry_id for m in rows], pa.int64()),
            "key": pa.array([m.key for m in rows], pa.string()),
            "size": pa.array([m.size for m in rows], pa.int64()),
            "publish_ms": pa.array([m.publish_ms for m in rows], pa.int64()),
            "event_ms": pa.array([m.event_ms for m in rows], pa.int64()),
            "producer": pa.array([m.producer for m in rows], pa.string()),
        }
    )


def test_vectorised_cells_equal_the_scalar_rule() -> None:
    values = np.array([0, 1, 15, 16, 17, 31, 32, 100, 1023, 1024, 5_000_000, 2**40 + 3], np.int64)
    assert cells_of(values).tolist() == [cell_of(int(v)) for v in values]


def test_arrow_fold_equals_the_reference_fold() -> None:
    a, b = messages(3000, 11), messages(500, 12, ledgers=1)
    table = pa.concat_tables([table_of(a, "persistent://t/n/x", 0), table_of(b, "persistent://t/n/y", -1)])
    folded = fold_table(table)
    assert folded[("persistent://t/n/x", 0)].to_json() == fold_messages(a).to_json()
    assert folded[("persistent://t/n/y", -1)].to_json() == fold_messages(b).to_json()
    batches = table.combine_chunks().to_batches(max_chunksize=700)
    [out] = list(fold_partials(iter(batches)))
    got = {
        (t, p): Profile.from_json(orjson.loads(raw)).to_json()
        for t, p, raw in zip(*(out.column(i).to_pylist() for i in range(3)), strict=True)
    }
    assert got == {k: v.to_json() for k, v in folded.items()}


def test_a_read_is_cut_into_about_two_tasks_per_core() -> None:
    assert (entries_per_task(10, 2), entries_per_task(0, 2), entries_per_task(10**9, 2)) == (
        3,
        1,
        ENTRIES_PER_RANGE,
    )
