"""Many entries decoded at once into columns, without a Python object per message (pure).

Owns: ``EntryColumns`` (every message of a list of entries as numpy columns:
the fixed head fields, the optional fields with presence masks, and the byte
ranges of the text and payload fields in one joined buffer) and its decoder
``decode_entries``. Rule: the layout is docs/decisions/0004-entry-batch-format.md
as ``entry_format`` writes it - this module reads it with that module's own
head struct, flags and bounds, and walks "message k of every entry" in one
numpy step, so its cost grows with the largest message count of an entry, not
with the number of messages; an entry of equal-sized plain messages (no
optional field, no property) needs no walk: its message starts are
arithmetic, checked on every head at once. Structure is checked as strictly as
``decode_entry`` (version, count, flags, every length against the end of its
entry, repeated property names, trailing bytes); any defect is re-decoded by
``decode_entry`` so the same ``CorruptEntry`` is raised. Text fields are
returned as byte ranges: whoever turns them into strings checks their UTF-8
and calls ``raise_corrupt`` when one is not.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from storage.formats.entry_format import (
    _HAS_DELIVER_AT,
    _HAS_EVENT_TIME,
    _HAS_KEY,
    _HAS_ORDERING_KEY,
    _HAS_SCHEMA_VERSION,
    _KNOWN_FLAGS,
    _MESSAGE_HEAD,
    _PROPERTY_HEAD,
    ENTRY_BYTES_MAX,
    ENTRY_HEADER_BYTES,
    FORMAT_VERSION,
    MESSAGES_PER_ENTRY_MAX,
    decode_entry,
)
from storage.formats.errors import CorruptEntry

Ints = npt.NDArray[np.int64]
Flags = npt.NDArray[np.bool_]

_NUMPY_CODES = {"B": "u1", "H": ">u2", "I": ">u4", "q": ">i8"}
_HEAD_NAMES = ("flags", "properties", "publish", "sequence", "name_len", "payload_len")
_HEAD = np.dtype(
    [(name, _NUMPY_CODES[code]) for name, code in zip(_HEAD_NAMES, _MESSAGE_HEAD.format[1:], strict=True)]
)
assert _HEAD.itemsize == _MESSAGE_HEAD.size
_FLAGS_AND_PROPERTIES = struct.calcsize(_MESSAGE_HEAD.format[:3])  # a head's flags and property count
_PROPERTY_NAME_LEN, _PROPERTY_VALUE_LEN = (_NUMPY_CODES[code] for code in _PROPERTY_HEAD.format[1:])
_PADDED_NAME_MAX = 64  # repeated property names are found on padded rows up to this length


@dataclass(frozen=True, slots=True)
class EntryColumns:
    """Every message of the entries, in entry then batch-index order. Ranges
    (``*_start`` / ``*_len``) index ``data``, the entries joined (and padded); an absent key
    has the empty range at its message's start and ``has_key`` False; an absent
    time or version is 0 with its mask False. Properties of message m are
    ``property_*[property_first[m] : property_first[m] + property_count[m]]``."""

    data: bytes
    count: Ints  # per entry: its message count
    entry: Ints  # per message: the index of its entry in the input
    batch_index: Ints
    publish_time_ms: Ints
    sequence_id: Ints
    event_time_ms: Ints
    has_event_time: Flags
    deliver_at_ms: Ints
    has_deliver_at: Flags
    key_start: Ints
    key_len: Ints
    has_key: Flags
    ordering_key_start: Ints
    ordering_key_len: Ints
    has_ordering_key: Flags
    schema_version: Ints
    has_schema_version: Flags
    name_start: Ints
    name_len: Ints
    payload_start: Ints
    payload_len: Ints
    property_first: Ints
    property_count: Ints
    property_name_start: Ints
    property_name_len: Ints
    property_value_start: Ints
    property_value_len: Ints


class _Defect(Exception):
    """A structural defect found by the vectorised walk (re-decoded per message)."""


def raise_corrupt(payloads: Sequence[bytes], reason: str) -> None:
    """Raise the ``CorruptEntry`` that ``decode_entry`` raises for the first bad
    entry of ``payloads`` (or one naming ``reason`` if each decodes alone)."""
    for payload in payloads:
        decode_entry(payload)
    raise CorruptEntry(reason)


def decode_entries(payloads: Sequence[bytes]) -> EntryColumns:
    """The messages of ``payloads`` (entries) as columns; ``CorruptEntry`` on any defect."""
    try:
        return _decode(payloads)
    except _Defect as exc:
        raise_corrupt(payloads, str(exc))
        raise AssertionError("unreachable") from exc


def _decode(payloads: Sequence[bytes]) -> EntryColumns:
    data = b"".join([*payloads, bytes(_HEAD.itemsize)])  # padded: a head can be read anywhere
    buf = np.frombuffer(data, np.uint8)
    heads = np.lib.stride_tricks.sliding_window_view(buf, _HEAD.itemsize)  # row p: buf[p : p + head]
    sizes = np.fromiter(map(len, payloads), np.int64, len(payloads))
    ends = np.cumsum(sizes)
    starts = ends - sizes
    if ((sizes < ENTRY_HEADER_BYTES) | (sizes > ENTRY_BYTES_MAX)).any():
        raise _Defect("entry size out of bounds")
    counts = buf[starts + 1].astype(np.int64) << 8 | buf[starts + 2]
    if (buf[starts] != FORMAT_VERSION).any() or ((counts < 1) | (counts > MESSAGES_PER_ENTRY_MAX)).any():
        raise _Defect("bad entry header")
    first_row = np.cumsum(counts) - counts
    total = int(counts.sum())
    message_start = np.empty(total, np.int64)
    uniform = _uniform_entries(heads, starts, sizes, counts, first_row, message_start)
    # the other entries: walk message k of every entry at once; entries by count,
    # longest first, so the entries that still have a message k are a prefix
    walked = np.flatnonzero(~uniform)
    order = walked[np.argsort(-counts[walked], kind="stable")]
    sorted_counts = counts[order]
    limit, rows = ends[order], first_row[order]
    position = starts[order] + ENTRY_HEADER_BYTES
    final = np.empty(len(order), np.int64)
    steps = int(sorted_counts[0]) if len(order) else 0
    alive_at = np.searchsorted(-sorted_counts, -np.arange(steps + 1), side="left").tolist()
    for k in range(steps):
        alive, done = alive_at[k], alive_at[k + 1]  # entries with a message k; with no message k + 1
        position = position[:alive]
        message_start[rows[:alive] + k] = position
        position = _next(heads, buf, position, limit[:alive])
        final[done:alive] = position[done:]
    if (final != limit).any():
        raise _Defect("trailing bytes after the last message")
    fields = _fields(buf, message_start, np.repeat(ends, counts))
    entry = np.repeat(np.arange(len(payloads), dtype=np.int64), counts)
    _check_property_names(buf, fields)
    return EntryColumns(
        data=data,
        count=counts,
        entry=entry,
        batch_index=np.arange(total, dtype=np.int64) - first_row[entry],
        publish_time_ms=fields.publish,
        sequence_id=fields.sequence,
        event_time_ms=fields.event_time,
        has_event_time=fields.has_event_time,
        deliver_at_ms=fields.deliver_at,
        has_deliver_at=fields.has_deliver_at,
        key_start=fields.key_start,
        key_len=fields.key_len,
        has_key=fields.has_key,
        ordering_key_start=fields.ordering_start,
        ordering_key_len=fields.ordering_len,
        has_ordering_key=fields.has_ordering,
        schema_version=fields.schema_version,
        has_schema_version=fields.has_schema_version,
        name_start=fields.name_start,
        name_len=fields.name_len,
        payload_start=fields.end - fields.payload_len,
        payload_len=fields.payload_len,
        property_first=np.cumsum(fields.property_count) - fields.property_count,
        property_count=fields.property_count,
        property_name_start=fields.property_name_start,
        property_name_len=fields.property_name_len,
        property_value_start=fields.property_value_start,
        property_value_len=fields.property_value_len,
    )


@dataclass(frozen=True, slots=True)
class _Fields:
    publish: Ints
    sequence: Ints
    event_time: Ints
    has_event_time: Flags
    deliver_at: Ints
    has_deliver_at: Flags
    key_start: Ints
    key_len: Ints
    has_key: Flags
    ordering_start: Ints
    ordering_len: Ints
    has_ordering: Flags
    schema_version: Ints
    has_schema_version: Flags
    name_start: Ints
    name_len: Ints
    property_count: Ints
    property_name_start: Ints
    property_name_len: Ints
    property_value_start: Ints
    property_value_len: Ints
    payload_len: Ints
    end: Ints  # where the next message starts


def _read(buf: npt.NDArray[np.uint8], at: Ints, limit: Ints, code: str) -> Ints:
    """The big-endian integers of numpy type ``code`` at offsets ``at`` (each must end by ``limit``)."""
    width = np.dtype(code).itemsize
    if (at + width > limit).any():
        raise _Defect("a field runs past the end of its entry")
    raw = buf[at[:, None] + np.arange(width)]
    return raw.view(code).reshape(len(at)).astype(np.int64)


def _uniform_entries(
    heads: npt.NDArray[np.uint8],
    starts: Ints,
    sizes: Ints,
    counts: Ints,
    first_row: Ints,
    message_start: Ints,
) -> Flags:
    """Entries whose messages all have the size of their first one and neither an
    optional field nor a property (a producer of fixed-size messages): their
    message starts are arithmetic, checked on every head at once, and written to
    ``message_start``. The others are walked."""
    first = starts + ENTRY_HEADER_BYTES
    head0 = heads[np.minimum(first, len(heads) - 1)]
    fields0 = head0.view(_HEAD)[:, 0]
    stride = fields0["name_len"] + fields0["payload_len"] + np.int64(_HEAD.itemsize)
    uniform = ~head0[:, :_FLAGS_AND_PROPERTIES].any(axis=1) & (counts * stride + ENTRY_HEADER_BYTES == sizes)
    chosen = np.flatnonzero(uniform)
    if not len(chosen):
        return uniform
    n = counts[chosen]
    offsets = np.cumsum(n) - n
    within = np.arange(int(n.sum())) - np.repeat(offsets, n)
    at = np.repeat(first[chosen], n) + within * np.repeat(stride[chosen], n)
    raw = heads[at]
    fields = raw.view(_HEAD)[:, 0]
    same = (
        ~raw[:, :_FLAGS_AND_PROPERTIES].any(axis=1)
        & (fields["name_len"] == np.repeat(fields0["name_len"][chosen], n))
        & (fields["payload_len"] == np.repeat(fields0["payload_len"][chosen], n))
    )
    message_start[np.repeat(first_row[chosen], n) + within] = at
    uniform[chosen] = np.logical_and.reduceat(same, offsets)
    return uniform


def _next(heads: npt.NDArray[np.uint8], buf: npt.NDArray[np.uint8], at: Ints, limit: Ints) -> Ints:
    """Where the messages starting at ``at`` end: the usual message (no optional
    field, no property) in a few numpy steps. Reads are clipped to ``buf``, not
    checked: a message that runs past its entry makes the walk miss the entry's
    end, and ``_fields`` checks every length of every message afterwards."""
    raw = heads[np.minimum(at, len(heads) - 1)]
    if raw[:, :_FLAGS_AND_PROPERTIES].any():
        return _fields(buf, at, limit).end
    head = raw.view(_HEAD)[:, 0]
    return at + head["name_len"] + head["payload_len"] + _HEAD.itemsize


def _fields(buf: npt.NDArray[np.uint8], at: Ints, limit: Ints) -> _Fields:
    """The fields of the messages starting at ``at`` (``limit``: each one's entry end)."""
    n = len(at)
    if (at + _HEAD.itemsize > limit).any():
        raise _Defect("message head runs past the end of its entry")
    head = np.lib.stride_tricks.sliding_window_view(buf, _HEAD.itemsize)[at].view(_HEAD)[:, 0]
    flags = head["flags"].astype(np.int64)
    cursor = at + _HEAD.itemsize
    zeros = np.zeros(n, np.int64)
    no = np.zeros(n, np.bool_)
    optional: dict[int, tuple[Ints, Ints, Flags]] = {}
    if flags.any():
        if (flags & ~_KNOWN_FLAGS).any():
            raise _Defect("unknown message flags")
        for flag in (_HAS_EVENT_TIME, _HAS_DELIVER_AT, _HAS_KEY, _HAS_ORDERING_KEY, _HAS_SCHEMA_VERSION):
            has = (flags & flag) != 0
            if not has.any():
                continue
            which = np.flatnonzero(has)
            start, length = zeros.copy(), zeros.copy()
            if flag in (_HAS_KEY, _HAS_ORDERING_KEY):
                length[which] = _read(buf, cursor[which], limit[which], ">u4")
                start = cursor + 4 * has
                start[~has] = at[~has]
                cursor = cursor + has * (4 + length)
                if (cursor > limit).any():
                    raise _Defect("key runs past the end of its entry")
            else:
                start[which] = _read(buf, cursor[which], limit[which], ">i8")  # the value itself
                cursor = cursor + 8 * has
            optional[flag] = (start, length, has)
    name_start = cursor
    name_len = head["name_len"].astype(np.int64)
    cursor = cursor + name_len
    if (cursor > limit).any():
        raise _Defect("producer name runs past the end of its entry")
    property_count = head["properties"].astype(np.int64)
    names_start = names_len = values_start = values_len = np.zeros(0, np.int64)
    if property_count.any():
        first = np.cumsum(property_count) - property_count
        slots = int(property_count.sum())
        names_start, names_len = np.empty(slots, np.int64), np.empty(slots, np.int64)
        values_start, values_len = np.empty(slots, np.int64), np.empty(slots, np.int64)
        for j in range(int(property_count.max())):
            which = np.flatnonzero(property_count > j)
            here = cursor[which]
            name_len_j = _read(buf, here, limit[which], _PROPERTY_NAME_LEN)
            value_len_j = _read(buf, here + 2, limit[which], _PROPERTY_VALUE_LEN)
            slot = first[which] + j
            names_start[slot] = here + _PROPERTY_HEAD.size
            names_len[slot] = name_len_j
            values_start[slot] = here + _PROPERTY_HEAD.size + name_len_j
            values_len[slot] = value_len_j
            cursor[which] = here + _PROPERTY_HEAD.size + name_len_j + value_len_j
            if (cursor > limit).any():
                raise _Defect("property runs past the end of its entry")
    payload_len = head["payload_len"].astype(np.int64)
    end = cursor + payload_len
    if (end > limit).any():
        raise _Defect("payload runs past the end of its entry")
    empty = (zeros, zeros, no)
    event, _, has_event = optional.get(_HAS_EVENT_TIME, empty)
    deliver, _, has_deliver = optional.get(_HAS_DELIVER_AT, empty)
    key_start, key_len, has_key = optional.get(_HAS_KEY, (at, zeros, no))
    ordering_start, ordering_len, has_ordering = optional.get(_HAS_ORDERING_KEY, (at, zeros, no))
    version, _, has_version = optional.get(_HAS_SCHEMA_VERSION, empty)
    return _Fields(
        publish=head["publish"].astype(np.int64),
        sequence=head["sequence"].astype(np.int64),
        event_time=event,
        has_event_time=has_event,
        deliver_at=deliver,
        has_deliver_at=has_deliver,
        key_start=key_start,
        key_len=key_len,
        has_key=has_key,
        ordering_start=ordering_start,
        ordering_len=ordering_len,
        has_ordering=has_ordering,
        schema_version=version,
        has_schema_version=has_version,
        name_start=name_start,
        name_len=name_len,
        property_count=property_count,
        property_name_start=names_start,
        property_name_len=names_len,
        property_value_start=values_start,
        property_value_len=values_len,
        payload_len=payload_len,
        end=end,
    )


def _check_property_names(buf: npt.NDArray[np.uint8], fields: _Fields) -> None:
    """A name repeated within a message is corruption (as ``decode_entry`` says)."""
    counts = fields.property_count
    if not (counts > 1).any():
        return
    owner = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    shared = counts[owner] > 1
    starts, lengths, owner = (
        fields.property_name_start[shared],
        fields.property_name_len[shared],
        owner[shared],
    )
    if int(lengths.max(initial=0)) > _PADDED_NAME_MAX:
        seen = set()
        data = buf.tobytes()
        for message, start, length in zip(owner.tolist(), starts.tolist(), lengths.tolist(), strict=True):
            name = (message, data[start : start + length])
            if name in seen:
                raise _Defect("property name repeated")
            seen.add(name)
        return
    width = _PADDED_NAME_MAX
    columns = np.arange(width)
    inside = columns < lengths[:, None]
    padded = np.where(inside, buf[np.where(inside, starts[:, None] + columns, 0)], 0).astype(np.uint8)
    rows = np.concatenate(
        [
            owner.astype(">i8").view(np.uint8).reshape(-1, 8),
            lengths.astype(">i4").view(np.uint8).reshape(-1, 4),
            padded,
        ],
        axis=1,
    )
    if len(np.unique(np.ascontiguousarray(rows).view(np.dtype((np.void, rows.shape[1]))))) < len(rows):
        raise _Defect("property name repeated")
