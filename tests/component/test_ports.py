"""coordination.ports: the ports told to processes before they bind are below the
kernel's ephemeral range, free, never handed out twice, and consecutive on request."""

from __future__ import annotations

import socket
from pathlib import Path

from coordination import ports


def test_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    chosen = ports.free_ports(50)
    assert len(set(chosen)) == 50
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert all(ports.LOWEST <= p < low for p in chosen)
    assert all(ports.port_free(p) for p in chosen)
    assert not set(ports.free_ports(50)) & set(chosen)  # the walk never repeats itself early


def test_a_bound_port_is_skipped_and_a_run_is_consecutive() -> None:
    (ahead,) = ports.free_ports(1)
    nxt = ahead + 1
    with socket.socket() as holder:  # take the port the walk would hand out next
        holder.bind((ports.HOST, nxt))
        holder.listen()
        assert not ports.port_free(nxt)
        run = ports.free_ports(10, consecutive=True)
    assert nxt not in run
    assert run == list(range(run[0], run[0] + 10))
