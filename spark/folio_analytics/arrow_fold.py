"""The statistics fold over Arrow record batches, run inside Spark's Python workers.

Owns: ``COLUMNS`` (the projection of the connector's rows the fold needs),
``fold_table`` (one Arrow table -> a ``Profile`` per topic partition, grouped
with Arrow's vectorised group-by instead of a Python loop per message) and
``fold_partials`` (the ``mapInArrow`` function: a Spark partition's batches in,
one row per topic partition out, its profile as JSON); a table with the
``decoded`` column of a ``decode=true`` read also folds its per-field profile
(``arrow_fields``). Rule: the result equals
``profile.fold_messages`` over the same rows (tests/unit/test_analytics_arrow.py),
so the pure fold defines what the job computes; data never passes through the
driver, only these partial profiles do.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from folio_analytics.arrow_fields import fold_decoded
from folio_analytics.profile import MINUTE_MS, Bounds, Profile
from folio_analytics.sketches import SMALL, SUB

# name -> the Spark SQL expression over the connector's schema that gives it
COLUMNS = {
    "topic": "topic",
    "partition": "partition",
    "ledger_id": "ledger_id",
    "entry_id": "entry_id",
    "key": "key",
    "size": "CAST(octet_length(value) AS BIGINT)",
    "publish_ms": "unix_millis(publish_time)",
    "event_ms": "unix_millis(event_time)",
    "producer": "producer",
}
DECODED = "decoded"  # the connector's struct column of decode=true reads, folded when present
PARTIAL_SCHEMA = "topic string, partition int, profile binary"


def cells_of(values: np.ndarray) -> np.ndarray:
    """``sketches.cell_of`` of every value (int64 array, values >= 0)."""
    v = values.astype(np.int64)
    big = np.maximum(v, SMALL)
    exp = (np.frexp(big.astype(np.float64))[1] - 1).astype(np.int64)
    sub = (big >> (exp - 3)) & (SUB - 1)
    return np.where(v < SMALL, np.maximum(v, 0), SMALL + (exp - 4) * SUB + sub)


def _cell_counts(values: np.ndarray) -> dict[int, int]:
    cells, counts = np.unique(cells_of(values), return_counts=True)
    return dict(zip(cells.tolist(), counts.tolist(), strict=True))


def _fold_one(profile: Profile, t: pa.Table) -> None:
    sizes = t.column("size").to_numpy(zero_copy_only=False).astype(np.int64)
    publish = t.column("publish_ms").to_numpy(zero_copy_only=False).astype(np.int64)
    profile.add_totals(len(sizes), int(sizes.sum()), int(publish.min()), int(publish.max()))
    profile.sizes.add_counts(_cell_counts(sizes), int(sizes.min()), int(sizes.max()))
    keys = t.group_by("key").aggregate([([], "count_all")])
    profile.add_keys(
        dict(zip(keys.column("key").to_pylist(), keys.column("count_all").to_pylist(), strict=True))
    )
    producers = t.group_by("producer").aggregate([([], "count_all"), ("size", "sum")])
    profile.add_producers(
        zip(
            producers.column("producer").to_pylist(),
            producers.column("count_all").to_pylist(),
            producers.column("size_sum").to_pylist(),
            strict=True,
        )
    )
    entries = t.group_by(["ledger_id", "entry_id"]).aggregate(
        [([], "count_all"), ("size", "sum"), ("publish_ms", "min")]
    )
    ledger_ids = entries.column("ledger_id").to_numpy()
    for ledger_id in np.unique(ledger_ids).tolist():
        mine = entries.filter(pc.equal(entries.column("ledger_id"), ledger_id))
        profile.add_entries(
            ledger_id,
            zip(
                mine.column("entry_id").to_pylist(),
                mine.column("count_all").to_pylist(),
                mine.column("size_sum").to_pylist(),
                mine.column("publish_ms_min").to_pylist(),
                strict=True,
            ),
        )
    minutes = pa.table({"m": publish - publish % MINUTE_MS, "size": sizes, "p": publish})
    series = minutes.group_by("m").aggregate([([], "count_all"), ("size", "sum"), ("p", "min")])
    profile.series.add_many(
        zip(
            series.column("m").to_pylist(),
            series.column("count_all").to_pylist(),
            series.column("size_sum").to_pylist(),
            series.column("p_min").to_pylist(),
            strict=True,
        )
    )
    event = t.column("event_ms")
    if event.null_count < len(event):
        has = pc.is_valid(event)
        lags = pc.subtract(pc.filter(t.column("publish_ms"), has), pc.filter(event, has)).to_numpy()
        negative = lags < 0
        profile.negative_lags += int(negative.sum())
        kept = lags[~negative]
        if len(kept):
            profile.lags.add_counts(_cell_counts(kept), int(kept.min()), int(kept.max()))
    if DECODED in t.column_names:
        profile.fields = fold_decoded(t.column(DECODED))


def fold_table(table: pa.Table, bounds: Bounds | None = None) -> dict[tuple[str, int], Profile]:
    """A profile per (topic, partition) of ``table`` (columns: ``COLUMNS``)."""
    out: dict[tuple[str, int], Profile] = {}
    if table.num_rows == 0:
        return out
    groups = table.group_by(["topic", "partition"]).aggregate([])
    for topic, partition in zip(
        groups.column("topic").to_pylist(), groups.column("partition").to_pylist(), strict=True
    ):
        if groups.num_rows == 1:
            part = table
        else:
            mask = pc.and_(
                pc.equal(table.column("topic"), topic), pc.equal(table.column("partition"), partition)
            )
            part = table.filter(mask)
        profile = out[(topic, partition)] = Profile(bounds or Bounds())
        _fold_one(profile, part)
    return out


def fold_partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``: fold every batch of a Spark partition, then yield the profiles."""
    folded: dict[tuple[str, int], Profile] = {}
    for batch in batches:
        for group, profile in fold_table(pa.Table.from_batches([batch])).items():
            have = folded.get(group)
            if have is None:
                folded[group] = profile
            else:
                have.merge(profile)
    if folded:
        yield pa.RecordBatch.from_pydict(
            {
                "topic": [t for t, _ in folded],
                "partition": [p for _, p in folded],
                "profile": [orjson.dumps(p.to_json()) for p in folded.values()],
            },
            schema=pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("profile", pa.binary())]),
        )
