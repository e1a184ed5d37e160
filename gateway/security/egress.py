"""Where a gateway's webhooks may connect: the request-forgery guard (asyncio shell).

Owns: ``refusal`` (pure: the rule a target address breaks, if any), ``Egress``
(the addresses a host resolves to, checked against the rules and the cluster's
own ports) and ``GuardedBackend``, the network backend of the webhook HTTP
client. Rules (docs/decisions/0009-security-model.md "Egress",
docs/decisions/0017-open-mode-cluster-secret.md):
- a URL is checked twice: when a webhook is stored (400 naming the rule) and when
  each connection is opened, on the addresses the name resolves to then; the
  connection goes to the address that was checked, so a DNS name that resolves
  (or rebinds) to a forbidden address later does not pass either;
- never: a port of the cluster itself (etcd's client and peer ports, any storage
  node's wire and metrics port, any gateway's HTTP port and this gateway's
  ``--metrics-address``: no publish loops, no admin calls with a gateway's
  hands; on loopback any address with such a port), a link-local
  address (169.254.0.0/16, fe80::/10: cloud metadata services), even when
  allow-listed;
- loopback is allowed in open mode (a developer's own endpoint on this machine)
  and, like private, multicast, reserved and unspecified addresses, refused with
  tokens on unless ``--webhook-hosts`` names the host; numeric host forms
  (``2130706433``, ``0x7f.1``) are judged by the address they resolve to;
- a send-time refusal raises ``httpcore.ConnectError`` whose text starts with
  ``REFUSED``; what a webhook's ``lastError`` shows is only "refused", "failed"
  or the HTTP status (``outcome``), never anything that tells ports or hosts apart.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

import httpcore

REFUSED = "REFUSED"
RESOLVE_TIMEOUT_S = 5.0
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class _EtcdMember(Protocol):
    @property
    def peer_urls(self) -> tuple[str, ...]: ...


@runtime_checkable
class EtcdMembers(Protocol):
    """A metadata store that can list etcd's members (the etcd store; not the in-memory one)."""

    async def cluster_members(self) -> Iterable[_EtcdMember]: ...


async def etcd_peer_addresses(store: object) -> list[str]:
    """The host:port of every etcd member's peer URL (none when the store is not etcd or
    etcd does not answer now: its client endpoints are refused anyway)."""
    if not isinstance(store, EtcdMembers):
        return []
    try:
        members = await store.cluster_members()
    except Exception:  # etcd away: the check runs again at send time
        return []
    return [urlsplit(url).netloc for member in members for url in member.peer_urls if "//" in url]


def _address(ip: str) -> Address:
    address = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def forbidden_address(ip: str) -> bool:
    """Whether ``ip`` is anything but a public unicast address (pure)."""
    address = _address(ip)
    return (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    )


def refusal(
    ip: str, port: int, members: set[tuple[str, int]], *, listed: bool, loopback_ok: bool
) -> str | None:
    """Which rule a connection to ``ip``:``port`` breaks, as a sentence, or None (pure).

    ``members``: the (address, port) pairs of the cluster's own services;
    ``listed``: the host is on the allow-list; ``loopback_ok``: open mode."""
    address = _address(ip)
    local = address.is_loopback or address.is_unspecified
    if (str(address), port) in members or (local and port in {p for _, p in members}):
        return (
            f"{ip}:{port} is a port of this cluster (etcd, a storage node or a gateway);"
            " webhooks never post to the cluster itself"
        )
    if address.is_link_local:
        return (
            f"{ip} is a link-local address (where cloud metadata services such as"
            " 169.254.169.254 answer); webhooks never post there"
        )
    if listed or (loopback_ok and address.is_loopback):
        return None
    if forbidden_address(ip):
        where = "a loopback" if address.is_loopback else "not a public"
        return f"{ip} is {where} address; name the host in the gateways' --webhook-hosts to allow it"
    return None


def outcome(exc: BaseException) -> str:
    """A webhook's ``lastError`` for a failed attempt that got no HTTP answer."""
    return "refused" if str(exc).startswith(REFUSED) else "failed"


class Egress:
    """The rules of one gateway's webhook targets, with the cluster's current members."""

    def __init__(
        self,
        allowed_hosts: Iterable[str],
        members: Callable[[], Awaitable[Iterable[str]]],
        *,
        loopback_ok: bool = False,
    ) -> None:
        self._allowed = {h.lower() for h in allowed_hosts}
        self._members = members  # "host:port" of every etcd endpoint, gateway and storage node port
        self.loopback_ok = loopback_ok

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
            except (OSError, UnicodeError):
                continue
            found |= {(str(_address(str(info[4][0]))), int(port)) for info in infos}
        return found

    async def check(self, host: str, port: int) -> tuple[list[str], str | None]:
        """The addresses ``host`` resolves to now, and the rule the first forbidden one
        breaks (None: all may be connected to). Raises ``OSError`` when it does not resolve
        (a name no resolver can take, such as a label over 63 characters, included)."""
        name = host.lower().strip("[]")
        listed = name in self._allowed or f"{name}:{port}" in self._allowed
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(name, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_S
            )
        except UnicodeError as exc:  # the IDNA codec refuses the name before any lookup
            raise OSError(f"{host!r} is not a valid host name ({exc})") from exc
        addresses = [str(info[4][0]) for info in infos]
        members = await self._member_addresses()
        for ip in addresses:
            rule = refusal(ip, port, members, listed=listed, loopback_ok=self.loopback_ok)
            if rule is not None:
                return addresses, rule
        return addresses, None


class GuardedBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, egress: Egress) -> None:
        self._egress = egress
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses, rule = await self._egress.check(host, port)
        except (OSError, TimeoutError) as exc:
            raise httpcore.ConnectError("failed to resolve") from exc
        if rule is not None:
            raise httpcore.ConnectError(f"{REFUSED}: {rule}")
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
