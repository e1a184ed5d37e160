"""The ledger client: quorum writes with ensemble change, open-with-recovery,
LAC-bounded reads. Used by gateways, the auditor and Spark.

Public names: ``LedgerClient`` (create/open/delete/close), ``LedgerWriter``,
``LedgerReader``, ``WriterConfig``, ``WriterFull``, ``ConnectionConfig``.
"""

from storage.client.api import LedgerClient
from storage.client.connection import ConnectionConfig
from storage.client.reader import LedgerReader
from storage.client.write_effects import WriterConfig
from storage.client.writer import LedgerWriter, WriterFull

__all__ = ["ConnectionConfig", "LedgerClient", "LedgerReader", "LedgerWriter", "WriterConfig", "WriterFull"]
