"""Storage-node peers: the cluster secret, the per-peer bound and the idle timeout (real node processes).

A node started with ``--cluster-secret`` answers nothing on a connection that
does not open with a valid proof: a plain client's FENCE or READ gets the
connection closed and the ledger is not fenced (control: a client with the
secret fences it); a wrong secret is closed too. The per-peer bound closes the
connection beyond it at once; an idle connection is closed after the idle
timeout while a busy one is not; the refusals are counted in the node's metrics.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from nodeproc import NodeProcess, Reply, metric, metrics_text, new_node, put_ledger

from storage import wire
from storage.errors import Status
from storage.wire_auth import proof

pytestmark = pytest.mark.component

SECRET = b"c" * 32


def closed_without_answer(sock: socket.socket, timeout_s: float = 10.0) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True


def proven(node: NodeProcess, secret: bytes = SECRET) -> socket.socket:
    sock = socket.create_connection(node.host_port, timeout=10)
    sock.sendall(proof(secret, time.time_ns() // 1_000_000))
    return sock


def call(sock: socket.socket, op: int, body: bytes) -> Reply:
    sock.sendall(wire.encode_request(op, 1, body))
    decoder = wire.FrameDecoder.responses()
    while True:
        data = sock.recv(1 << 16)
        assert data, "closed"
        frames = decoder.feed(data)
        if frames:
            return Reply.of(frames[0])


def test_secret_per_peer_bound_and_idle_timeout(
    nodes: list[NodeProcess], tmp_path: Path, etcd_endpoint: str, ns: str
) -> None:
    (tmp_path / "cluster.key").write_bytes(SECRET)
    args = ("--cluster-secret", str(tmp_path / "cluster.key"), "--max-connections-per-peer", "4")
    node = new_node(nodes, tmp_path, etcd_endpoint, ns, *args, "--idle-timeout", "2").start()
    put_ledger(etcd_endpoint, ns, 7)

    with socket.create_connection(node.host_port, timeout=10) as plain:
        plain.sendall(wire.encode_request(wire.Op.FENCE, 1, wire.ledger_body(7)))
        assert closed_without_answer(plain)
    with socket.create_connection(node.host_port, timeout=10) as plain:
        plain.sendall(wire.encode_request(wire.Op.READ, 1, wire.ledger_body(7) + b"\x00" * 8))
        assert closed_without_answer(plain)
    with proven(node, b"w" * 32) as wrong:
        wrong.sendall(wire.encode_request(wire.Op.FENCE, 1, wire.ledger_body(7)))
        assert closed_without_answer(wrong)
    with socket.create_connection(node.host_port, timeout=10) as silent:  # says nothing at all
        assert closed_without_answer(silent, 15)
    with proven(node) as good:  # the control: the ledger was not fenced by any of them
        assert call(good, wire.Op.FENCE, wire.ledger_body(7)).status is Status.OK
        fenced = call(good, wire.Op.FENCE, wire.ledger_body(7))
        assert fenced.status is Status.OK

    held = [proven(node) for _ in range(4)]
    extra = socket.create_connection(node.host_port, timeout=10)
    assert closed_without_answer(extra)  # beyond 4 from this address
    extra.close()
    busy = held[0]
    start = time.monotonic()
    for _ in range(8):  # keep one connection busy past the idle timeout
        assert call(busy, wire.Op.NODE_INFO, b"").status is Status.OK
        time.sleep(0.5)
    assert all(closed_without_answer(s, 15) for s in held[1:])  # the idle ones went
    idle_after = time.monotonic() - start
    print(f"idle connections closed within {idle_after:.1f} s (timeout 2 s)")
    assert call(busy, wire.Op.NODE_INFO, b"").status is Status.OK
    for s in held:
        s.close()
    # a node without a secret skips the proof of a client that has one
    open_node = new_node(nodes, tmp_path, etcd_endpoint, ns).start()
    with proven(open_node) as client:
        assert call(client, wire.Op.NODE_INFO, b"").status is Status.OK
    with socket.create_connection(open_node.host_port, timeout=10) as client:
        assert call(client, wire.Op.NODE_INFO, b"").status is Status.OK
    text = metrics_text(node)
    assert metric(text, "folio_node_auth_refused_total") >= 1  # the wrong secret (the rest went idle first)
    assert metric(text, "folio_node_idle_closed_total") >= 3
