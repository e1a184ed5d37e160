"""``folio bench gateway`` end to end with tiny settings: its own cluster, every row printed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.server import ServerProtocol

from folio.bench_gateway_load import (
    Link,
    LoadResult,
    SessionClosed,
    consume,
    consumer_url,
    producer_url,
    publish,
)
from folio.bench_gateway_w2 import W2Pace, W2Result, produce_paced
from folio.bench_ws_client import FrameSession

pytestmark = pytest.mark.component

REPO = Path(__file__).resolve().parents[2]
MODES = ("ws", "ws-batch", "rest-batch")


def test_tiny_gateway_bench_prints_every_row(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "folio", "bench", "gateway", "--seconds", "1", "--msgs", "500"]
    cmd += ["--w2-seconds", "0.5", "--w2-rate", "500", "--settle", "0", "--json"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "== Folio" in out and "msg/s" in out, out
    assert re.search(r"^disk before the runs: [1-9][0-9]* MB/s", out, re.M), out[:2000]
    rows = {
        (r["workload"], r["mode"], r["size"]): r
        for r in (orjson.loads(line) for line in out.splitlines() if line.startswith("{"))
    }
    expected = {("W1", m, size) for m in MODES for size in (100, 1024)}
    expected |= {("W3", m, 100) for m in ("ws", "ws-batch")}
    expected |= {(w, m, 100) for w in ("W2 e2e", "W2 ack") for m in ("ws", "ws-batch")}
    assert set(rows) == expected, sorted(rows)
    for key, row in rows.items():
        assert row["errors"] == 0, (key, row)
        assert row["msgs_per_s"] > 0, (key, row)
        assert set(row["cpu"]) >= {"gw", "node", "etcd", "client", "machine", "other"}, row
    for mode in MODES:
        for size in (100, 1024):
            assert rows["W1", mode, size]["msgs"] == 500, rows["W1", mode, size]  # 500 msgs: well within 1 s
            assert rows["W1", mode, size]["p99_ms"] is not None
    for mode in ("ws", "ws-batch"):
        assert rows["W3", mode, 100]["msgs"] == 500  # the whole backlog of W1-100B, each once
        assert rows["W2 e2e", mode, 100]["msgs"] == 250  # every stamped message reached the consumer
        assert rows["W2 e2e", mode, 100]["p50_ms"] is not None
    for line in out.splitlines():  # every row also appears in the printed table
        if line.startswith("folio "):
            assert len(line.split()) >= 15, line
    assert (tmp_path / ".folio-bench-gw" / "cluster").exists()
    assert not any(p.is_dir() for p in (tmp_path / ".folio-bench-gw" / "cluster").iterdir())  # data dropped
    assert not list((tmp_path / ".folio-bench-gw").glob("probe-*.bin"))  # the disk probe cleans up


def test_bench_compares_persistence_policies_in_one_run(tmp_path: Path) -> None:
    """``--persistence`` twice: both policies run in every rep, their rows named by policy."""
    cmd = [sys.executable, "-m", "folio", "bench", "gateway", "--seconds", "1", "--msgs", "300"]
    cmd += ["--workloads", "W1", "--modes", "ws-batch", "--reps", "2", "--settle", "0", "--json"]
    cmd += ["--persistence", "3,3,2", "--persistence", "3,2,2"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ledgers E/Qw/Qa 3/3/2, 3/2/2" in done.stdout
    rows = [orjson.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    named = {(r["system"], r["size"]): r for r in rows}
    assert set(named) == {(f"folio {p}", size) for p in ("3/3/2", "3/2/2") for size in (100, 1024)}
    assert all(r["msgs"] == 300 and r["errors"] == 0 for r in rows), rows
    order = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("folio 3/")][:8]
    assert order == ["3/3/2", "3/3/2", "3/2/2", "3/2/2"] * 2  # alternating within each rep


class FakeGateway:
    """Lookup + producer endpoint; the first session is closed with 4503 after
    ``close_after`` answered frames (the topic moved)."""

    def __init__(self, close_after: int) -> None:
        self.sessions: list[int] = []  # frames answered per session
        self.close_after = close_after

    def lookup(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.path.startswith("/lookup/"):
            port = connection.local_address[1]
            body = orjson.dumps(
                {"brokerUrl": f"ws://127.0.0.1:{port}", "httpUrl": f"http://127.0.0.1:{port}"}
            )
            return connection.respond(200, body.decode())
        return None

    async def producer(self, ws: ServerConnection) -> None:
        sessions = self.sessions
        sessions.append(0)
        first = len(sessions) == 1
        async for frame in ws:
            obj = orjson.loads(frame)
            if first and sessions[-1] == self.close_after:
                await ws.close(4503, "topic unloaded; reconnect")
                return
            sessions[-1] += 1
            if obj.get("type") == "batch":
                results = [{"result": "ok", "messageId": "x", **m} for m in obj["messages"]]
                results = [{k: v for k, v in r.items() if k != "payload"} for r in results]
                await ws.send(orjson.dumps({"type": "batch", "results": results}).decode())
            else:
                await ws.send(
                    orjson.dumps({"result": "ok", "messageId": "x", "context": obj["context"]}).decode()
                )

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        server = serve(self.producer, "127.0.0.1", 0, process_request=self.lookup, max_queue=None)
        async with server as running:
            yield f"http://127.0.0.1:{running.sockets[0].getsockname()[1]}"


async def test_publishers_reconnect_when_the_topic_moves() -> None:
    """The client looks the owner up again, reconnects, counts what was in flight as errors and
    still stops at its message cap."""
    fake = FakeGateway(50)
    async with fake.serving() as base:
        result = await publish("ws", base, "t", b"p" * 100, 2000, 10.0, 256, 128)
        assert result.reconnects == 1 and len(fake.sessions) == 2, (result, fake.sessions)
        # each of the 50 replies refilled the window in its frame callback, before the close
        # frame behind them was read: the whole window (256) was in flight, fate unknown
        assert result.ok == 2000 - result.errors and result.errors == 256, result
        assert "4503" in result.first_error and not result.capped_by_time
        fake.sessions.clear()
        fake.close_after = 5
        result = await publish("ws-batch", base, "t", b"p" * 100, 2000, 10.0, 256, 128)
        assert result.reconnects == 1 and result.ok == 2000 - result.errors, result
        assert result.errors == 2 * 128, result  # both frames in flight when the 6th was refused


@pytest.mark.parametrize("batched", [False, True])
async def test_w2_producer_reconnects_when_the_topic_moves(batched: bool) -> None:
    """The paced W2 producer connects again after a 4503 and sends the rest; the frame refused
    by the closing session counts as an error (fate unknown), every other message is answered."""
    fake = FakeGateway(20)
    pace = W2Pace(rate=500, seconds=0.4)
    result = W2Result(pace.expected)
    async with fake.serving() as base:
        link = Link(base, "t", lambda ws_base: producer_url(ws_base, "t"))
        await produce_paced(link, pace, batched, result)
    assert len(fake.sessions) == 2 and result.reconnects == 1, (fake.sessions, result.reconnects)
    assert result.sent == pace.expected == 200 and result.replies == 200, result
    # the frames in flight when the session closed: how many depends on how far the replies
    # trail the pace (on a loaded box, more than the 20 answered before the close)
    assert 1 <= result.errors <= 200 - fake.close_after and "4503" in result.first_error, result
    assert len(result.ack_ms) == 200 - result.errors


def test_topic_curve_rows_and_plots(tmp_path: Path) -> None:
    """``--topics 1,3 --plots``: a curve row per count (the load spread over that many topics,
    all acked), the ratio line, and PNG files that are PNGs, beside the rows they show."""
    cmd = [sys.executable, "-m", "folio", "bench", "gateway", "--seconds", "1", "--msgs", "300"]
    cmd += ["--workloads", "W1", "--modes", "ws", "--topics", "1,3", "--settle", "0"]
    cmd += ["--plots", "plots", "--json"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [orjson.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    curve = {r["topics"]: r for r in rows if r["workload"] == "W1 topics"}
    assert set(curve) == {1, 3}, rows
    for row in curve.values():
        assert row["errors"] == 0 and row["msgs"] > 0 and row["p99_ms"] is not None, row
        assert row["cpu"]["gw"] > 0 and row["cpu"]["node"] > 0 and "client" in row["cpu"], row
    assert "3 topics ÷ 1: msg/s" in done.stdout
    assert re.search(r"^folio +3 +[\d,]+ +[\d,]+ ", done.stdout, re.M), done.stdout  # the curve's table
    plots = tmp_path / "plots"
    for name in ("throughput.png", "latency.png", "topics.png"):
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert f"plot: plots/{name}" in done.stdout
    saved = [orjson.loads(x) for x in (plots / "rows.jsonl").read_text().splitlines()]
    assert {(r["workload"], r["topics"]) for r in saved} == {("W1", 1), ("W1 topics", 1), ("W1 topics", 3)}


class EagerConsumerGateway:
    """Lookup + a consumer endpoint that writes its first delivery in the same TCP write as the
    handshake's 101 answer, as a gateway pushing a backlog at once may: the client's frame callback
    then runs before its ``connect`` call has returned the session. Records the acks it reads."""

    def __init__(self, batched: bool) -> None:
        self.batched = batched
        self.acks: list[dict[str, Any]] = []

    def delivery(self) -> str:
        messages = [{"messageId": f"m{i}", "payload": "cA==", "publishTime": "x"} for i in range(3)]
        if self.batched:
            return orjson.dumps({"type": "messages", "messages": messages}).decode()
        return orjson.dumps(messages[0]).decode()

    async def serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        protocol = ServerProtocol()
        port = writer.get_extra_info("sockname")[1]
        try:
            while data := await reader.read(65536):
                protocol.receive_data(data)
                for event in protocol.events_received():
                    if isinstance(event, Request) and event.path.startswith("/lookup/"):
                        base = f"127.0.0.1:{port}"
                        body = {"brokerUrl": f"ws://{base}", "httpUrl": f"http://{base}"}
                        protocol.send_response(protocol.reject(200, orjson.dumps(body).decode()))
                    elif isinstance(event, Request):
                        protocol.send_response(protocol.accept(event))
                        protocol.send_text(self.delivery().encode())  # one write with the 101
                    elif isinstance(event, Frame) and event.opcode == Opcode.TEXT:
                        self.acks.append(orjson.loads(event.data))
                writer.write(b"".join(protocol.data_to_send()))
                if protocol.close_expected():
                    break
        finally:
            writer.close()

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self.serve_one, "127.0.0.1", 0)
        async with server:
            yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


@pytest.mark.parametrize("mode", ["ws", "ws-batch"])
async def test_consumer_acks_a_delivery_that_arrives_with_the_handshake(mode: str) -> None:
    """A delivery in the same read as the 101 answer is acked on the session it came by: the
    frame callback must not need the session its caller has not yet been handed."""
    fake = EagerConsumerGateway(batched=mode == "ws-batch")
    async with fake.serving() as base:
        result = await consume(mode, base, "t", "s", 3 if mode == "ws-batch" else 1, 5.0, 16)
    assert result.ok == (3 if mode == "ws-batch" else 1) and not result.errors, result
    assert not result.capped_by_time and not result.error_kinds, result
    ids = [["m0", "m1", "m2"]] if mode == "ws-batch" else [["m0"]]
    assert [a.get("messageIds") or [a["messageId"]] for a in fake.acks] == ids, fake.acks


async def test_a_failing_frame_callback_is_reported_as_the_clients_own() -> None:
    """The client's own defect ends its session 1011 and says so; it is not blamed on the gateway."""
    fake = EagerConsumerGateway(batched=True)

    def broken(_session: FrameSession, raw: bytes) -> None:
        raise ValueError("cannot read " + orjson.loads(raw)["type"])

    async with fake.serving() as base:
        link = Link(base, "t", lambda ws_base: consumer_url(ws_base, "t", "s", 16, True))
        session = await link.open(broken)
        await asyncio.wait_for(session.closed, 5.0)
        assert session.failure == "ValueError: cannot read messages", session.failure
        with pytest.raises(SessionClosed, match=r"bench client failed on a frame .*cannot read messages"):
            await link.reopen(session, broken, LoadResult(), 0)
    assert fake.acks == []
