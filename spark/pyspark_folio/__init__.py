"""Folio's PySpark connector: the Python Data Source ``folio``.

``spark.read.format("folio")`` / ``readStream`` read topics straight from the
storage nodes (planned from etcd metadata, bounded by LAC); ``df.write`` /
``writeStream`` publish through the gateways. Spark registers the source by
itself when a session starts: it looks for installed top-level modules named
``pyspark_*`` that define ``DefaultSource``. ``spark.dataSource.register(
FolioDataSource)`` works too.
"""

from pyspark_folio.source import FolioDataSource

DefaultSource = FolioDataSource

__all__ = ["DefaultSource", "FolioDataSource"]
