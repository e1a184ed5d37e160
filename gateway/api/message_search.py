"""Message search: the filters, their parsing, the scan's bounds and the resume position (pure).

Owns: ``SearchFilter`` (key, property ``name=value``, payload text, JSON field
``a.b.c=value``, publish time range) and ``matches`` (does one message pass
every filter given), ``ScanBounds`` (bytes to read and time to spend in one
page, both capped here whatever the request asks: ``SCAN_BYTES_MAX``,
``TIME_LIMIT_MS_MAX``; matches per page ``MATCHES_MAX``) and the resume position
``ledger:entry[:index]`` (``parse_resume`` / ``resume_text``). Rules
(docs/decisions/0016): a filter not given matches everything; a JSON field
compares the value's text (``true``, ``3``, ``"a"`` is ``a``) and a payload that
is not JSON never matches it; ``text`` is a case-sensitive substring of the
payload read as UTF-8; times are publish times in epoch ms, ``after``
inclusive and ``before`` exclusive, and since publish times grow along the log a
scan may stop at the first message at or past ``before``. A bad filter is
``InvalidArgument`` (400) with the form it takes. Nothing here does I/O.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.meta.errors import InvalidArgument
from storage.formats.entry_format import EntryMessage
from storage.formats.positions import Position

SCAN_BYTES_DEFAULT = 8 * 1024 * 1024
SCAN_BYTES_MAX = 64 * 1024 * 1024
TIME_LIMIT_MS_DEFAULT = 2_000
TIME_LIMIT_MS_MAX = 10_000
MATCHES_DEFAULT = 20
MATCHES_MAX = 100
PAYLOAD_PREVIEW_BYTES = 16 * 1024  # of each match's payload in an answer
FILTER_TEXT_MAX = 1024
JSON_PATH_DEPTH_MAX = 16
# the forms below as the OpenAPI document states them (the parsers here say what is wrong;
# FastAPI does not check these patterns, so a refusal keeps its sentence)
PROPERTY_PATTERN = r"^([^=]+=[\s\S]*)?$"
JSON_PATTERN = rf"^([^=.]+(\.[^=.]+){{0,{JSON_PATH_DEPTH_MAX - 1}}}=[\s\S]*)?$"
START_PATTERN = r"^([0-9]{1,18}:[0-9]{1,18}(:[0-9]{1,9})?)?$"


class StoppedBy(enum.StrEnum):
    """Why a page of a search ended."""

    END = "end"  # the log ends here (for now): nothing to resume
    BEFORE = "before"  # a message published at or past ``before``: nothing to resume
    BYTES = "bytes"  # the page's bytes were read: resume at ``next``
    TIME = "time"  # the page's time was spent: resume at ``next``
    MATCHES = "matches"  # the page holds ``limit`` matches: resume at ``next``


@dataclass(frozen=True, slots=True)
class SearchFilter:
    key: str | None = None
    property: tuple[str, str] | None = None
    text: str | None = None
    json_path: tuple[str, ...] | None = None
    json_value: str | None = None
    after_ms: int | None = None
    before_ms: int | None = None

    @classmethod
    def parse(
        cls,
        key: str | None = None,
        prop: str | None = None,
        text: str | None = None,
        json_field: str | None = None,
        after_ms: int | None = None,
        before_ms: int | None = None,
    ) -> SearchFilter:
        """The filter of a request's query; ``InvalidArgument`` says what a bad one should be."""
        for name, value in (("key", key), ("property", prop), ("text", text), ("json", json_field)):
            if value is not None and len(value) > FILTER_TEXT_MAX:
                raise InvalidArgument(f"{name} is longer than {FILTER_TEXT_MAX} characters: shorten it")
        pair = None
        if prop:
            name, sep, value = prop.partition("=")
            if not sep or not name:
                raise InvalidArgument(f"property must be name=value (e.g. region=eu), got {prop[:80]!r}")
            pair = (name, value)
        path, wanted = None, None
        if json_field:
            dotted, sep, wanted = json_field.partition("=")
            parts = tuple(dotted.split("."))
            if not sep or not dotted or any(not p for p in parts) or len(parts) > JSON_PATH_DEPTH_MAX:
                raise InvalidArgument(
                    f"json must be dotted.path=value (e.g. order.status=paid), got {json_field[:80]!r}"
                )
            path = parts
        if after_ms is not None and before_ms is not None and before_ms <= after_ms:
            raise InvalidArgument(f"before ({before_ms}) must be later than after ({after_ms})")
        return cls(key or None, pair, text or None, path, wanted, after_ms, before_ms)

    def describe(self) -> str:
        """The filter as a user would say it (for logs and answers)."""
        parts = []
        if self.key is not None:
            parts.append(f"key={self.key}")
        if self.property is not None:
            parts.append(f"property {self.property[0]}={self.property[1]}")
        if self.text is not None:
            parts.append(f"payload contains {self.text!r}")
        if self.json_path is not None:
            parts.append(f"json {'.'.join(self.json_path)}={self.json_value}")
        if self.after_ms is not None:
            parts.append(f"published at or after {self.after_ms}")
        if self.before_ms is not None:
            parts.append(f"published before {self.before_ms}")
        return ", ".join(parts) or "every message"


