"""How a gateway authenticates itself to the other gateways (asyncio shell hook).

Owns: the request hook on the gateway's HTTP client. Rule
(docs/decisions/0009-security-model.md): a request that carries the caller's
credentials (an ``Authorization`` header or a ``token`` query parameter, as a
forwarded request does) goes out unchanged, so the owner re-checks the original
caller; only a request the gateway makes on its own account (partition
fan-out after the caller was authorized for the whole topic, cluster views,
dead letters of a subscription whose consumer was authorized for them)
gets a short-lived cluster token.
"""

from __future__ import annotations

import httpx

from coordination.clock import wall_ms
from gateway.security.guard import SecurityConfig
from gateway.security.tokens import cluster_token


def install(client: httpx.AsyncClient, config: SecurityConfig) -> None:
    rules = config.tokens
    if rules is None or rules.cluster_secret is None:
        return
    secret = rules.cluster_secret

    async def add_cluster_token(request: httpx.Request) -> None:
        if "authorization" in request.headers or "token" in request.url.params:
            return
        request.headers["Authorization"] = f"Bearer {cluster_token(secret, wall_ms() / 1000)}"

    client.event_hooks["request"] = [*client.event_hooks["request"], add_cluster_token]
