"""What the ownership keys hold, and the key <-> bundle mapping (pure).

Owns: the JSON records of the ownership protocol - ``GatewayInfo`` (with its
``LoadReport``) at ``keys.gateway(id)``, ``Assignment`` at
``keys.bundle_assignment(…)``, ``UnloadRequest`` at ``keys.bundle_unload(…)`` -
and the owner value at ``keys.bundle(…)`` (the owner's gateway id as UTF-8 text).
Rule: decoding never raises on a well-formed key with a bad value: it returns
None and the caller ignores the key (a malformed record must not stop a
gateway); unknown JSON fields are ignored, so records can grow.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from coordination import keys
from gateway.names import InvalidName
from gateway.ownership.bundles import NamespaceBundle

_Record = TypeVar("_Record")

BUNDLE_RATES_MAX = 10_000  # entries of ``bundleRates`` read from one report; the rest are ignored
BUNDLE_PATH_MAX = 512  # a bundle path is at most 2 names (128) + a range (21) and two '/'


RATE_HISTORY = 0.9  # weight of the past in a smoothed rate (Pulsar's loadBalancerHistoryResourcePercentage)


def smoothed(previous: float, current: float, history: float = RATE_HISTORY) -> float:
    """A rate smoothed over reports: ``history`` of the previous figure plus the rest of
    the current one (a bundle seen for the first time starts from 0). With reports every
    5 s the time constant is ~50 s: load that lasts is seen, a burst barely is."""
    return round(history * previous + (1.0 - history) * current, 3)


@dataclass(frozen=True, slots=True)
class LoadReport:
    """A gateway's load as it reports it (all zero for a gateway that just started).

    ``bundle_rates``: messages/s (in + out) of each bundle the gateway owns, as
    ``(bundle path, rate)`` pairs sorted by path (so equal reports compare equal);
    empty for a gateway that owns nothing or predates the field."""

    topics: int = 0
    sessions: int = 0
    msg_rate_in: float = 0.0
    cpu: float = 0.0  # fraction of one machine, 0..1
    bundle_rates: tuple[tuple[str, float], ...] = ()
    # shown on the dashboard, never weighed: the process's CPU share of the machine over
    # the last report interval, and its resident memory (``cpu`` above is the score's input)
    cpu_used: float = 0.0
    rss_bytes: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "bundle_rates", tuple(sorted(self.bundle_rates)))

    def to_json(self) -> dict[str, Any]:
        return {
            "topics": self.topics,
            "sessions": self.sessions,
            "msgRateIn": self.msg_rate_in,
            "cpu": self.cpu,
            "bundleRates": dict(self.bundle_rates),
            "cpuUsed": self.cpu_used,
            "rssBytes": self.rss_bytes,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoadReport:
        return cls(
            topics=int(data.get("topics", 0)),
            sessions=int(data.get("sessions", 0)),
            msg_rate_in=float(data.get("msgRateIn", 0.0)),
            cpu=float(data.get("cpu", 0.0)),
            bundle_rates=_bundle_rates(data.get("bundleRates")),
            cpu_used=float(data.get("cpuUsed", 0.0)),
            rss_bytes=int(data.get("rssBytes", 0)),
        )


def _bundle_rates(raw: object) -> tuple[tuple[str, float], ...]:
    """``bundleRates`` as read: the first ``BUNDLE_RATES_MAX`` entries, keeping only
    string paths of sane length with finite, non-negative numbers (anything else,
    including a missing or non-object field, is ignored)."""
    if not isinstance(raw, Mapping):
        return ()
    out: dict[str, float] = {}
    for path, rate in itertools.islice(raw.items(), BUNDLE_RATES_MAX):
        if not isinstance(path, str) or not path or len(path) > BUNDLE_PATH_MAX:
            continue
        if isinstance(rate, bool) or not isinstance(rate, int | float):
            continue
        value = float(rate)
        if math.isfinite(value) and value >= 0.0:
            out[path] = value
    return tuple(sorted(out.items()))


def _decoded(value: bytes, build: Callable[[Any], _Record]) -> _Record | None:
    """``build`` applied to the JSON stored in ``value``; None for a malformed record (not
    JSON, not an object, a field missing or of the wrong type), which readers skip."""
    try:
        return build(orjson.loads(value))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None


@dataclass(frozen=True, slots=True)
class GatewayInfo:
    """The registration of a live gateway at ``keys.gateway(gateway_id)``."""

    gateway_id: str
    http_url: str
    load: LoadReport = field(default_factory=LoadReport)
    started_ms: int = 0  # wall clock, ms since the epoch
    version: str = ""  # the Folio release it runs ("" from a gateway that predates the field)
    # it reaches a write quorum of storage nodes (storage_reach.py); True from older gateways
    storage_ok: bool = True

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "id": self.gateway_id,
                "httpUrl": self.http_url,
                "load": self.load.to_json(),
                "startedMs": self.started_ms,
                "version": self.version,
                "storageOk": self.storage_ok,
            }
        )

    @classmethod
    def decode(cls, value: bytes) -> GatewayInfo | None:
        return _decoded(
            value,
            lambda data: cls(
                gateway_id=str(data["id"]),
                http_url=str(data.get("httpUrl", "")),
                load=LoadReport.from_json(data.get("load") or {}),
                started_ms=int(data.get("startedMs", 0)),
                version=str(data.get("version", "")),
                storage_ok=data.get("storageOk", True) is not False,
            ),
        )


@dataclass(frozen=True, slots=True)
class Assignment:
    """The load manager's choice of owner for an unowned (or moving) bundle."""

    gateway_id: str
    at_ms: int

    def encode(self) -> bytes:
        return orjson.dumps({"gateway": self.gateway_id, "atMs": self.at_ms})

    @classmethod
    def decode(cls, value: bytes) -> Assignment | None:
        return _decoded(value, lambda data: cls(str(data["gateway"]), int(data.get("atMs", 0))))


