"""The fault run's network: one Linux network namespace per storage node and gateway on
one bridge, and the links between them that the nemesis cuts and heals one by one.

Owns: one run's bridge (its host side carries ``client_ip``, the workload's
address), each process's namespace and address - every etcd member's too - and the
blackholes that cut links. Rules: a cut from A to B drops every packet A sends to
B - a route of type ``blackhole`` in A's namespace (A's own new connections to B
fail at once with EINVAL, B's to A time out silently, established ones stall). The
name ``ETCD`` stands for every etcd member: a cut to or from it is a cut to or from
each (the workload, in the run's own namespace, is never cut). A cut both ways is
two one-way cuts. The bridge
has no route out of the machine (addresses in 10.89.0.0/16, nothing forwards them).
``close()`` drops every cut, the namespaces and the bridge - also after a failure.
The kernel here has no packet filter (no nftables or iptables, no tc actions), so
blackhole routes are the only cut there is: documented in docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from dataclasses import dataclass, field

ETCD = "etcd"


def ip(*args: str, check: bool = True) -> bool:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.returncode == 0


def free_tag(tag: str) -> str:
    """``tag`` or the next number after it that no link or namespace on the machine
    uses: a run that died before ``close()`` leaves its bridge, links or namespaces
    behind, and a later run in a process with the same PID modulo 10,000 must not
    trip over them."""

    def listed(*args: str) -> str:
        return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30).stdout

    names = set(re.findall(r"\bflt(\d+)", listed("-o", "link") + "\n" + listed("netns", "list")))
    number = int(tag)
    while str(number) in names:
        number = (number + 1) % 10_000
    return str(number)


@dataclass
class Network:
    """Namespaces on one bridge; ``add`` one per process before it starts."""

    tag: str = field(default_factory=lambda: f"{os.getpid() % 10_000}")
    subnet: int = field(default_factory=lambda: 1 + os.getpid() % 250)  # 10.89.<subnet>.0/24
    members: dict[str, str] = field(default_factory=dict)  # process name -> its address
    etcd_members: list[str] = field(default_factory=list)  # the names ETCD stands for
    cuts: set[tuple[str, str]] = field(default_factory=set)  # (from, to): from's packets dropped
    up: bool = False

    @property
    def bridge(self) -> str:
        return f"flt{self.tag}"

    @property
    def client_ip(self) -> str:
        return f"10.89.{self.subnet}.1"

    def namespace(self, name: str) -> str:
        return f"flt{self.tag}-{name}"

    def start(self) -> None:
        taken = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, timeout=30).stdout
        while f" 10.89.{self.subnet}." in taken:  # another run's bridge (two runs side by side)
            self.subnet = 1 + self.subnet % 250
        self.tag = free_tag(self.tag)
        ip("link", "add", self.bridge, "type", "bridge")
        self.up = True
        ip("addr", "add", f"{self.client_ip}/24", "dev", self.bridge)
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

    def add_etcd_member(self, name: str) -> str:
        """A namespace for etcd member ``name``; ``ETCD`` now stands for it too."""
        self.etcd_members.append(name)
        return self.add(name)

    def _expand(self, name: str) -> list[str]:
        return list(self.etcd_members) if name == ETCD else [name]

    # ------------------------------------------------------------ links

    def cut(self, src: str, dst: str) -> None:
        """Drop every packet ``src`` sends to ``dst`` (one way)."""
        for a in self._expand(src):
            for b in self._expand(dst):
                if (a, b) not in self.cuts:
                    ip("-n", self.namespace(a), "route", "add", "blackhole", f"{self.members[b]}/32")
                    self.cuts.add((a, b))

    def restore(self, src: str, dst: str) -> None:
        for a in self._expand(src):
            for b in self._expand(dst):
                if (a, b) in self.cuts:
                    ip("-n", self.namespace(a), "route", "del", "blackhole", f"{self.members[b]}/32")
                    self.cuts.discard((a, b))

    def cut_both(self, a: str, b: str) -> None:
        self.cut(a, b)
        self.cut(b, a)

    def heal(self) -> None:
        for src, dst in sorted(self.cuts):
            self.restore(src, dst)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.heal()
        for i, name in enumerate(self.members):  # a namespace's routes go with it
            # The veth first: a namespace outlives ``netns del`` while a process that has
            # not yet exited is still in it, and so would its end of the link.
            ip("link", "del", f"flt{self.tag}v{i}", check=False)
            ip("netns", "del", self.namespace(name), check=False)
        if self.up:
            ip("link", "del", self.bridge, check=False)
            self.up = False
