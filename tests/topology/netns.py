"""Compose's network, users and restarts, made of Linux network namespaces on one bridge.

Owns: one run's bridge, its namespaces (one per compose service and one for the
client), each namespace's ``/etc/netns/<ns>/`` files (``hosts`` naming every service
as compose's DNS would, ``passwd``/``group`` holding the image's ``folio`` user; ``ip
netns exec`` mounts them over ``/etc``), the per-service directories, and every
process started in them. Rules: names are unique per run; processes run as the
service's user (``setpriv``), with the image's ENV, ``:ro`` volumes bound read-only in
the service's mount namespace; ``restart: on-failure`` is
honoured as Docker does (backoff from 100 ms, doubling); ``stop()`` ends the
processes it started by PID, then what is left in its own namespaces (``ip netns
pids``), deletes the namespaces, the bridge and the ``/etc/netns`` directories -
also after a failure.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from compose_model import ServiceRun

SUBNET = ipaddress.ip_network("10.88.0.0/24")  # the bridge has no host address: no route, no clash
CLIENT = "client"


def ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr.strip()}"


def free_system_id() -> int:
    """A uid (and gid) in the system range used by no account here, as `useradd --system` picks."""
    used = {p.pw_uid for p in pwd.getpwall()} | {int(line.split(":")[2]) for line in _lines("/etc/group")}
    return next(i for i in range(999, 100, -1) if i not in used)


def _lines(path: str) -> list[str]:
    return [line for line in Path(path).read_text().splitlines() if line.count(":") >= 3]


@dataclass
class Running:
    run: ServiceRun
    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    starts: int = 1
    exits: list[int] = field(default_factory=list)
    retry_at: float = 0.0
    backoff: float = 0.1


class Topology:
    def __init__(self, root: Path, path: str, folio_user: str, argv0: dict[str, str]) -> None:
        self.root = root
        self.argv0 = argv0  # an image's executables on this machine (the etcd image's `etcd`)
        self.path = path  # PATH inside the "containers": the venv's bin first, as the image's pip install
        self.tag = f"{os.getpid() % 100000:05d}{os.urandom(1).hex()}"
        self.bridge = f"fb{self.tag}"
        self.folio_user = folio_user
        self.uid = free_system_id()
        self.addresses: dict[str, str] = {}
        self.namespaces: dict[str, str] = {}
        self.running: dict[str, Running] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._monitor = threading.Thread(target=self._watch, daemon=True)

    # -------------------------------------------------------------- network

    def create(self, names: list[str], homes: dict[str, Path]) -> None:
        """The bridge and a namespace per name (+ the client's); ``homes``: where each
        service's ``/var/lib/folio`` (the image's home of ``folio``) is on this machine."""
        ip("link", "add", self.bridge, "type", "bridge")
        ip("link", "set", self.bridge, "up")
        hosts = list(SUBNET.hosts())
        for index, name in enumerate([*names, CLIENT]):
            ns, veth = f"fo{self.tag}-{name}", f"fv{self.tag}{index:02d}"
            self.namespaces[name], self.addresses[name] = ns, str(hosts[index + 1])
            ip("netns", "add", ns)
            ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("link", "set", veth, "master", self.bridge)
            ip("link", "set", veth, "up")
            ip("-n", ns, "addr", "add", f"{self.addresses[name]}/{SUBNET.prefixlen}", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
        for name, ns in self.namespaces.items():
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            names_here = [f"{a}\t{n}" for n, a in self.addresses.items()]
            own = f"{self.addresses[name]}\t{socket.gethostname()}"  # the "container's" hostname
            (etc / "hosts").write_text("\n".join(["127.0.0.1\tlocalhost", own, *names_here]) + "\n")
            home = homes.get(name, self.root / "workdir")  # `useradd --system --home /var/lib/folio`
            account = f"{self.folio_user}:x:{self.uid}:{self.uid}::{home}:/usr/sbin/nologin"
            (etc / "passwd").write_text(Path("/etc/passwd").read_text().rstrip("\n") + f"\n{account}\n")
            group = f"{self.folio_user}:x:{self.uid}:"
            (etc / "group").write_text(Path("/etc/group").read_text().rstrip("\n") + f"\n{group}\n")

    def exec_prefix(self, name: str, user: str = "root", read_only: tuple[Path, ...] = ()) -> list[str]:
        """``ip netns exec`` into ``name``'s namespace (and a mount namespace of its own), with
        ``read_only`` directories bound read-only there (compose's ``:ro``), as ``user``."""
        steps = [
            f"mount --bind {d} {d} && mount -o remount,bind,ro {d}"
            for d in map(shlex.quote, map(str, read_only))
        ]
        setpriv: list[str] = []
        if user != "root":
            assert user == self.folio_user, f"no account {user!r} in the image"
            steps += self._interpreter_view()
            setpriv = ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--"]
        prefix = ["ip", "netns", "exec", self.namespaces[name]]
        if steps:
            prefix += ["sh", "-c", " && ".join([*steps, 'exec "$@"']), "sh"]
        return prefix + setpriv

    def _interpreter_view(self) -> list[str]:
        """In the image, Python is readable by every user; this machine's may sit under a
        private directory (a pyenv in /root). In the service's own mount namespace (``ip netns
        exec`` makes one) a tmpfs covers that directory, with the interpreter's tree bound back
        in its place: the same path, now reachable. The host's mounts are untouched."""
        interpreter = Path(sys.base_prefix).resolve()
        private = next((p for p in reversed(interpreter.parents) if not p.stat().st_mode & 0o001), None)
        if private is None:
            return []
        tree, stash = (
            shlex.quote(str(private / interpreter.relative_to(private).parts[0])),
            self.root / "interpreter",
        )
        stash.mkdir(exist_ok=True)
        return [
            f"mount --bind {tree} {stash} && mount -t tmpfs -o mode=755 tmpfs {shlex.quote(str(private))}"
            f" && mkdir -p {tree} && mount --bind {stash} {tree}"
        ]

    # -------------------------------------------------------------- processes

    def prepare_dirs(self, run: ServiceRun, owned_by_folio: set[str]) -> None:
        """Create the service's mount directories; those at ``owned_by_folio`` targets get
        the image's ownership (Docker fills a new volume from the image's directory)."""
        for target, host_dir in run.mounts.items():
            host_dir.mkdir(parents=True, exist_ok=True)
            if target in owned_by_folio:
                os.chown(host_dir, self.uid, self.uid)

    def start(self, run: ServiceRun) -> None:
        env = {
            "PATH": self.path,
            "HOSTNAME": socket.gethostname(),
            "HOME": str(run.mounts.get("/var/lib/folio", self.root / "workdir")),
            **run.env,
        }
        argv = [self.argv0.get(run.argv[0], run.argv[0]), *run.argv[1:]]
        log = (self.root / "logs" / f"{run.name}.log").open("ab")
        proc = subprocess.Popen(
            [*self.exec_prefix(run.name, run.user, tuple(run.mounts[t] for t in run.read_only)), *argv],
            env=env,
            cwd=self.root / "workdir",  # the image's WORKDIR: root's, not writable by folio
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        with self._lock:
            previous = self.running.get(run.name)
            self.running[run.name] = Running(run, proc, log, starts=previous.starts + 1 if previous else 1)
            if previous:
                self.running[run.name].exits = previous.exits
                self.running[run.name].backoff = previous.backoff
                previous.log.close()
        if not self._monitor.is_alive() and not self._stop.is_set():
            self._monitor.start()

    def wait_exit(self, name: str, timeout_s: float) -> int:
        return self.running[name].proc.wait(timeout_s)

    def _watch(self) -> None:
        """Docker's restart policy: a service that exits is started again after a backoff."""
        while not self._stop.wait(0.1):
            now = time.monotonic()
            with self._lock:
                items = list(self.running.values())
            for item in items:
                code = item.proc.poll()
                if code is None or self._stop.is_set():
                    continue
                policy = item.run.restart
                again = policy in ("always", "unless-stopped") or (policy == "on-failure" and code != 0)
                if not again:
                    continue
                if item.retry_at == 0.0:
                    item.exits.append(code)
                    item.retry_at, item.backoff = now + item.backoff, min(item.backoff * 2, 60.0)
                elif now >= item.retry_at:
                    self.start(item.run)

    def log_tail(self, name: str, size: int = 3000) -> str:
        path = self.root / "logs" / f"{name}.log"
        return path.read_bytes()[-size:].decode(errors="replace") if path.exists() else ""

    # -------------------------------------------------------------- teardown

    def stop(self) -> None:
        self._stop.set()
        if self._monitor.is_alive():
            self._monitor.join(5)
        with self._lock:
            items = list(self.running.values())
        for item in items:
            if item.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(item.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for item in items:
            with contextlib.suppress(subprocess.TimeoutExpired):
                item.proc.wait(max(0.1, deadline - time.monotonic()))
            if item.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(item.proc.pid, signal.SIGKILL)
                item.proc.wait(10)
            item.log.close()
        for ns in self.namespaces.values():
            self._kill_left_in(ns)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)

    @staticmethod
    def _kill_left_in(ns: str) -> None:
        """Children our processes left behind (a Spark JVM) are in our namespace: end them."""
        for _ in range(20):
            done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            pids = [int(p) for p in done.stdout.split()]
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
