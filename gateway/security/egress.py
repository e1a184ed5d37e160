"""Where a gateway's webhooks may connect: the request-forgery guard (asyncio shell).

Owns: ``forbidden_address`` (pure) and ``GuardedBackend``, the network backend of
the webhook HTTP client. Rules (docs/decisions/0009-security-model.md):
- the check is made when the connection is opened, on the addresses the name
  resolves to then, and the connection goes to the address that was checked,
  so a DNS name that resolves (or rebinds) to a forbidden address does not pass;
- loopback, private, link-local, multicast, reserved and unspecified addresses
  are refused unless the operator's allow-list (``--webhook-hosts``) names the
  host; a member of the cluster (any gateway's or storage node's address and
  port) is refused always, so a webhook cannot drive Folio's own APIs (no
  publish loops, no admin calls with the gateway's hands);
- a refusal raises ``httpcore.ConnectError`` whose text starts with ``REFUSED``;
  what a webhook's ``lastError`` shows is only "refused", "failed" or the HTTP
  status (``outcome``), never anything that tells ports or hosts apart.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import httpcore

REFUSED = "REFUSED"


def forbidden_address(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    )


def outcome(exc: BaseException) -> str:
    """A webhook's ``lastError`` for a failed attempt that got no HTTP answer."""
    return "refused" if str(exc).startswith(REFUSED) else "failed"


class GuardedBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, allowed_hosts: Iterable[str], members: Callable[[], Awaitable[Iterable[str]]]) -> None:
        self._allowed = {h.lower() for h in allowed_hosts}
        self._members = members  # "host:port" of every gateway and storage node
        self._inner = httpcore.AnyIOBackend()

    async def _member_addresses(self) -> set[tuple[str, int]]:
        loop = asyncio.get_running_loop()
        found: set[tuple[str, int]] = set()
        for member in await self._members():
            host, _, port = member.rpartition(":")
            host = host.strip("[]")
            if not port.isdigit():
                continue
            try:
                infos = await loop.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
            except OSError:
                continue
            found |= {(str(info[4][0]), int(port)) for info in infos}
        return found

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        name = host.lower().strip("[]")
        listed = name in self._allowed or f"{name}:{port}" in self._allowed
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore.ConnectError("failed to resolve") from exc
        addresses = [str(info[4][0]) for info in infos]
        members = await self._member_addresses()
        for ip in addresses:
            if (ip, port) in members:
                raise httpcore.ConnectError(f"{REFUSED}: a member of this cluster")
            if not listed and forbidden_address(ip):
                raise httpcore.ConnectError(f"{REFUSED}: not a public address")
        return await self._inner.connect_tcp(
            addresses[0], port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError(f"{REFUSED}: unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def guard_client(client: Any, backend: GuardedBackend) -> None:
    """Make ``client`` (an ``httpx.AsyncClient`` without proxies) connect through ``backend``."""
    client._transport._pool._network_backend = backend
