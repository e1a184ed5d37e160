"""Real storage-node processes on a real etcd: durability, fencing, fatal fsync,
bad input, read-only mode and bounds (docs/architecture.md §3; docs/testing.md §2)."""

from __future__ import annotations

import signal
import socket
import struct
from collections import deque
from pathlib import Path

import pytest
from nodeproc import (
    NodeProcess,
    journal_files,
    metric,
    metrics_text,
    new_node,
    node_record,
    payload,
    put_ledger,
    wait_until,
)

from coordination.ports import free_ports
from storage import wire
from storage.errors import Status
from storage.node.journal_io import scan_file

pytestmark = pytest.mark.component


def test_acked_adds_survive_kill9_and_torn_tail_is_ignored(
    nodes: list[NodeProcess], tmp_path: Path, etcd_endpoint: str, ns: str
) -> None:
    # checkpoints far apart: after kill -9 everything comes back from the journal alone
    node = new_node(nodes, tmp_path, etcd_endpoint, ns, "--checkpoint-interval", "3600").start()
    put_ledger(etcd_endpoint, ns, 1)
    with node.client() as c:
        acked = c.add_many(1, [(e, payload(1, e, 100 + e % 2000)) for e in range(3000)])
    assert set(acked.values()) == {Status.OK}
    node.kill9()
    last = journal_files(node)[-1]
    end = max(end for end, _, _ in scan_file(last.read_bytes()))
    assert last.stat().st_size > end  # the preallocated zeros follow the records
    with open(last, "r+b") as f:  # a torn record where the next write would land
        f.seek(end)  # its header promises more bytes than follow
        f.write(struct.pack(">IIB", 5000, 12345, 1) + b"partial")
    node.start()
    assert last.stat().st_size == end  # zeros and torn tail cut: a crash costs no preallocation step
    with node.client() as c:
        for e in range(3000):
            status, entry = c.read(1, e)
            assert status is Status.OK and entry is not None
            assert entry.payload == payload(1, e, 100 + e % 2000)
        assert c.read(1, 3000)[0] is Status.NO_SUCH_ENTRY
        assert c.read_lac(1) == (Status.OK, (2998, 2999))
        assert c.add(1, 3000, b"after restart", lac=2999) is Status.OK
    assert "torn or corrupt tail" in node.log_text()
    # a second crash: the torn file is replayed again (up to its tail), plus the new file
    node.restart()
    with node.client() as c:
        assert c.read(1, 3000)[1] is not None
        status, entries = c.read_range(1, 0, 5000)
        assert status is Status.OK and [x.entry_id for x in entries] == list(range(len(entries)))


def test_checkpoint_indexes_sealed_journal_files_and_they_serve_after_restart(
    nodes: list[NodeProcess], tmp_path: Path, etcd_endpoint: str, ns: str
) -> None:
    args = ("--checkpoint-interval", "0.2", "--journal-rotate-bytes", "200000")
    node = new_node(nodes, tmp_path, etcd_endpoint, ns, *args).start()
    put_ledger(etcd_endpoint, ns, 5)
    with node.client() as c:
        assert set(c.add_many(5, [(e, payload(5, e)) for e in range(2000)]).values()) == {Status.OK}
    journal_dir = node.data_dir / "journal"

    def indexed() -> set[str]:
        return {p.stem for p in journal_dir.glob("*.idx")}

    # a checkpoint writes its index files one at a time (each made durable before the
    # next): wait for every sealed file's, not for a count that a half-done round meets
    wait_until(
        lambda: len(indexed()) >= 3 and indexed() == {p.stem for p in journal_files(node)[:-1]},
        what="every sealed journal file indexed",
    )
    files = journal_files(node)  # a checkpoint deletes no journal file: they are the data
    assert len(files) >= 4 and files[0].name == "0000000001.journal"
    assert indexed() == {p.stem for p in files[:-1]}
    assert not (node.data_dir / "entrylogs").exists()
    with node.client() as c:  # read back from the journal files
        assert c.read(5, 7)[1] == wire.Entry(5, 7, 6, payload(5, 7))
        status, entries = c.read_range(5, 100, 1999, max_bytes=50_000)
        assert status is Status.OK and 1 <= len(entries) <= 50
        assert [x.entry_id for x in entries] == list(range(100, 100 + len(entries)))
    node.kill9()
    node.start()
    with node.client() as c:
        for e in range(0, 2000, 7):
            assert c.read(5, e)[1] == wire.Entry(5, e, e - 1, payload(5, e))
        assert c.read_lac(5) == (Status.OK, (1998, 1999))


