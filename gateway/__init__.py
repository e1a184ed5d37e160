"""Gateway: stateless FastAPI processes that own topics through etcd leases,
persist messages through the ledger client, and deliver them over WebSocket
and HTTP under Exclusive, Failover, Shared and Key_Shared subscriptions."""