def _json_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def _field(payload: bytes, path: tuple[str, ...]) -> tuple[bool, Any]:
    """(found, value) of ``path`` in a JSON payload (list items by index)."""
    try:
        node: Any = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False, None
    for part in path:
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def matches(search: SearchFilter, message: EntryMessage) -> bool:
    """Does ``message`` pass every filter of ``search`` (the cheap ones first)?"""
    published = message.publish_time_ms
    if search.after_ms is not None and published < search.after_ms:
        return False
    if search.before_ms is not None and published >= search.before_ms:
        return False
    if search.key is not None and (
        message.key is None or message.key.decode("utf-8", "replace") != search.key
    ):
        return False
    if search.property is not None:
        name, value = search.property
        if message.properties.get(name) != value:
            return False
    if search.text is not None and search.text not in message.payload.decode("utf-8", "replace"):
        return False
    if search.json_path is not None:
        found, value = _field(message.payload, search.json_path)
        if not found or _json_text(value) != search.json_value:
            return False
    return True


@dataclass(frozen=True, slots=True)
class ScanBounds:
    """One page's bounds, each capped: what a request asks beyond a cap is the cap."""

    max_bytes: int = SCAN_BYTES_DEFAULT
    time_limit_ms: int = TIME_LIMIT_MS_DEFAULT
    limit: int = MATCHES_DEFAULT

    @classmethod
    def capped(cls, max_bytes: int | None, time_limit_ms: int | None, limit: int | None) -> ScanBounds:
        return cls(
            min(max(1, max_bytes or SCAN_BYTES_DEFAULT), SCAN_BYTES_MAX),
            min(max(1, time_limit_ms or TIME_LIMIT_MS_DEFAULT), TIME_LIMIT_MS_MAX),
            min(max(1, limit or MATCHES_DEFAULT), MATCHES_MAX),
        )

    def to_json(self) -> dict[str, int]:
        return {"maxBytes": self.max_bytes, "timeLimitMs": self.time_limit_ms, "limit": self.limit}


def parse_resume(text: str) -> tuple[Position, int]:
    """``ledger:entry`` or ``ledger:entry:index`` -> (entry, first message index to look at)."""
    if not text or not re.fullmatch(START_PATTERN, text):
        raise InvalidArgument(
            f"start must be ledger:entry or ledger:entry:index as a page's next gave it, got {text[:60]!r}"
        )
    numbers = [int(p) for p in text.split(":")]
    return Position(numbers[0], numbers[1]), numbers[2] if len(numbers) == 3 else 0


def resume_text(entry: Position, index: int = 0) -> str:
    return f"{entry.ledger_id}:{entry.entry_id}" + (f":{index}" if index else "")
