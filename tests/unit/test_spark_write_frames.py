"""The Spark writer's Arrow-column encoding of publish messages and its frame cutting (pure)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import orjson
import pyarrow as pa
from pybase64 import b64encode_as_string
from pyspark_folio.write_frames import Pending, encode_messages, route

from storage.formats.key_routing import partition_of_key


def _batch() -> pa.RecordBatch:
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return pa.RecordBatch.from_pydict(
        {
            "key": pa.array(["k1", None, 'q"\\\n', "é"], pa.string()),
            "value": pa.array([b"\x00\xff", None, b"", b"abc"], pa.binary()),
            "properties": pa.array(
                [[("a", "1")], [], None, [("b", 'x"y')]], pa.map_(pa.string(), pa.string())
            ),
            "event_time": pa.array(
                [epoch + dt.timedelta(milliseconds=1234), None, epoch, epoch + dt.timedelta(seconds=2)],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )


def _expected(batch: pa.RecordBatch, base: int) -> list[dict[str, object]]:
    """The messages as a dict per row gives them (the writer's former path)."""
    out: list[dict[str, object]] = []
    for i, row in enumerate(batch.to_pylist()):
        message: dict[str, object] = {
            "payload": b64encode_as_string(row["value"] or b""),
            "sequenceId": base + i,
        }
        if row["key"] is not None:
            message["key"] = row["key"]
        if row["properties"]:
            message["properties"] = dict(row["properties"])
        millis = int(row["event_time"].timestamp() * 1000) if row["event_time"] else 0
        if millis:
            message["eventTime"] = millis
        out.append(message)
    return out


def test_messages_are_the_bytes_orjson_gives_for_each_row():
    batch = _batch()
    messages, lengths = encode_messages(batch, 1 << 32)
    assert [m.encode() for m in messages.to_pylist()] == [
        orjson.dumps(m) + b"," for m in _expected(batch, 1 << 32)
    ]
    assert lengths.tolist() == [2, 0, 0, 3]
    text = pa.RecordBatch.from_pydict({"value": pa.array(["hé", None], pa.string())})
    only, _ = encode_messages(text, 5)
    assert only.to_pylist() == ['{"payload":"aMOp","sequenceId":5},', '{"payload":"","sequenceId":6},']


def test_payloads_are_standard_base64_whatever_their_length_and_offset():
    values = [bytes(range(n)) for n in range(12)]
    for kind in (pa.binary(), pa.large_binary(), pa.string()):
        given = [v.hex() for v in values] if kind == pa.string() else values
        column = pa.array([b"skipped" if kind != pa.string() else "skipped", *given], kind).slice(1)
        messages, _ = encode_messages(pa.RecordBatch.from_arrays([column], ["value"]), 0)
        payloads = [orjson.loads(m[:-1])["payload"] for m in messages.to_pylist()]
        assert payloads == [
            b64encode_as_string(v if kind != pa.string() else v.hex().encode()) for v in values
        ]


def test_frames_end_at_the_message_or_byte_limit_and_keep_order_across_batches():
    pending = Pending()
    for first in (0, 7):  # two record batches of 7 rows, payloads of 10 bytes
        batch = pa.RecordBatch.from_pydict({"value": pa.array([b"x" * 10] * 7, pa.binary())})
        pending.add(*encode_messages(batch, first))
        if first == 0:
            cut = pending.frames(limit_messages=3, limit_bytes=1000, final=False)
            assert [count for _, count in cut] == [3, 3]  # the 7th row waits for more
    frames = pending.frames(limit_messages=3, limit_bytes=25, final=True)
    assert [count for _, count in frames] == [3, 3, 2]  # 3 rows reach 25 bytes (30)
    sequences = [m["sequenceId"] for body, _ in cut + frames for m in orjson.loads(body)]
    assert sequences == list(range(14))
    assert pending.frames(3, 25, final=True) == []
    big = Pending()
    big.add(*encode_messages(pa.RecordBatch.from_pydict({"value": [b"x" * 50, b"y"]}), 0))
    assert [c for _, c in big.frames(1000, 20, final=True)] == [1, 1]  # a row past the bytes: alone


def test_rows_go_to_their_key_partition_and_the_rest_round_robin():
    keys = pa.array(["a", None, "bb", "a", None], pa.string())
    positions = np.arange(10, 15)
    chosen = route(keys, positions, 3)
    assert chosen.tolist() == [
        partition_of_key("a", 3),
        11 % 3,
        partition_of_key("bb", 3),
        partition_of_key("a", 3),
        14 % 3,
    ]
    assert route(None, positions, 4).tolist() == [2, 3, 0, 1, 2]
    assert route(pa.array([None, None], pa.string()), np.arange(2), 2).tolist() == [0, 1]
