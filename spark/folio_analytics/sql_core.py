"""SQL over topics: naming topics as tables, bounds, and answers as JSON (pure).

Owns: ``rewrite`` (every double-quoted ``"tenant/namespace/topic"`` or
``"persistent://tenant/namespace/topic"`` in a query becomes a temporary view
of that topic read by the ``folio`` data source), ``Limits`` (rows, bytes and
seconds per query, each with a ceiling) and ``to_cells`` (a row's values as
JSON: times ISO-8601, binary base64). Rule: a result past its row bound is
cut and marked ``truncated``; past its byte bound or its time it is an error
that says which bound and its value - never a partial answer passed off as
whole.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from coordination.analytics_run import QUERY_BYTES_MAX as BYTES_MAX
from coordination.analytics_run import QUERY_CHARS_MAX
from coordination.analytics_run import QUERY_ROWS_MAX as ROWS_MAX
from coordination.analytics_run import QUERY_SECONDS_MAX as SECONDS_MAX

_TOPIC = re.compile(r'"((?:persistent://)?[A-Za-z0-9_.=:-]+/[A-Za-z0-9_.=:-]+/[A-Za-z0-9_.=:-]+)"')


class QueryError(Exception):
    """A query Folio will not answer, with the reason shown to the user."""


@dataclass(frozen=True, slots=True)
class Limits:
    max_rows: int = 1000
    max_bytes: int = BYTES_MAX
    timeout_s: int = 30

    def __post_init__(self) -> None:
        if not (1 <= self.max_rows <= ROWS_MAX and 1 <= self.max_bytes <= BYTES_MAX):
            raise QueryError(f"maxRows must be 1..{ROWS_MAX} and maxBytes 1..{BYTES_MAX}")
        if not 1 <= self.timeout_s <= SECONDS_MAX:
            raise QueryError(f"timeoutSeconds must be 1..{SECONDS_MAX}")


def view_name(topic: str) -> str:
    return "folio_topic_" + hashlib.sha1(topic.encode(), usedforsecurity=False).hexdigest()[:16]


def rewrite(query: str) -> tuple[str, dict[str, str]]:
    """The query with topic names replaced by view names, and ``view -> full topic name``."""
    if not query.strip():
        raise QueryError("empty query")
    if len(query) > QUERY_CHARS_MAX:
        raise QueryError(f"query of {len(query)} characters; at most {QUERY_CHARS_MAX}")
    views: dict[str, str] = {}

    def swap(match: re.Match[str]) -> str:
        name = match.group(1)
        full = name if name.startswith("persistent://") else f"persistent://{name}"
        view = view_name(full)
        views[view] = full
        return f"`{view}`"

    return _TOPIC.sub(swap, query), views


def topic_path(full_name: str) -> str:
    """``persistent://t/n/x`` as its etcd key path ``persistent/t/n/x`` (coordination.keys)."""
    return full_name.replace("://", "/", 1)


def missing_topics(names: list[str]) -> QueryError:
    """The error for a query naming topics that do not exist, with what to do."""
    listed = ", ".join(names)
    verb = "does" if len(names) == 1 else "do"
    noun = "topic" if len(names) == 1 else "topics"
    return QueryError(
        f"{noun} {listed} {verb} not exist; create it or check the name "
        '(a table is a topic in double quotes: "tenant/namespace/topic")'
    )


_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\b(?:: (?P<msg>.+))?$")


def failure_reason(text: str) -> str:
    """What a Spark failure says, for the user: when the text carries a Python
    traceback (a Python data source's error arrives as ``[PYTHON_DATA_SOURCE_ERROR]
    ...: Traceback (most recent call last): ...``, its cause on the traceback's last
    unindented exception line, before any ``JVM stacktrace:``), that exception's
    message; else the text's first line (pure)."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "unknown error"
    first = next((i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line), None)
    if first is not None:
        tail = lines[first + 1 :]
        end = next((i for i, line in enumerate(tail) if line.startswith("JVM stacktrace")), len(tail))
        for line in reversed(tail[:end]):
            match = _EXCEPTION_LINE.match(line)
            if match:
                return (match.group("msg") or line).strip()
    return lines[0].strip()


def cell(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dict):
        return {str(k): cell(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [cell(v) for v in value]
    if hasattr(value, "asDict"):
        return {k: cell(v) for k, v in value.asDict().items()}
    return value


def to_cells(row: Any) -> list[Any]:
    return [cell(v) for v in row]
