"""Topic names as the connector meets them: full names and etcd key paths (pure).

Owns: ``TopicPartition`` (one partition's full name, its base topic and index)
and the two conversions the connector needs, ``persistent://t/ns/x`` <->
``persistent/t/ns/x`` (the ``<topic path>`` of coordination.keys). Rule
(docs/decisions/0005): a partition of a partitioned topic is the topic
``<base>-partition-<n>``; a non-partitioned topic has partition -1. Names come
from etcd, where the gateway validated them; a user's ``topic`` option that is
not ``<domain>://<tenant>/<namespace>/<topic>`` is a ``ValueError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PARTITION_SUFFIX = "-partition-"
NOT_PARTITIONED = -1
_FULL = re.compile(r"^(persistent|non-persistent)://([^/]+)/([^/]+)/([^/]+)$")
_SUFFIX = re.compile(r"^(.+)-partition-(\d+)$")


def path_of(full_name: str) -> str:
    """``persistent://t/ns/x`` -> ``persistent/t/ns/x``."""
    match = _FULL.match(full_name)
    if match is None:
        raise ValueError(f"topic {full_name!r} is not <domain>://<tenant>/<namespace>/<topic>")
    return "/".join(match.groups())


def full_name_of(path: str) -> str:
    """``persistent/t/ns/x`` -> ``persistent://t/ns/x``."""
    domain, rest = path.split("/", 1)
    return f"{domain}://{rest}"


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """One log: ``name`` is the full name of the topic that has the ledgers (a
    partition's own name for a partitioned topic), ``topic`` the name users
    publish to, ``partition`` its index (-1 when not partitioned)."""

    name: str
    topic: str
    partition: int

    @classmethod
    def from_path(cls, path: str, partitioned_bases: frozenset[str] = frozenset()) -> TopicPartition:
        """The log at etcd ``path``; it is a partition only if its base is listed in
        ``partitioned_bases`` (paths), since ``x-partition-1`` may be a plain name."""
        name = full_name_of(path)
        match = _SUFFIX.match(path)
        if match is not None and match.group(1) in partitioned_bases:
            return cls(name, full_name_of(match.group(1)), int(match.group(2)))
        return cls(name, name, NOT_PARTITIONED)

    @property
    def path(self) -> str:
        return path_of(self.name)
