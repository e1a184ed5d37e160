"""The fault run's network: one Linux network namespace per storage node and gateway on
one bridge, and the links between them that the nemesis cuts and heals one by one.

Owns: one run's bridge (its host side carries two addresses: ``client_ip``, the
workload's, and ``etcd_ip``, where etcd listens in the run's own namespace), each
process's namespace and address, and the blackholes that cut links. Rules: a cut
from A to B drops every packet A sends to B - a route of type ``blackhole`` in A's
namespace (A's own new connections to B fail at once with EINVAL, B's to A time out
silently, established ones stall) or, for etcd (it lives in the run's namespace, as
the workload does), an ``ip rule`` matching etcd's address as the source, so the
workload's own packets are never cut. A cut both ways is two one-way cuts. The bridge
has no route out of the machine (addresses in 10.89.0.0/16, nothing forwards them).
``close()`` drops every cut, the namespaces and the bridge - also after a failure.
The kernel here has no packet filter (no nftables or iptables, no tc actions), so
routes and rules are the only cut there is: documented in docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass, field

ETCD = "etcd"
RULE_PRIORITY = 900  # before the main table (32766)


def ip(*args: str, check: bool = True) -> bool:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.returncode == 0


@dataclass
class Network:
    """Namespaces on one bridge; ``add`` one per process before it starts."""

    tag: str = field(default_factory=lambda: f"{os.getpid() % 10_000}")
    subnet: int = field(default_factory=lambda: 1 + os.getpid() % 250)  # 10.89.<subnet>.0/24
    members: dict[str, str] = field(default_factory=dict)  # process name -> its address
    cuts: set[tuple[str, str]] = field(default_factory=set)  # (from, to): from's packets dropped
    up: bool = False

    @property
    def bridge(self) -> str:
        return f"flt{self.tag}"

    @property
    def client_ip(self) -> str:
        return f"10.89.{self.subnet}.1"

    @property
    def etcd_ip(self) -> str:
        return f"10.89.{self.subnet}.2"

    def namespace(self, name: str) -> str:
        return f"flt{self.tag}-{name}"

    def start(self) -> None:
        ip("link", "add", self.bridge, "type", "bridge")
        self.up = True
        for address in (self.client_ip, self.etcd_ip):
            ip("addr", "add", f"{address}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def add(self, name: str) -> str:
        """A namespace for process ``name`` with its own address on the bridge."""
        address = f"10.89.{self.subnet}.{10 + len(self.members)}"
        ns, veth = self.namespace(name), f"flt{self.tag}v{len(self.members)}"
        ip("netns", "add", ns)
        self.members[name] = address
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", veth, "master", self.bridge, "up")
        ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("-n", ns, "link", "set", "lo", "up")
        return address

    def prefix(self, name: str) -> list[str]:
        """The command prefix that runs a process inside ``name``'s namespace (the
        process keeps the PID ``ip`` had: it execs)."""
        return ["ip", "netns", "exec", self.namespace(name)]

    def address(self, name: str) -> str:
        return self.etcd_ip if name == ETCD else self.members[name]

    # ------------------------------------------------------------ links

    def cut(self, src: str, dst: str) -> None:
        """Drop every packet ``src`` sends to ``dst`` (one way)."""
        if (src, dst) in self.cuts:
            return
        self._blackhole("add", src, dst)
        self.cuts.add((src, dst))

    def restore(self, src: str, dst: str) -> None:
        if (src, dst) not in self.cuts:
            return
        self._blackhole("del", src, dst)
        self.cuts.discard((src, dst))

    def cut_both(self, a: str, b: str) -> None:
        self.cut(a, b)
        self.cut(b, a)

    def heal(self) -> None:
        for src, dst in sorted(self.cuts):
            self.restore(src, dst)

    def _blackhole(self, op: str, src: str, dst: str) -> None:
        target = f"{self.address(dst)}/32"
        if src == ETCD:
            ip("rule", op, "from", self.etcd_ip, "to", target, "blackhole", "priority", str(RULE_PRIORITY))
        else:
            ip("-n", self.namespace(src), "route", op, "blackhole", target)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.heal()
        for src, dst in list(self.cuts):  # what heal could not drop
            if src == ETCD:
                ip("rule", "del", "from", self.etcd_ip, "to", f"{self.address(dst)}/32", check=False)
        for name in self.members:
            ip("netns", "del", self.namespace(name), check=False)
        if self.up:
            ip("link", "del", self.bridge, check=False)
            self.up = False