def test_kill9_mid_stream_every_acked_entry_is_readable_from_the_journal(
    nodes: list[NodeProcess], tmp_path: Path, etcd_endpoint: str, ns: str
) -> None:
    # small files and frequent checkpoints: after the crash some files come back from
    # index files, the mark's file and later ones from a scan
    args = ("--checkpoint-interval", "0.05", "--journal-rotate-bytes", "100000")
    node = new_node(nodes, tmp_path, etcd_endpoint, ns, *args).start()
    put_ledger(etcd_endpoint, ns, 9)
    sizes = {e: 200 + (e * 37) % 3000 for e in range(20_000)}
    acked: list[int] = []
    waiting: deque[tuple[int, int]] = deque()  # (request id, entry id), oldest first
    with node.client() as c:
        for e in range(20_000):  # a window of 2000 in flight: the kill lands mid-stream
            body = wire.add_body(wire.encode_entry(9, e, e - 1, payload(9, e, sizes[e])))
            waiting.append((c.send(wire.Op.ADD, body), e))
            if len(waiting) >= 2000:
                request_id, oldest = waiting.popleft()
                assert c.recv(request_id).status is Status.OK
                acked.append(oldest)
            if len(acked) == 3000:
                break
        node.kill9()
        unanswered = len(waiting)
        for request_id, e in waiting:  # answers the node sent before it died count too
            try:
                response = c.recv(request_id)
            except (ConnectionError, OSError):
                break
            assert response.status is Status.OK
            acked.append(e)
            unanswered -= 1
    assert len(acked) >= 3000 and unanswered > 0  # the kill really came mid-stream
    assert acked == list(range(len(acked)))
    node.start()
    with node.client() as c:
        for e in acked:
            assert c.read(9, e)[1] == wire.Entry(9, e, e - 1, payload(9, e, sizes[e]))
        status, (lac, last) = c.read_lac(9)
        assert status is Status.OK and last >= acked[-1] and lac >= acked[-1] - 1
    assert len(list((node.data_dir / "journal").glob("*.idx"))) >= 2


