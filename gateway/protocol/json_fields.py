"""Strict, typed access to the fields of decoded JSON frames and bodies (pure).

Owns: JSON loading (``load_object``), the field getters shared by the
WebSocket frame parsers and the REST body parsers, base64 payload decoding and
message-id parsing. Rules:
- JSON is parsed with orjson; a syntax error or a top level that is not an
  object is ``FrameError`` ws_code 3 (docs/compatibility.md §1.5.2, §1.6.3).
- types are strict (no Jackson-style coercion): a string field must be a JSON
  string, an integer field a JSON integer - or a whole-number float such as
  ``3178.0`` (JSON Schema's integers, which Jackson reads too), within 2^53 so
  the float spells it exactly; never a fraction or a boolean. The one
  coercion kept is Jackson's for a Java ``long`` (``get_long``: publish
  fields such as ``sequenceId``, ``deliverAt``, ``deliverAfterMs``): a JSON
  string holding a decimal integer (``"1000"``, sign allowed, no spaces) is
  read as that integer, since Pulsar clients send them so - and a
  ``properties`` field an object of strings; violations are ws_code 3. Strings
  must be valid Unicode (orjson lets ``"\\ud800"`` through; it could not be
  echoed or stored), so lone surrogates are refused too.
- base64 payloads decode like Java's basic decoder (§1.5.1): standard
  alphabet, no whitespace, padding optional; failures are ws_code 7 with
  ``"Invalid Base64 message-payload error=..."``. The decoded size is computed
  before decoding, so an oversized payload is ``PayloadTooLarge`` without the
  memory cost of decoding it.
- message ids are base64 ``MessageIdData`` or the string ``L:E[:P[:B]]``
  (§1.8); garbage is ws_code 3, with a sentence listing the accepted forms
  (``message_id_refused``; a near miss of ``earliest``/``latest`` is named).
The REST parsers reuse these and turn a ``FrameError`` into ``BadRequest``.
"""

from __future__ import annotations

import binascii
import difflib
import re
from collections.abc import Mapping
from typing import TypeVar

import orjson
import pybase64

from gateway.protocol.errors import (
    WS_FAILED_TO_DESERIALIZE,
    WS_PAYLOAD_ENCODING_ERROR,
    FrameError,
    PayloadTooLarge,
)
from storage.formats.errors import MessageIdError
from storage.formats.message_id import INT64_MAX, MessageId

PROPERTIES_MAX = 1024  # properties per message
ID_CHARS_SHOWN = 80  # how much of a bad value an error message repeats
WHOLE_FLOAT_MAX = 2**53  # beyond this a float does not spell its integer exactly
_DECIMAL = re.compile(r"[+-]?[0-9]{1,19}")  # Long.parseLong's text (range checked after)

JsonObject = dict[str, object]
_T = TypeVar("_T")


def load_object(data: str | bytes) -> JsonObject:
    """The JSON object in ``data``; ``FrameError(3)`` for bad JSON or another top-level type."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise FrameError(WS_FAILED_TO_DESERIALIZE, str(exc)) from exc
    if not isinstance(value, dict):
        raise FrameError(WS_FAILED_TO_DESERIALIZE, f"expected a JSON object, got {_json_type(value)}")
    return value


def is_text(value: str) -> bool:
    """True when ``value`` is valid Unicode (no lone surrogates), i.e. encodable as UTF-8."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def get_str(obj: Mapping[str, object], name: str, context: str | None = None) -> str | None:
    """Field ``name`` as a string, ``None`` when absent or null."""
    value = _typed(obj, name, str, "a string", context)
    if value is not None and not is_text(value):
        raise FrameError(WS_FAILED_TO_DESERIALIZE, f"{name} is not valid Unicode", context)
    return value


def as_int(value: object) -> int | None:
    """``value`` as an integer: a JSON integer, or a whole-number float within 2^53
    (``3178.0``); None for anything else (fractions, booleans, strings...)."""
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer() and abs(value) <= WHOLE_FLOAT_MAX:
        return int(value)
    return None


def get_int(
    obj: Mapping[str, object],
    name: str,
    low: int = -(2**63),
    high: int = INT64_MAX,
    context: str | None = None,
) -> int | None:
    """Field ``name`` as an integer in ``[low, high]``, ``None`` when absent or null."""
    raw = obj.get(name)
    if raw is None:
        return None
    value = as_int(raw)
    if value is None:
        raise _wrong_type(name, "an integer", raw, context)
    return _in_range(name, value, low, high, context)


def get_long(
    obj: Mapping[str, object],
    name: str,
    low: int = -(2**63),
    high: int = INT64_MAX,
    context: str | None = None,
) -> int | None:
    """``get_int`` that also reads a JSON string holding a decimal integer (``"1000"``),
    as Jackson does for a ``long``; any other string is ``FrameError(3)``."""
    raw = obj.get(name)
    if type(raw) is not str:
        return get_int(obj, name, low, high, context)
    if not _DECIMAL.fullmatch(raw):
        shown = raw if len(raw) <= ID_CHARS_SHOWN else raw[:ID_CHARS_SHOWN] + "..."
        raise FrameError(
            WS_FAILED_TO_DESERIALIZE, f"{name} must be an integer, got the string {shown!r}", context
        )
    return _in_range(name, int(raw), low, high, context)


def get_bool(obj: Mapping[str, object], name: str, context: str | None = None) -> bool | None:
    """Field ``name`` as a boolean, ``None`` when absent or null."""
    return _typed(obj, name, bool, "a boolean", context)


