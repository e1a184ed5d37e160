"""The Python Data Source ``folio``: Spark's entry point to the connector.

Owns: ``FolioDataSource`` - its name, its fixed schema (rows.py) and the
readers and writers it hands to Spark, each built from options parsed once on
the driver (options.py). Rules: with decode=true the schema gains a ``decoded`` column planned from
the topics' schemas in etcd (schemas.py); filter pushdown is offered only when the session allows it (see
``pushdown_enabled``); nothing here does I/O but that schema read; planning runs in the
readers' ``partitions``, reading and publishing in Spark tasks.
"""

from __future__ import annotations

import sys
from types import FrameType

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from pyspark_folio.decode import DECODED, DecodeSpec
from pyspark_folio.options import READ_OPTIONS, ReadOptions, WriteOptions, check_known
from pyspark_folio.rows import SCHEMA, schema_for

FRAMES_LOOKED_AT = 6


def pushdown_enabled(option: str | None) -> bool:
    """Whether the reader may take filters. Spark refuses a reader with
    ``pushFilters`` unless the session has spark.sql.python.filterPushdown.enabled,
    and tells the source nothing: the option ``pushdown`` (true/false) says it; by
    default (``auto``) the worker that calls ``reader()`` tells: with the flag on,
    pyspark 4 builds the reader in ``data_source_pushdown_filters``, else in
    ``plan_data_source_read``. Pushdown stays off if neither is found, so results
    are right either way."""
    if option is not None and option.lower() != "auto":
        return option.lower() in ("true", "1", "yes")
    frame: FrameType | None = sys._getframe(1)
    for _ in range(FRAMES_LOOKED_AT):
        if frame is None:
            break
        if frame.f_code.co_filename.endswith("data_source_pushdown_filters.py"):
            return True
        frame = frame.f_back
    return False


class FolioDataSource(DataSource):
    """Read and write Folio topics: ``spark.read.format("folio")``."""

    @classmethod
    def name(cls) -> str:
        return "folio"

    def schema(self) -> StructType:
        """The read's columns (Spark asks at ``load()``, for reads only: a misspelt
        read option fails there, before any planning)."""
        options = self.options
        check_known(options, READ_OPTIONS, "reader")
        if options.get("decode", "").strip().lower() not in ("true", "1", "yes"):
            return SCHEMA
        from pyspark_folio.schemas import plan_decode

        return schema_for(plan_decode(ReadOptions.parse(options)))

    def reader(self, schema: StructType) -> DataSourceReader:
        from pyspark_folio.batch import FolioBatchReader, FolioPushdownReader

        options = ReadOptions.parse(self.options)
        decode = _decode_spec(options, schema)
        if pushdown_enabled(self.options.get("pushdown")):
            return FolioPushdownReader(options, decode)
        return FolioBatchReader(options, decode)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from pyspark_folio.stream import FolioStreamReader

        options = ReadOptions.parse(self.options, streaming=True)
        return FolioStreamReader(options, _decode_spec(options, schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pyspark_folio.writer import FolioBatchWriter

        return FolioBatchWriter(WriteOptions.parse(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pyspark_folio.writer import FolioStreamWriter

        return FolioStreamWriter(WriteOptions.parse(self.options), schema, overwrite)


def _decode_spec(options: ReadOptions, schema: StructType) -> DecodeSpec | None:
    """decode=true: the schema planned again for the readers, which must still be the
    one Spark analysed the query with (a version added in between is an error)."""
    if not options.decode:
        return None
    from pyspark_folio.schemas import plan_decode

    spec = plan_decode(options)
    if DECODED not in schema.fieldNames() or schema[DECODED].dataType != spec.struct:
        raise ValueError("decode=true: the topic's schema changed since the query was analysed; run it again")
    return spec
