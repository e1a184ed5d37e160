"""Storage: replicated ledgers on storage nodes (``storage.node``) and the
ledger client (``storage.client``) used by gateways, the auditor and Spark."""