def _typed(obj: Mapping[str, object], name: str, kind: type[_T], what: str, context: str | None) -> _T | None:
    """Field ``name`` when it is a ``kind`` (``what`` names one in the error), ``None`` when
    absent or null; ``FrameError(3)`` for another JSON type."""
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, kind):
        raise _wrong_type(name, what, value, context)
    return value


def _wrong_type(name: str, what: str, value: object, context: str | None) -> FrameError:
    return FrameError(WS_FAILED_TO_DESERIALIZE, f"{name} must be {what}, got {_json_type(value)}", context)


def _in_range(name: str, value: int, low: int, high: int, context: str | None) -> int:
    """``value`` when within ``[low, high]``, else ``FrameError(3)``."""
    if not low <= value <= high:
        raise FrameError(WS_FAILED_TO_DESERIALIZE, f"{name} {value} is outside [{low}, {high}]", context)
    return value


def get_properties(
    obj: Mapping[str, object], name: str = "properties", context: str | None = None
) -> dict[str, str]:
    """Field ``name`` as a string -> string map (``{}`` when absent or null)."""
    value = obj.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FrameError(
            WS_FAILED_TO_DESERIALIZE, f"{name} must be an object, got {_json_type(value)}", context
        )
    if len(value) > PROPERTIES_MAX:
        raise FrameError(
            WS_FAILED_TO_DESERIALIZE, f"{name} has {len(value)} entries, more than {PROPERTIES_MAX}", context
        )
    result: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(item, str):
            raise FrameError(
                WS_FAILED_TO_DESERIALIZE,
                f"{name}[{key[:ID_CHARS_SHOWN]!r}] must be a string, got {_json_type(item)}",
                context,
            )
        if not is_text(key) or not is_text(item):
            raise FrameError(WS_FAILED_TO_DESERIALIZE, f"{name} contains invalid Unicode", context)
        result[key] = item
    return result


def base64_decoded_size(text: str) -> int:
    """The number of bytes ``text`` decodes to, if it is valid base64."""
    unpadded = len(text.rstrip("="))
    return unpadded * 3 // 4


def decode_base64_payload(text: str, max_payload: int, context: str | None = None) -> bytes:
    """Payload bytes of a base64 string (Java basic decoder rules, padding optional)."""
    if not len(text) & 3 and len(text) // 4 * 3 <= max_payload:  # the usual, padded text: one call
        try:
            return pybase64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            pass  # the checks below say what is wrong
    size = base64_decoded_size(text)
    if size > max_payload:
        raise PayloadTooLarge(size, max_payload, context)
    unpadded = text.rstrip("=")
    padding = len(text) - len(unpadded)
    if padding > 2 or (padding and len(text) % 4):
        raise _bad_base64("bad padding", context)
    if len(unpadded) % 4 == 1:
        raise _bad_base64("truncated input (length is 1 more than a multiple of 4)", context)
    try:
        return pybase64.b64decode(unpadded + "=" * (-len(unpadded) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _bad_base64(str(exc), context) from exc


SENTINEL_IDS = ("earliest", "latest")
BASE64_ID_EXAMPLE = "CAMQADAA"  # MessageId(3, 0).to_base64()


def message_id_refused(name: str, text: str, detail: str, forms: str) -> str:
    """The sentence for a value that is not a message id: the value, why, the accepted
    ``forms``, and ``earliest``/``latest`` when the value is a near miss of one (pure)."""
    shown = text if len(text) <= ID_CHARS_SHOWN else text[:ID_CHARS_SHOWN] + "..."
    near = difflib.get_close_matches(text.lower(), SENTINEL_IDS, n=1, cutoff=0.7)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return f"Invalid {name} {shown!r}: not a valid message id ({detail}){hint}; use {forms}"


def message_id_forms(*, sentinels: bool, strings: bool) -> str:
    """The accepted forms of a message id, as a sentence's end (pure)."""
    forms = [*SENTINEL_IDS] if sentinels else []
    forms.append(f"a base64 message id as delivered (e.g. {BASE64_ID_EXAMPLE})")
    if strings:
        forms.append("ledger:entry[:partition[:batchIndex]] (e.g. 3:0)")
    return ", ".join(forms[:-1]) + " or " + forms[-1] if len(forms) > 1 else forms[0]


def parse_message_id(value: object, name: str = "messageId", *, sentinels: bool = False) -> MessageId:
    """A message id given as base64 ``MessageIdData`` or as ``L:E[:P[:B]]`` (``sentinels``:
    the caller also takes ``earliest``/``latest``, and its error says so)."""
    if not isinstance(value, str):
        raise FrameError(WS_FAILED_TO_DESERIALIZE, f"{name} must be a string, got {_json_type(value)}")
    try:
        return MessageId.parse(value) if ":" in value else MessageId.from_base64(value)
    except MessageIdError as exc:
        forms = message_id_forms(sentinels=sentinels, strings=True)
        raise FrameError(WS_FAILED_TO_DESERIALIZE, message_id_refused(name, value, str(exc), forms)) from exc


def get_message_ids(obj: Mapping[str, object], name: str, limit: int) -> list[MessageId]:
    """Field ``name``: a non-empty array of at most ``limit`` message ids."""
    value = obj.get(name)
    if not isinstance(value, list) or not value:
        raise FrameError(WS_FAILED_TO_DESERIALIZE, f"{name} must be a non-empty array of message ids")
    if len(value) > limit:
        raise FrameError(WS_FAILED_TO_DESERIALIZE, f"{name} has {len(value)} ids, more than {limit}")
    return [parse_message_id(item, f"{name}[{index}]") for index, item in enumerate(value)]


def _bad_base64(detail: str, context: str | None) -> FrameError:
    return FrameError(WS_PAYLOAD_ENCODING_ERROR, f"Invalid Base64 message-payload error={detail}", context)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
