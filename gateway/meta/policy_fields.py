"""Checks of single JSON fields in policy bodies (pure).

Owns: the small validators the policy parsers (``gateway.meta.policies``,
``gateway.meta.persistence``) share: objects, bounded integers, booleans,
choices, the JSON of a stored record, and the short description of an offending
value.
Rule: a field with a wrong type or an out-of-range value is an
``InvalidPolicy`` (400) whose message names the field and shows the value
(cut to 60 characters); ``null`` is handled by the callers (it means
"default" in Pulsar's bodies), never silently here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.meta.errors import InvalidPolicy

INT64_MAX = 2**63 - 1


def json_object(value: Any, what: str) -> Mapping[str, Any]:
    """``value`` if it is a JSON object."""
    if not isinstance(value, Mapping):
        raise InvalidPolicy(f"{what} must be a JSON object, got {kind_of(value)}")
    return value


def stored_json(data: bytes, what: str) -> Any:
    """The JSON value of a record read back from etcd; ``what`` names it in the error."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidPolicy(f"{what} is not JSON: {exc}") from exc


def int_field(value: Any, what: str, low: int, high: int = INT64_MAX) -> int:
    """``value`` if it is an integer (not a boolean) in ``low..high``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidPolicy(f"{what} must be an integer, got {kind_of(value)}")
    if not low <= value <= high:
        raise InvalidPolicy(f"{what} must be between {low} and {high}, got {value}")
    return value


def optional_int(value: Any, what: str, low: int = 0) -> int | None:
    """None for ``null``, else ``int_field``."""
    return None if value is None else int_field(value, what, low)


def number_field(value: Any, what: str, low: float, high: float) -> float:
    """``value`` as a float if it is a JSON number (not a boolean) in ``low..high``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidPolicy(f"{what} must be a number, got {kind_of(value)}")
    if not low <= value <= high:  # NaN fails both comparisons
        raise InvalidPolicy(f"{what} must be between {low} and {high}, got {value}")
    return float(value)


def bool_field(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidPolicy(f"{what} must be true or false, got {kind_of(value)}")
    return value


def choice_field(value: Any, what: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InvalidPolicy(f"{what} must be one of {', '.join(choices)}, got {short_repr(value)}")
    return str(value)


def or_default(value: Any, default: Any) -> Any:
    return default if value is None else value


def kind_of(value: Any) -> str:
    """``null``, or the value's type and (short) repr, for error messages."""
    return "null" if value is None else f"{type(value).__name__} {short_repr(value)}"


def short_repr(value: Any) -> str:
    return repr(value)[:60]
