"""The settings of a push subscription (webhook), as users send and read them (pure).

Owns: ``WebhookConfig`` and its JSON shape (``parse_webhook``, ``to_json``,
``public_json``). Rules (ADR 0006): unknown fields, a URL that is not absolute
http(s), a host outside the gateway's allow-list and values out of range are
400 with the field named; header values are stored (etcd) but never shown back
(``public_json`` masks them); every number has a bound.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from gateway.names import PARTITION_SUFFIX, RESERVED_TOPICS, TOPIC_MAX
from gateway.protocol.errors import BadRequest
from gateway.subscription_type import SubscriptionType

INITIAL_POSITIONS = ("Latest", "Earliest")
URL_MAX = 2048
HEADERS_MAX = 16
HEADER_VALUE_MAX = 4096
RESERVED_HEADERS = frozenset({"content-type", "content-length", "host", "transfer-encoding", "connection"})


def _any_case(word: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in word)  # letters and "-"


# the same patterns are the OpenAPI schema's (admin_models.WebhookSettings), so schema and parser agree
_PORT = r"(?::(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}))?"
URL_PATTERN = rf"^https?://[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*{_PORT}(?:[/?#][\x21-\x7e]*)?$"  # no IPv6 literal
_RESERVED = "|".join(_any_case(h) for h in sorted(RESERVED_HEADERS))
HEADER_NAME_PATTERN = rf"^(?!(?:{_RESERVED})$)[A-Za-z0-9!#$%&'*+.^_`|~-]{{1,128}}$"
HEADER_VALUE_PATTERN = rf"^[\x20-\x7e]{{0,{HEADER_VALUE_MAX}}}$"
# a topic of the webhook's namespace: a valid local topic name, not a partition, not reserved
_NOT_PARTITION_OR_RESERVED = rf"(?!.*{PARTITION_SUFFIX})(?!(?:{'|'.join(RESERVED_TOPICS)})$)"
DEAD_LETTER_PATTERN = rf"^{_NOT_PARTITION_OR_RESERVED}[A-Za-z0-9_][A-Za-z0-9_.=:\-]{{0,{TOPIC_MAX - 1}}}$"
_URL = re.compile(URL_PATTERN)
_HEADER_NAME = re.compile(HEADER_NAME_PATTERN)
_HEADER_VALUE = re.compile(HEADER_VALUE_PATTERN)
_DEAD_LETTER = re.compile(DEAD_LETTER_PATTERN)
BOUNDS: dict[str, tuple[int, int, int]] = {  # field: (default, min, max)
    "maxMessages": (100, 1, 1000),
    "maxInFlight": (1, 1, 16),
    "timeoutMs": (10_000, 100, 60_000),
    "minBackoffMs": (100, 10, 60_000),
    "maxBackoffMs": (60_000, 10, 600_000),
    "maxAttempts": (0, 0, 1000),  # 0: retry forever
}


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    url: str
    subscriptionType: SubscriptionType = SubscriptionType.SHARED  # the JSON field names, as users write them
    initialPosition: str = "Latest"
    maxMessages: int = 100
    maxInFlight: int = 1
    timeoutMs: int = 10_000
    minBackoffMs: int = 100
    maxBackoffMs: int = 60_000
    maxAttempts: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    deadLetterTopic: str | None = None  # a topic of the same namespace; None: <topic>-<sub>-DLQ

    def to_json(self) -> dict[str, Any]:
        """Everything, header values included (what etcd stores)."""
        return asdict(self)

    def public_json(self) -> dict[str, Any]:
        """What an admin GET shows: header values masked."""
        return {**asdict(self), "headers": dict.fromkeys(self.headers, "***")}


def host_allowed(url: str, allowed: tuple[str, ...]) -> bool:
    """Whether ``url``'s host (``host`` or ``host:port`` entries) is on the allow-list
    (an empty list allows every host)."""
    if not allowed:
        return True
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    with_port = f"{host}:{parts.port}" if parts.port is not None else host
    return host in allowed or with_port in allowed


def _check_url(value: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or not value:
        raise BadRequest("url: must be a non-empty string")
    if len(value) > URL_MAX:
        raise BadRequest(f"url: longer than {URL_MAX} characters")
    if not _URL.match(value):
        raise BadRequest(
            "url: must be an absolute http:// or https:// URL with a host name or address, "
            "a port from 1 to 65535 if any, printable ASCII only (percent-encode the rest)"
        )
    try:
        host = urlsplit(value).hostname
    except ValueError as exc:
        raise BadRequest(f"url: {exc}") from None
    if not host_allowed(value, allowed):
        raise BadRequest(f"url: host {host!r} is not on this cluster's webhook allow-list")
    return value


def _check_headers(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest("headers: must be an object of header name -> value")
    if len(value) > HEADERS_MAX:
        raise BadRequest(f"headers: at most {HEADERS_MAX}")
    out: dict[str, str] = {}
    for name, text in value.items():
        if not _HEADER_NAME.match(name):
            raise BadRequest(f"headers: {name!r} is not a header name Folio may set")
        if not isinstance(text, str) or not _HEADER_VALUE.match(text):
            raise BadRequest(
                f"headers.{name}: printable ASCII, at most {HEADER_VALUE_MAX} characters, no control chars"
            )
        out[name] = text
    return out


def parse_webhook(value: Any, allowed_hosts: tuple[str, ...] = ()) -> WebhookConfig:
    """Validate a webhook body (JSON object) into a ``WebhookConfig``."""
    if not isinstance(value, dict):
        raise BadRequest('body: must be a JSON object such as {"url": "http://host:port/path"}')
    known = set(WebhookConfig.__dataclass_fields__)
    unknown = sorted(set(value) - known)
    if unknown:
        raise BadRequest(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    numbers: dict[str, int] = {}
    for name, (default, low, high) in BOUNDS.items():
        number = value.get(name, default)
        if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
            raise BadRequest(f"{name}: must be a whole number from {low} to {high}")
        numbers[name] = number
    sub_type = SubscriptionType.stored(value.get("subscriptionType", SubscriptionType.SHARED))
    if sub_type is None:
        raise BadRequest(f"subscriptionType: one of {', '.join(SubscriptionType)}")
    initial = value.get("initialPosition", "Latest")
    if initial not in INITIAL_POSITIONS:
        raise BadRequest(f"initialPosition: one of {', '.join(INITIAL_POSITIONS)}")
    dead_letter = value.get("deadLetterTopic")
    if dead_letter is not None and not (isinstance(dead_letter, str) and _DEAD_LETTER.fullmatch(dead_letter)):
        raise BadRequest(
            f"deadLetterTopic: a topic name of the webhook's namespace (letters, digits, _ . = : -, "
            f"at most {TOPIC_MAX} characters, not a partition's name), or null"
        )
    return WebhookConfig(
        url=_check_url(value.get("url"), allowed_hosts),
        deadLetterTopic=dead_letter,
        subscriptionType=sub_type,
        initialPosition=initial,
        headers=_check_headers(value.get("headers")),
        **numbers,
    )
