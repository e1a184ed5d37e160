"""Which refused WebSocket handshakes are logged: once per client per interval (pure).

Owns: ``RefusalLog``, the rule that keeps an anonymous client from flooding
the gateway's log with refused upgrades. Rule: the first refusal of a client
(its address, whatever its port) in ``interval_ms`` is logged, and says how
many of that client's refusals since its last logged one were not; the
others are only counted. At most ``max_clients`` addresses are remembered
(the oldest is forgotten first), so the state is bounded in size whatever
the number of clients.
"""

from __future__ import annotations

from dataclasses import dataclass, field

INTERVAL_MS = 60_000  # a client's refusals are logged at most once a minute
MAX_CLIENTS = 4096  # addresses remembered (about 100 bytes each)


@dataclass
class _Seen:
    logged_ms: int
    quiet: int = 0  # refusals not logged since ``logged_ms``


@dataclass
class RefusalLog:
    interval_ms: int = INTERVAL_MS
    max_clients: int = MAX_CLIENTS
    _clients: dict[str, _Seen] = field(default_factory=dict)

    def admit(self, client: str, now_ms: int) -> int | None:
        """None when this refusal is only counted; else the number of this client's
        refusals that were not logged since its last logged one (log this one)."""
        seen = self._clients.get(client)
        if seen is not None and now_ms - seen.logged_ms < self.interval_ms:
            seen.quiet += 1
            return None
        quiet = 0 if seen is None else seen.quiet
        self._clients.pop(client, None)
        if len(self._clients) >= self.max_clients:
            del self._clients[next(iter(self._clients))]  # the longest not logged
        self._clients[client] = _Seen(now_ms)
        return quiet

    def __len__(self) -> int:
        return len(self._clients)