@dataclass(frozen=True, slots=True)
class UnloadRequest:
    """Ask ``from_gateway`` to unload a bundle it owns (ownership key at ``owner_revision``)."""

    from_gateway: str
    owner_revision: int
    to_gateway: str | None
    at_ms: int

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "from": self.from_gateway,
                "ownerRevision": self.owner_revision,
                "to": self.to_gateway,
                "atMs": self.at_ms,
            }
        )

    @classmethod
    def decode(cls, value: bytes) -> UnloadRequest | None:
        return _decoded(
            value,
            lambda data: cls(
                str(data["from"]),
                int(data["ownerRevision"]),
                None if data.get("to") is None else str(data["to"]),
                int(data["atMs"]),
            ),
        )


# ---------------------------------------------------------------- keys


def owner_key(bundle: NamespaceBundle) -> str:
    return keys.bundle(bundle.namespace.tenant, bundle.namespace.namespace, bundle.range.name)


def assignment_key(bundle: NamespaceBundle) -> str:
    return keys.bundle_assignment(bundle.namespace.tenant, bundle.namespace.namespace, bundle.range.name)


def unload_key(bundle: NamespaceBundle) -> str:
    return keys.bundle_unload(bundle.namespace.tenant, bundle.namespace.namespace, bundle.range.name)


def bundle_of_key(prefix: str, key: str) -> NamespaceBundle | None:
    """The bundle a key under ``prefix`` (``keys.BUNDLES``, ``BUNDLE_ASSIGN``, ``BUNDLE_UNLOAD``)
    is about, or None for a key that is not a bundle key."""
    if not key.startswith(prefix):
        return None
    try:
        return NamespaceBundle.parse_path(key[len(prefix) :])
    except InvalidName:
        return None


def gateway_of_key(key: str) -> str | None:
    if not key.startswith(keys.GATEWAYS):
        return None
    gateway_id = key[len(keys.GATEWAYS) :]
    return gateway_id if gateway_id and "/" not in gateway_id else None


def decode_owner(value: bytes) -> str | None:
    try:
        owner = value.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return owner or None