def test_old_format_data_dir_is_refused_with_one_clear_line(
    nodes: list[NodeProcess], tmp_path: Path, etcd_endpoint: str, ns: str
) -> None:
    node = new_node(nodes, tmp_path, etcd_endpoint, ns)
    node.data_dir.mkdir()
    (node.data_dir / "checkpoint.json").write_text(
        '{"version": 1, "journal": [2, 8], "entryLog": [1, 8], "ledgers": []}'
    )
    (node.data_dir / "entrylogs").mkdir()
    node.start(expect_ready=False)
    assert node.wait() == 2
    errors = [line for line in node.log_text().splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "older storage format" in errors[0] and "refusing to start" in errors[0]
    assert not (node.data_dir / "journal").exists()  # nothing was written into the old dir


def test_fence_is_durable_across_restarts(
    nodes: list[NodeProcess], tmp_path: Path, etcd_endpoint: str, ns: str
) -> None:
    node = new_node(nodes, tmp_path, etcd_endpoint, ns, "--checkpoint-interval", "3600").start()
    put_ledger(etcd_endpoint, ns, 3)
    put_ledger(etcd_endpoint, ns, 4)
    with node.client() as c:
        assert set(c.add_many(3, [(e, b"x") for e in range(10)]).values()) == {Status.OK}
        assert c.fence(3) == (Status.OK, (8, 9))
        assert c.fence(4) == (Status.OK, (-1, -1))  # unknown ledger: created fenced
        assert c.add(3, 10, b"zombie", lac=9) is Status.FENCED
        assert c.add(3, 10, b"recovered", lac=9, recovery=True) is Status.OK
    for sig in (signal.SIGKILL, signal.SIGTERM):  # journal replay, then checkpoint path
        node.restart(sig)
        with node.client() as c:
            assert c.add(3, 11, b"zombie", lac=9) is Status.FENCED
            assert c.add(4, 0, b"zombie") is Status.FENCED
            assert c.read(3, 10)[1] == wire.Entry(3, 10, 9, b"recovered")
            assert c.add(3, 11, b"again", lac=10, recovery=True) is Status.OK


def test_fsync_error_is_fatal_and_the_add_is_not_acked(
    nodes: list[NodeProcess], tmp_path: Path, etcd_endpoint: str, ns: str
) -> None:
    env = {"FOLIO_FAILPOINT_FSYNC_ERROR_AFTER": "3"}
    node = new_node(nodes, tmp_path, etcd_endpoint, ns, env=env).start()
    put_ledger(etcd_endpoint, ns, 1)
    with node.client() as c:
        assert c.add(1, 0, b"a") is Status.OK
        assert c.add(1, 1, b"b", lac=0) is Status.OK
        request = c.send(wire.Op.ADD, wire.add_body(wire.encode_entry(1, 2, 1, b"c")))
        with pytest.raises(ConnectionError):
            c.recv(request)
    assert node.wait(10) == 70
    fatal_lines = [line for line in node.log_text().splitlines() if line.startswith("FATAL")]
    assert len(fatal_lines) == 1 and "fdatasync" in fatal_lines[0], node.log_tail()
    assert "loop thread" in fatal_lines[0], fatal_lines  # a group of one: synced inline
    node.env = {}
    node.start()
    with node.client() as c:
        assert c.read(1, 0)[1] == wire.Entry(1, 0, -1, b"a")
        assert c.read(1, 1)[1] == wire.Entry(1, 1, 0, b"b")


def test_fsync_error_of_a_large_group_is_fatal_too(
    nodes: list[NodeProcess], tmp_path: Path, etcd_endpoint: str, ns: str
) -> None:
    """Small groups are synced on the node's loop thread, large ones on the sync
    thread (storage/node/journal.py): an fdatasync error is fatal on both paths. The
    single adds above take the inline path; here 20 adds arrive in one write and share
    one group, which the sync thread syncs - and fails."""
    env = {"FOLIO_FAILPOINT_FSYNC_ERROR_AFTER": "1"}
    node = new_node(nodes, tmp_path, etcd_endpoint, ns, env=env).start()
    put_ledger(etcd_endpoint, ns, 1)
    with node.client() as c:
        frames = [
            wire.encode_request(wire.Op.ADD, 1000 + e, wire.add_body(wire.encode_entry(1, e, e - 1, b"x")))
            for e in range(20)
        ]
        c.send_raw(b"".join(frames))
        with pytest.raises(ConnectionError):
            c.recv(1000)
    assert node.wait(10) == 70
    fatal_lines = [line for line in node.log_text().splitlines() if line.startswith("FATAL")]
    assert len(fatal_lines) == 1 and "fdatasync" in fatal_lines[0], node.log_tail()
    assert "sync thread" in fatal_lines[0], fatal_lines


def test_fsync_error_of_one_large_record_is_fatal_on_the_sync_thread(
    nodes: list[NodeProcess], tmp_path: Path, etcd_endpoint: str, ns: str
) -> None:
    """A group of one record above INLINE_SYNC_BYTES (64 KiB) is synced on the sync
    thread too (storage/node/journal.py); its fdatasync error is fatal."""
    env = {"FOLIO_FAILPOINT_FSYNC_ERROR_AFTER": "1"}
    node = new_node(nodes, tmp_path, etcd_endpoint, ns, env=env).start()
    put_ledger(etcd_endpoint, ns, 1)
    with node.client() as c:
        request = c.send(wire.Op.ADD, wire.add_body(wire.encode_entry(1, 0, -1, b"x" * 100 * 1024)))
        with pytest.raises(ConnectionError):
            c.recv(request)
    assert node.wait(10) == 70
    fatal_lines = [line for line in node.log_text().splitlines() if line.startswith("FATAL")]
    assert len(fatal_lines) == 1 and "sync thread" in fatal_lines[0], node.log_tail()


def test_bad_input_hurts_only_the_bad_connection(
    nodes: list[NodeProcess], tmp_path: Path, etcd_endpoint: str, ns: str
) -> None:
    node = new_node(nodes, tmp_path, etcd_endpoint, ns).start()
    put_ledger(etcd_endpoint, ns, 1)
    good = node.client()
    assert set(good.add_many(1, [(e, payload(1, e)) for e in range(100)]).values()) == {Status.OK}

    with node.client() as bad:
        entry = bytearray(wire.encode_entry(1, 100, 99, b"tampered"))
        entry[-1] ^= 0xFF
        assert bad.call(wire.Op.ADD, wire.add_body(bytes(entry))).status is Status.BAD_REQUEST
        assert bad.call(wire.Op.ADD, b"\x00short").status is Status.BAD_REQUEST
        assert bad.call(99, b"whatever").status is Status.UNKNOWN_OP
        assert bad.call(wire.Op.READ, b"\x01\x02").status is Status.BAD_REQUEST
        assert bad.call(wire.Op.READ_RANGE, wire.range_body(1, 5, 2)).status is Status.BAD_REQUEST
        assert bad.read(1, 100)[0] is Status.NO_SUCH_ENTRY  # nothing stored
        assert bad.read(1, 99)[0] is Status.OK  # and this connection still works

    with node.client() as absurd:
        absurd.send_raw(struct.pack(">I", 0xFFFFFFF0) + b"\x01" * 64)
        with pytest.raises(ConnectionError):
            absurd.recv(1)

    truncated = socket.create_connection(node.host_port)
    frame = wire.encode_request(wire.Op.ADD, 1, wire.add_body(wire.encode_entry(1, 100, 99, b"cut")))
    truncated.sendall(frame[: len(frame) // 2])
    truncated.close()

    assert set(good.add_many(1, [(e, payload(1, e)) for e in range(100, 200)]).values()) == {Status.OK}
    for e in range(200):
        assert good.read(1, e)[1] == wire.Entry(1, e, e - 1, payload(1, e))
    good.close()


def test_read_only_below_free_space_threshold(
    nodes: list[NodeProcess], tmp_path: Path, etcd_endpoint: str, ns: str
) -> None:
    knob = tmp_path / "free-bytes"
    knob.write_text("500")
    env = {"FOLIO_TEST_FREE_BYTES_FILE": str(knob)}
    node = new_node(nodes, tmp_path, etcd_endpoint, ns, "--min-free-bytes", "1000000", env=env).start()
    put_ledger(etcd_endpoint, ns, 1)
    record = node_record(etcd_endpoint, ns, node.address)
    assert record is not None and record["readOnly"] is True and record["freeBytes"] == 500
    with node.client() as c:
        assert c.add(1, 0, b"refused") is Status.READ_ONLY
        assert c.node_info()["readOnly"] is True
        assert c.fence(1)[0] is Status.OK  # fencing still works on a read-only node
        knob.write_text(str(10**12))
        wait_until(lambda: c.node_info()["readOnly"] is False, what="node writable again")
        wait_until(
            lambda: (node_record(etcd_endpoint, ns, node.address) or {}).get("readOnly") is False,
            what="etcd NodeInfo writable",
        )
        assert c.add(1, 0, b"accepted", recovery=True) is Status.OK
        knob.write_text("999999")  # just under the threshold
        wait_until(lambda: c.add(1, 1, b"x", recovery=True) is Status.READ_ONLY, what="read-only again")
    metrics = metrics_text(node)
    assert "folio_node_read_only 1.0" in metrics
    assert "folio_journal_sync_seconds_count" in metrics


def test_connection_in_flight_queue_and_waiter_bounds(
    nodes: list[NodeProcess], tmp_path: Path, etcd_endpoint: str, ns: str
) -> None:
    args = ("--max-connections", "3", "--max-in-flight", "8", "--max-lac-waiters", "2")
    args += ("--journal-queue-bytes", "5000")
    env = {"FOLIO_FAILPOINT_FSYNC_DELAY_MS": "30"}
    node = new_node(nodes, tmp_path, etcd_endpoint, ns, *args, env=env).start()
    put_ledger(etcd_endpoint, ns, 1)
    clients = [node.client() for _ in range(3)]
    for c in clients:
        assert c.node_info()["nodeId"] == node.address
    extra = node.client()
    with pytest.raises((ConnectionError, OSError)):
        extra.call(wire.Op.NODE_INFO)
    extra.close()
    clients.pop().close()
    wait_until(lambda: metric(metrics_text(node), "folio_node_connections") == 2, what="a slot freed")
    a, b = clients
    c = node.client()
    assert c.node_info()["nodeId"] == node.address

    # in-flight bound: 40 pipelined adds, never more than 8 taken from the socket at once
    assert set(a.add_many(1, [(e, b"y" * 10) for e in range(40)]).values()) == {Status.OK}
    metrics = metrics_text(node)
    count = metric(metrics, "folio_journal_sync_batch_records_count")
    assert count >= 5 and metric(metrics, 'folio_journal_sync_batch_records_bucket{le="10.0"}') == count

    # long-poll waiters: two wait, the third is answered at once (TIMEOUT)
    w1 = a.send(wire.Op.READ_LAC, wire.read_lac_body(1, 38, 10_000))
    w2 = b.send(wire.Op.READ_LAC, wire.read_lac_body(1, 38, 10_000))
    wait_until(lambda: metric(metrics_text(node), "folio_node_lac_waiters") == 2, what="both polls parked")
    assert c.read_lac(1, 38, 10_000) == (Status.TIMEOUT, (38, 39))
    assert c.add(1, 40, b"z", lac=39) is Status.OK
    assert wire.parse_lac_reply(a.recv(w1).body) == (39, 40)
    assert wire.parse_lac_reply(b.recv(w2).body) == (39, 40)
    assert c.read_lac(1, 39, 200) == (Status.TIMEOUT, (39, 40))  # expires unchanged

    # journal queue bound (5000 bytes) with slow syncs: some adds refused, none half-stored
    results = c.add_many(1, [(e, payload(1, e, 1000)) for e in range(100, 140)])
    refused = [e for e, s in results.items() if s is Status.UNAVAILABLE]
    accepted = [e for e, s in results.items() if s is Status.OK]
    assert refused and accepted and len(refused) + len(accepted) == 40
    for e in accepted:
        assert c.read(1, e)[1] == wire.Entry(1, e, e - 1, payload(1, e, 1000))
    for e in refused:
        assert c.read(1, e)[0] is Status.NO_SUCH_ENTRY
    assert metric(metrics_text(node), "folio_node_adds_rejected_total") == len(refused)
    for client in (a, b, c):
        client.close()


def test_sigterm_stops_cleanly_and_cookie_guards_the_data_dir(
    nodes: list[NodeProcess], tmp_path: Path, etcd_endpoint: str, ns: str
) -> None:
    node = new_node(nodes, tmp_path, etcd_endpoint, ns).start()
    assert node_record(etcd_endpoint, ns, node.address) is not None
    assert node.terminate() == 0
    assert node_record(etcd_endpoint, ns, node.address) is None  # lease revoked at once
    other = NodeProcess(node.data_dir, etcd_endpoint, namespace=ns, port=free_ports(1)[0])
    other.start(expect_ready=False)
    assert other.wait(20) == 2
    assert "belongs to node" in other.log_text()
