"""How many connections a gateway holds at once, from its open-file limit (pure).

Owns: ``soft_limit_target`` (the soft ``RLIMIT_NOFILE`` a gateway asks for at
start: its hard limit, at most ``FILES_CEILING``) and ``connection_cap`` (the
client connections it keeps open: the number asked for with
``--max-connections``, at most the open-file limit less ``reserve``). Rule:
client connections never take the last open files. Every connection costs one
file from the moment it is accepted, before its head is read, so a limit on
connections equal to the limit on files lets idle or slow-header connections
take every file, and then a legitimate request is reset at accept; the files
kept back (a tenth of the limit, at least ``RESERVE_MIN``) are for what the
gateway opens itself: etcd, storage nodes, peer gateways, webhooks, logs, and
the one accept that lets a new connection push out an idle one
(docs/decisions/0009-security-model.md).
"""

from __future__ import annotations

FILES_CEILING = 1 << 20  # Linux's default nr_open: a soft limit above it is refused
RESERVE_MIN = 256  # open files kept for what the gateway opens itself
RESERVE_DIVISOR = 10  # ... or a tenth of the limit, whichever is more


def soft_limit_target(soft: int, hard: int, unlimited: int) -> int:
    """The soft open-file limit to ask for: the hard limit (``unlimited``: the
    platform's RLIM_INFINITY, then ``FILES_CEILING``), never less than ``soft`` (pure)."""
    ceiling = FILES_CEILING if hard == unlimited else hard
    if soft == unlimited:
        return soft
    return max(soft, ceiling)


def reserve(files: int) -> int:
    """Open files kept back from client connections under a limit of ``files`` (pure)."""
    return max(RESERVE_MIN, files // RESERVE_DIVISOR)


def connection_cap(requested: int, files: int) -> int:
    """The client connections a gateway keeps open: ``requested``, at most ``files``
    less ``reserve(files)``, at least 1 (pure)."""
    return max(1, min(requested, files - reserve(files)))
