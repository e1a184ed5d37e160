"""The client's connections, one per storage node (node_id == "host:port").

Owns: the node_id -> NodeConnection map and its bound. Rule: one connection per
node shared by every ledger of this client (requests are pipelined on it); at
most ``connections_max`` connections; when full, an idle connection is closed
to make room, and if none is idle the request is refused (NodeUnavailable).
"""

from __future__ import annotations

import asyncio

from coordination.clock import Clock, SystemClock
from storage.client.connection import ConnectionConfig, NodeConnection
from storage.errors import NodeUnavailable
from storage.ports import ASYNCIO_NETWORK, Network
from storage.types import NodeId

CONNECTIONS_MAX = 1024


class ConnectionPool:
    def __init__(
        self,
        config: ConnectionConfig | None = None,
        connections_max: int = CONNECTIONS_MAX,
        clock: Clock | None = None,
        network: Network = ASYNCIO_NETWORK,
    ) -> None:
        self.config = config or ConnectionConfig()
        self.clock: Clock = clock or SystemClock()
        self.network = network
        self.connections_max = connections_max
        self._connections: dict[NodeId, NodeConnection] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    def get(self, node_id: NodeId) -> NodeConnection:
        connection = self._connections.get(node_id)
        if connection is not None:
            return connection
        if self._closed:
            raise NodeUnavailable("the connection pool is closed")
        if len(self._connections) >= self.connections_max:
            self._evict_idle()
        connection = NodeConnection(node_id, self.config, self.clock, self.network)
        self._connections[node_id] = connection
        return connection

    def _evict_idle(self) -> None:
        for node_id, connection in self._connections.items():
            if connection.idle:
                del self._connections[node_id]
                task = asyncio.get_running_loop().create_task(connection.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
                return
        raise NodeUnavailable(f"all {self.connections_max} connections are busy")

    def __len__(self) -> int:
        return len(self._connections)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._connections

    async def close(self) -> None:
        self._closed = True
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            await connection.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
