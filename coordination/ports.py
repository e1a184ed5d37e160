"""Loopback ports for processes that are told their port before they bind.

Owns: the choice of such ports for the embedded etcd, the benchmarks' local
clusters and the tests' ``folio up`` runs.
Rule: a port is chosen below the kernel's ephemeral range, so no outgoing
connection and no port-0 bind of any process can take it between the choice
and the bind; each process walks that range from its own starting point (drawn
from its PID), so processes choosing at the same time (the test workers) do not
pick the same port; a port is handed out only if it can be bound now, and one
process never hands the same port out twice until it has walked the whole range.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

HOST = "127.0.0.1"
LOWEST = 10000  # below: ports that well-known services and the peers' defaults use
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_lock = threading.Lock()
_next: list[int] = []  # the walk's next offset in this process, once drawn


def _highest() -> int:
    """One below the kernel's ephemeral range (32767 when it cannot be read)."""
    try:
        low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return max(low - 1, LOWEST + 1000)


def port_free(port: int) -> bool:
    """True if loopback ``port`` can be bound now, as a server binds it (SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_ports(count: int, consecutive: bool = False) -> list[int]:
    """``count`` distinct loopback ports free now; ``consecutive``: a run of them."""
    span = _highest() - LOWEST + 1
    with _lock:
        if not _next:
            _next.append((os.getpid() * 7919) % span)
        chosen: list[int] = []
        for _ in range(span):
            port = LOWEST + _next[0]
            _next[0] = (_next[0] + 1) % span
            if consecutive and chosen and port != chosen[-1] + 1:
                chosen = []  # the walk wrapped around
            if port_free(port):
                chosen.append(port)
                if len(chosen) == count:
                    return chosen
            elif consecutive:
                chosen = []
    raise OSError(f"no {count} free loopback ports between {LOWEST} and {LOWEST + span - 1}")
