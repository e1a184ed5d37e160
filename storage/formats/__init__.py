"""The formats of a topic's log that its writer and its direct readers share.

The gateway writes a topic's entries and ledger list; Spark reads them straight
from etcd and the storage nodes without importing the gateway. Both use this
package: ``entry_format`` (the message batch inside an entry,
docs/decisions/0004), ``message_id`` (ids as Pulsar clients see them),
``positions`` (log positions) and ``log_record`` (the ledger list stored under
``coordination.keys.managed_log``, docs/decisions/0005). Errors are in
``errors``. Nothing here does I/O or imports above ``storage``.
"""
