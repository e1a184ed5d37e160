"""Arrow record batches to the messages of Folio batch publish frames, column at a time (pure).

Owns: ``encode_messages`` (a batch's rows as publish-message JSON, one Arrow
string per row, built from whole columns, the payloads' base64 in one call),
``route`` (the partition each row goes to) and ``Pending`` (one partition's
encoded rows not yet in a frame, cut into frame bodies). Rules (docs/spark.md, Write to a topic; the frame is
docs/publishing.md §4):
- a row's message is exactly what a dict of its fields gives through orjson:
  ``{"payload":<base64>,"sequenceId":N}`` then ``"key"`` (if not null),
  ``"properties"`` (if not null nor empty), ``"eventTime"`` (epoch ms, if not
  null nor 0), in that order; a null value is an empty payload, a string value
  its UTF-8 bytes;
- the sequence id of a row is ``sequence_base`` plus its position in the task;
- a keyed row goes to the partition its key hashes to (``partition_of_key``, as
  the gateways route keys), a row without key to ``position mod partitions``;
- a frame ends at ``limit_messages`` messages or as soon as its payload bytes
  reach ``limit_bytes``, whichever comes first; the rows of one partition keep
  their order across frames and across record batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pybase64 import b64encode

from storage.formats.key_routing import partition_of_key


def _json_strings(values: Sequence[object]) -> pa.Array:
    return pa.array([orjson.dumps(v).decode() if v is not None else None for v in values], pa.string())


def _optional(name: str, encoded: pa.Array) -> pa.Array:
    """``,"name":<encoded>`` where ``encoded`` is not null, else the empty string."""
    joined = pc.binary_join_element_wise(f',"{name}":', encoded, "")
    return pc.fill_null(joined, "")


def _payloads(values: pa.Array) -> pa.Array:
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        values = values.cast(pa.large_binary() if pa.types.is_large_string(values.type) else pa.binary())
    return pc.fill_null(values, b"")


_PADDING = pa.array([b"", b"\0", b"\0\0"], pa.binary())  # by the bytes a value needs to fill its last group


def _base64(payloads: pa.Array, lengths: np.ndarray) -> pa.Array:
    """Each value's standard base64, from one ``pybase64`` call over the whole column
    (as ``rows.py`` encodes message ids): each value padded with zero bytes to a
    multiple of 3, so its text starts at 4/3 of its padded offset; then the "=" of
    each value's padding is written over the text of its zero bytes."""
    padding = _PADDING.take(pa.array(-lengths % 3)).cast(payloads.type)
    padded = pc.binary_join_element_wise(payloads, padding, pa.scalar(b"", payloads.type))
    width = np.dtype(np.int64 if padded.type == pa.large_binary() else np.int32)
    offsets = np.frombuffer(padded.buffers()[1], width, len(padded) + 1, padded.offset * width.itemsize)
    data = memoryview(padded.buffers()[2])[offsets[0] : offsets[-1]] if len(padded) else b""
    text = np.frombuffer(b64encode(data), np.uint8).copy()
    out_offsets = (offsets.astype(np.int64) - offsets[0]) // 3 * 4
    ends, rest = out_offsets[1:], lengths % 3
    text[ends[rest == 1] - 2] = ord("=")
    text[ends[rest != 0] - 1] = ord("=")
    buffers = [None, pa.py_buffer(out_offsets), pa.py_buffer(text)]
    return pa.Array.from_buffers(pa.large_string(), len(padded), buffers).cast(pa.string())


def encode_messages(batch: pa.RecordBatch, sequence_base: int) -> tuple[pa.Array, np.ndarray]:
    """Each row's publish message (JSON text followed by ``,``) and its payload length."""
    columns = {name: batch.column(i) for i, name in enumerate(batch.schema.names)}
    payloads = _payloads(columns["value"])
    lengths = pc.binary_length(payloads).to_numpy(zero_copy_only=False).astype(np.int64)
    encoded = _base64(payloads, lengths)
    sequences = pa.array(np.arange(len(batch), dtype=np.int64) + sequence_base).cast(pa.string())
    parts: list[pa.Array | str] = ['{"payload":"', encoded, '","sequenceId":', sequences]
    if "key" in columns:
        parts.append(_optional("key", _json_strings(columns["key"].to_pylist())))
    if "properties" in columns:
        props = [dict(p) if p else None for p in columns["properties"].to_pylist()]
        parts.append(_optional("properties", _json_strings(props)))
    if "event_time" in columns:
        times = columns["event_time"]
        millis = pc.cast(times, pa.timestamp("ms", times.type.tz), safe=False).cast(pa.int64())
        millis = pc.if_else(pc.equal(millis, 0), pa.scalar(None, pa.int64()), millis)
        parts.append(_optional("eventTime", millis.cast(pa.string())))
    parts.append("},")
    return pc.binary_join_element_wise(*parts, ""), lengths


def route(keys: pa.Array | None, positions: np.ndarray, partitions: int) -> np.ndarray:
    """The partition of each row, given its key (or None: no key column) and its position in the task."""
    spread = positions % partitions
    if keys is None or keys.null_count == len(keys):
        return spread
    encoded = keys.dictionary_encode()  # each distinct key hashed once
    hashed = np.array([partition_of_key(k, partitions) for k in encoded.dictionary.to_pylist()], np.int64)
    indices = pc.fill_null(encoded.indices, 0).to_numpy(zero_copy_only=False)
    valid = keys.is_valid().to_numpy(zero_copy_only=False)
    return np.where(valid, hashed[indices], spread)


@dataclass
class Pending:
    """One partition's encoded rows not yet in a frame, in order."""

    messages: list[pa.Array] = field(default_factory=list)
    lengths: list[np.ndarray] = field(default_factory=list)

    def add(self, messages: pa.Array, lengths: np.ndarray) -> None:
        self.messages.append(messages)
        self.lengths.append(lengths)

    def frames(self, limit_messages: int, limit_bytes: int, final: bool) -> list[tuple[bytes, int]]:
        """Cut the rows into frame bodies ``[m1,m2,...]`` with their message counts; the
        rows after the last full frame stay pending unless ``final``."""
        if not self.messages:
            return []
        messages = pa.concat_arrays(self.messages) if len(self.messages) > 1 else self.messages[0]
        lengths = np.concatenate(self.lengths) if len(self.lengths) > 1 else self.lengths[0]
        total = np.cumsum(lengths)
        offsets = np.frombuffer(messages.buffers()[1], np.int32, len(messages) + 1, messages.offset * 4)
        data = memoryview(messages.buffers()[2])
        out: list[tuple[bytes, int]] = []
        start, count = 0, len(messages)
        while start < count:
            before = int(total[start - 1]) if start else 0
            reach = int(np.searchsorted(total, before + limit_bytes, side="left")) + 1
            end = min(start + limit_messages, reach, count)
            full = end - start == limit_messages or total[end - 1] - before >= limit_bytes
            if end == count and not full and not final:
                break
            body = data[offsets[start] : offsets[end] - 1]  # without the last row's comma
            out.append((b"[" + bytes(body) + b"]", end - start))
            start = end
        self.messages = [messages.slice(start)] if start < count else []
        self.lengths = [lengths[start:]] if start < count else []
        return out
