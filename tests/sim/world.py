"""Deterministic simulated world for the real storage shells: loop, processes, network, disk.

Owns: virtual time, simulated processes, the byte-stream network between them and
the nodes' disks - the simulated implementations of the ports the real shells take
(``storage/ports.py``: ``Network``, ``Disk``; ``coordination.clock.Clock``).
Rules (docs/architecture.md §11, docs/testing.md §8):
- one seeded ``random.Random`` per component, derived from the seed by name, and
  no wall clock, thread, socket or file anywhere: a seed replays exactly;
- ``SimLoop`` is an asyncio event loop whose clock is virtual: its "select" never
  blocks, it jumps time to the next timer (TigerBeetle's and FoundationDB's
  simulated time); nothing runnable and no timer left = a stalled world (raised);
  ``run_in_executor`` runs the function on the loop after the calling process's
  seeded disk latency (the journal's sync "thread", the read pool);
- a ``Process`` owns every callback and task created while it runs (a context
  variable): ``kill`` is kill -9 (nothing of that incarnation ever runs again);
  ``start`` runs a fresh incarnation;
- ``SimNetwork``: per-connection FIFO byte streams with a seeded delay per write;
  different connections may overtake each other; a host pair can be clogged for
  a while (its bytes arrive late, in order); a connect to a host whose process is
  down is refused; a killed process's peers see their connections reset after
  every byte it sent before;
- ``SimDisk`` keeps written and durable bytes apart (FoundationDB
  ``AsyncFileNonDurable``): ``fdatasync`` makes a file's bytes durable, an
  ``fsync`` of a directory its names; ``power_loss`` keeps durable bytes and names
  and drops, keeps a prefix of, or tears each file's un-synced writes; an injected
  fdatasync error kills the process (the node exits on one) after a power loss's
  worth of damage to its un-synced bytes.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import os
import random
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage.ports import Buffer, ProtocolFactory


def seeded(seed: int, name: str) -> random.Random:
    """An independent stream per component (string seeds hash with sha512: stable)."""
    return random.Random(f"folio-sim/{seed}/{name}")


class InjectedFault(Exception):
    """An injected fdatasync error. The disk has already killed the process (what the
    node's ``journal_io.fatal`` does on a failed sync); this only unwinds the dead
    process's stack. It is no ``OSError``: that would reach ``fatal``, whose
    ``os._exit`` would end the whole test run instead of one simulated process."""


class Stalled(Exception):
    """Nothing can run any more and no timer is set, but the scenario is not done."""


# ---------------------------------------------------------------- processes and the loop


class Process:
    """One simulated OS process (a storage node, a client)."""

    def __init__(self, loop: SimLoop, name: str, disk_delay_ms: tuple[int, int] = (0, 0)) -> None:
        self.loop = loop
        self.name = name
        self.up = False
        self.incarnation = 0
        self.kills = 0
        self.disk_delay_ms = disk_delay_ms
        self.disk_stall = 0.0  # chance that one disk operation stalls for 20-300 ms
        self.disk_free_at = -1.0  # when its last executor call finishes
        self.rng = seeded(loop.seed, f"process/{name}")
        self.context = contextvars.Context()
        self._first_step = None
        self.on_kill: list[Callable[[Process], None]] = []

    def start(self, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run a new incarnation: ``main()`` as its first task."""
        assert not self.up, f"{self.name} is already running"
        self.incarnation += 1
        self.up = True
        self.context = contextvars.Context()
        self.context.run(PROCESS.set, self)
        self._first_step: Coroutine[Any, Any, None] | None = self._main(main)
        self.loop.create_task(self._first_step, context=self.context)

    async def _main(self, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._first_step = None
        try:
            await main()
        except Exception as exc:
            self.loop.errors.append(f"{self.name}: main task failed: {exc!r}")

    def kill(self) -> None:
        """kill -9: no callback or task of this incarnation runs again."""
        if not self.up:
            return
        self.up = False
        self.kills += 1
        if self._first_step is not None:  # killed before it ran at all
            self._first_step.close()
            self._first_step = None
        for hook in list(self.on_kill):
            hook(self)

    def disk_delay_s(self) -> float:
        low, high = self.disk_delay_ms
        delay = self.rng.randint(low, high) if high else 0
        if self.disk_stall and self.rng.random() < self.disk_stall:
            delay += self.rng.randint(20, 300)
        return delay / 1000


PROCESS: contextvars.ContextVar[Process | None] = contextvars.ContextVar("sim_process", default=None)


def _guarded(process: Process, incarnation: int, callback: Callable[..., Any], *args: Any) -> None:
    if process.up and process.incarnation == incarnation:
        callback(*args)


BUSY_STEPS_MAX = 100_000  # loop rounds at one instant: a busy loop, not progress


class _VirtualSelector:
    """What ``BaseEventLoop._run_once`` waits on: never blocks, moves time instead."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        if timeout is None:
            raise Stalled("no callback runnable and no timer set")
        if timeout > 0:
            self._loop.advance(timeout)
        return []

    def close(self) -> None:
        pass


class SimLoop(asyncio.BaseEventLoop):
    """An asyncio event loop on virtual time; see the module docstring."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.seed = seed
        self._now = 0.0
        self._selector = _VirtualSelector(self)
        self.errors: list[str] = []  # unexpected exceptions in callbacks: each fails the seed
        self.steps = 0
        self.set_exception_handler(self._on_exception)

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        scheduled = self._scheduled
        self._now = max(self._now + seconds, scheduled[0].when() if scheduled else self._now)

    def _process_events(self, event_list: list[Any]) -> None:
        self.steps += 1

    def _write_to_self(self) -> None:
        pass

    def call_soon(
        self, callback: Callable[..., Any], *args: Any, context: contextvars.Context | None = None
    ) -> asyncio.Handle:
        process = PROCESS.get() if context is None else context.get(PROCESS)
        if process is None:
            return super().call_soon(callback, *args, context=context)
        return super().call_soon(_guarded, process, process.incarnation, callback, *args, context=context)

    def call_at(
        self,
        when: float,
        callback: Callable[..., Any],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        process = PROCESS.get() if context is None else context.get(PROCESS)
        if process is None:
            return super().call_at(when, callback, *args, context=context)
        return super().call_at(when, _guarded, process, process.incarnation, callback, *args, context=context)

    def run_in_executor(self, executor: Any, func: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = self.create_future()

        def run() -> None:
            try:
                result = func(*args)
            except Exception as exc:
                if not future.done():
                    future.set_exception(exc)
            else:
                if not future.done():
                    future.set_result(result)

        process = PROCESS.get()
        if process is None:
            self.call_soon(run)
        else:  # one worker per process: calls finish in the order they were made
            when = max(self._now + process.disk_delay_s(), process.disk_free_at + FIFO_STEP_S)
            process.disk_free_at = when
            self.call_at(when, run)
        return future

    def _on_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", ""))
        if message.startswith("Task was destroyed but it is pending"):
            return  # a killed process's task, collected
        exc = context.get("exception")
        if isinstance(exc, InjectedFault):
            return  # it killed its process: nobody is left to retrieve it
        self.errors.append(f"{message}: {exc!r}")

    def close(self) -> None:
        """Close the coroutines of the tasks still pending (a killed process's, the
        world's own at the end) while the loop can still take the callbacks their
        clean-up schedules, which never run; closed later, by the garbage collector,
        they would schedule them on a closed loop and raise there."""
        for task in asyncio.all_tasks(self):
            try:
                task.get_coro().close()
            except RuntimeError:  # a coroutine that awaits in its clean-up: nothing left to run it
                pass
        super().close()

    def run_until(self, done: Callable[[], bool], until_s: float) -> bool:
        """Run until ``done()``; False if virtual time ``until_s`` came first."""
        asyncio.events._set_running_loop(self)
        still, at = 0, self._now
        try:
            while not done():
                if self._now > until_s:
                    return False
                self._run_once()
                still = still + 1 if self._now == at else 0
                at = self._now
                if still > BUSY_STEPS_MAX:
                    raise Stalled(f"busy: {still} loop rounds without time moving at {at:.3f}s")
            return True
        finally:
            asyncio.events._set_running_loop(None)


class SimClock:
    """The ``Clock`` port: milliseconds of the loop's virtual time."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop

    def now_ms(self) -> int:
        return int(self._loop.time() * 1000)


# ---------------------------------------------------------------- network


@dataclass(frozen=True, slots=True)
class NetConfig:
    delay_min_ms: int = 1
    delay_max_ms: int = 4
    jitter: bool = True  # False: a fixed delay, so nothing is ever reordered
    spike_chance: float = 0.0  # a slow write (e.g. a stalled connection)
    spike_ms: int = 0


FIFO_STEP_S = 1e-6


class SimTransport(asyncio.Transport):
    """One end of a simulated stream connection."""

    def __init__(self, net: SimNetwork, process: Process, host: str, peer_host: str, peer_port: int) -> None:
        super().__init__()
        self._net = net
        self.process = process
        self.host = host
        self._peer_address = (peer_host, peer_port)
        self.peer: SimTransport | None = None
        self.protocol: asyncio.Protocol | None = None
        self.closed = False
        self._paused = False
        self._held: list[bytes] = []
        self._eof = False

    # ------------------------------------------------------------ asyncio.Transport

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._peer_address if name == "peername" else default

    def is_closing(self) -> bool:
        return self.closed

    def write(self, data: Buffer) -> None:
        if self.closed or not data or self.peer is None:
            return
        self._net.deliver(self, self.peer, bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        if self._paused:
            self._paused = False
            self._net.loop.call_soon(self._release, context=self.process.context)

    def is_reading(self) -> bool:
        return not self._paused

    def close(self) -> None:
        self._shut(None)

    def abort(self) -> None:
        self._shut(ConnectionResetError(errno.ECONNRESET, "connection reset by peer"))

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self.protocol is not None
        return self.protocol

    # ------------------------------------------------------------ the network's side

    def _shut(self, peer_error: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        if self.peer is not None:
            self._net.hang_up(self, self.peer, peer_error)
        protocol = self.protocol
        if protocol is not None:
            self._net.loop.call_soon(protocol.connection_lost, None, context=self.process.context)

    def received(self, data: bytes) -> None:
        if self.closed or self.protocol is None:
            return
        if self._paused or self._held:
            self._held.append(data)
            return
        self.protocol.data_received(data)

    def _release(self) -> None:
        while self._held and not self._paused and not self.closed and self.protocol is not None:
            self.protocol.data_received(self._held.pop(0))
        if self._eof and not self._held:
            self.lost(self._eof_error)

    def lost(self, exc: Exception | None) -> None:
        """The peer closed (None) or reset the connection."""
        if self.closed:
            return
        if self._held:  # bytes that arrived before the close are read first
            self._eof, self._eof_error = True, exc
            return
        self.closed = True
        if self.protocol is not None:
            self.protocol.connection_lost(exc)

    _eof_error: Exception | None = None


class SimListener:
    def __init__(
        self, net: SimNetwork, process: Process, address: tuple[str, int], factory: ProtocolFactory
    ) -> None:
        self._net = net
        self.process = process
        self.address = address
        self.factory = factory
        self.incarnation = process.incarnation

    def close(self) -> None:
        if self._net.listeners.get(self.address) is self:
            del self._net.listeners[self.address]

    async def wait_closed(self) -> None:
        return None

    @property
    def live(self) -> bool:
        return self.process.up and self.process.incarnation == self.incarnation


class HostNetwork:
    """The ``Network`` port of one process (its host name is its address)."""

    def __init__(self, net: SimNetwork, process: Process) -> None:
        self._net = net
        self._process = process

    async def connect(
        self, host: str, port: int, factory: ProtocolFactory
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        return await self._net.connect(self._process, host, port, factory)

    async def listen(
        self, host: str, port: int, factory: ProtocolFactory, backlog: int
    ) -> tuple[SimListener, tuple[str, int]]:
        listener = SimListener(self._net, self._process, (self._process.name, port), factory)
        self._net.listeners[listener.address] = listener
        return listener, listener.address


class SimNetwork:
    def __init__(self, loop: SimLoop, rng: random.Random, config: NetConfig) -> None:
        self.loop = loop
        self._rng = rng
        self.config = config
        self.listeners: dict[tuple[str, int], SimListener] = {}
        self._ends: dict[str, list[SimTransport]] = {}  # process name -> its open ends
        self._path_last: dict[tuple[int, int], float] = {}  # (id of sender end, of receiver end)
        self._clogged: dict[tuple[str, str], float] = {}  # host pair -> nothing arrives before
        # observers of the bytes of each write: when it is sent, and when it arrives
        self.sent_taps: list[Callable[[SimTransport, SimTransport, bytes], None]] = []
        self.arrival_taps: list[Callable[[SimTransport, SimTransport, bytes], None]] = []
        self.writes = 0
        self.refused = 0
        self.resets = 0

    def port(self, process: Process) -> HostNetwork:
        process.on_kill.append(self._killed)
        return HostNetwork(self, process)

    def _delay_s(self) -> float:
        c = self.config
        delay = self._rng.randint(c.delay_min_ms, c.delay_max_ms) if c.jitter else c.delay_min_ms
        if c.spike_chance and self._rng.random() < c.spike_chance:
            delay += self._rng.randint(c.spike_ms // 2, c.spike_ms)
        return delay / 1000

    def _arrival(self, src: SimTransport, dst: SimTransport) -> float:
        when = self.loop.time() + self._delay_s()
        key = (id(src), id(dst))
        # strictly after the path's previous arrival: the loop's timer heap does not keep
        # the order of equal times
        last = self._path_last.get(key)
        floor = last + FIFO_STEP_S if last is not None else 0.0
        when = max(when, floor, self._clogged.get((src.host, dst.host), 0.0))
        self._path_last[key] = when
        return when

    def clog(self, src_host: str, dst_host: str, until_s: float) -> None:
        """Stall src->dst: what is sent meanwhile arrives at ``until_s`` or later, in order."""
        key = (src_host, dst_host)
        self._clogged[key] = max(self._clogged.get(key, 0.0), until_s)

    async def connect(
        self, process: Process, host: str, port: int, factory: ProtocolFactory
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        await asyncio.sleep(self._delay_s())  # the SYN
        listener = self.listeners.get((host, port))
        if listener is None or not listener.live:
            self.refused += 1
            await asyncio.sleep(self._delay_s())  # the RST
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"connect to {host}:{port} refused")
        client = SimTransport(self, process, process.name, host, port)
        server = SimTransport(self, listener.process, host, process.name, 40000 + len(self._path_last))
        client.peer, server.peer = server, client
        self._ends.setdefault(process.name, []).append(client)
        self._ends.setdefault(listener.process.name, []).append(server)

        def accept() -> None:
            protocol = listener.factory()
            server.protocol = protocol
            protocol.connection_made(server)

        self.loop.call_soon(accept, context=listener.process.context)
        protocol = factory()
        client.protocol = protocol
        protocol.connection_made(client)
        await asyncio.sleep(self._delay_s())  # the SYN-ACK
        return client, protocol

    def deliver(self, src: SimTransport, dst: SimTransport, data: bytes) -> None:
        self.writes += 1
        for tap in self.sent_taps:
            tap(src, dst, data)
        self.loop.call_at(self._arrival(src, dst), self._arrive, src, dst, data, context=dst.process.context)

    def _arrive(self, src: SimTransport, dst: SimTransport, data: bytes) -> None:
        if dst.closed:
            return
        for tap in self.arrival_taps:
            tap(src, dst, data)
        dst.received(data)

    def hang_up(self, src: SimTransport, dst: SimTransport, error: Exception | None) -> None:
        if error is not None:
            self.resets += 1
        self.loop.call_at(self._arrival(src, dst), dst.lost, error, context=dst.process.context)

    def _killed(self, process: Process) -> None:
        for end in self._ends.pop(process.name, []):
            if not end.closed:
                end.closed = True
                if end.peer is not None and not end.peer.closed:
                    self.hang_up(end, end.peer, ConnectionResetError(errno.ECONNRESET, "peer process died"))
        for address, listener in list(self.listeners.items()):
            if listener.process is process:
                del self.listeners[address]


# ---------------------------------------------------------------- disk


class Inode:
    __slots__ = ("data", "dirty_from", "synced")

    def __init__(self) -> None:
        self.data = bytearray()  # what reads see (written, maybe not durable)
        self.synced = bytearray()  # what survives a power loss
        self.dirty_from: int | None = None  # bytes from here on may differ from ``synced``

    def wrote(self, offset: int) -> None:
        self.dirty_from = offset if self.dirty_from is None else min(self.dirty_from, offset)

    def sync(self) -> None:
        if self.dirty_from is not None:
            self.synced[self.dirty_from :] = self.data[self.dirty_from :]
            self.dirty_from = None


CRASH_MODES = ("drop", "prefix", "torn")
SECTOR_BYTES = 512


class SimDisk:
    """One node's file system: names and bytes, each with a durable state."""

    def __init__(self, rng: random.Random, fsync_enabled: bool = True, fsync_error_after: int = 0) -> None:
        self._rng = rng
        self.fsync_enabled = fsync_enabled  # False: fdatasync returns without making anything durable
        self.fsync_error_after = fsync_error_after  # the N-th fdatasync fails with EIO (0: never)
        self.dirs: dict[str, dict[str, Inode]] = {}
        self.durable_dirs: dict[str, dict[str, Inode]] = {}
        self.syncs = 0
        self.crash_notes: list[str] = []
        self.fsync_errors = 0

    def _split(self, path: str | Path) -> tuple[str, str]:
        directory, _, name = str(path).rpartition("/")
        if directory not in self.dirs:
            raise FileNotFoundError(errno.ENOENT, f"no directory {directory}", str(path))
        return directory, name

    def lookup(self, path: str | Path) -> Inode:
        directory, name = self._split(path)
        inode = self.dirs[directory].get(name)
        if inode is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
        return inode

    def sync_file(self, inode: Inode) -> None:
        self.syncs += 1
        if self.fsync_enabled:
            inode.sync()

    def sync_dir(self, directory: str) -> None:
        self.syncs += 1
        if self.fsync_enabled:
            self.durable_dirs[directory] = dict(self.dirs[directory])

    def power_loss(self) -> None:
        """Every file keeps its durable bytes and a seeded fate for the rest; every
        directory its durable names."""
        inodes: dict[int, Inode] = {}
        for directory in sorted(self.durable_dirs):
            for name, inode in sorted(self.durable_dirs[directory].items()):
                inodes.setdefault(id(inode), inode)
                self._lose_tail(f"{directory}/{name}", inode)
        self.dirs = {d: dict(names) for d, names in self.durable_dirs.items()}

    def _lose_tail(self, name: str, inode: Inode) -> None:
        start = inode.dirty_from
        if start is None:
            return
        new = inode.data[start:]
        mode = self._rng.choice(CRASH_MODES)
        keep = 0 if mode == "drop" else self._rng.randint(0, len(new))
        result = bytearray(inode.synced)
        result[start : start + keep] = new[:keep]
        if mode == "torn":
            at = start + keep
            if self._rng.random() < 0.5:
                garbage = bytes(self._rng.getrandbits(8) for _ in range(self._rng.randint(1, 24)))
            else:
                garbage = bytes(-at % SECTOR_BYTES or SECTOR_BYTES)  # zeros to the sector end
            result[at : at + len(garbage)] = garbage
        inode.data = result
        inode.synced = bytearray(result)
        inode.dirty_from = None
        self.crash_notes.append(f"{name}:{mode} kept {keep}/{len(new)}")

    @property
    def unsynced_bytes(self) -> int:
        return sum(
            len(inode.data) - inode.dirty_from
            for names in self.dirs.values()
            for inode in names.values()
            if inode.dirty_from is not None
        )


class SimDiskPort:
    """The ``Disk`` port of one process incarnation over a ``SimDisk`` (its own fds)."""

    def __init__(self, disk: SimDisk, process: Process) -> None:
        self._disk = disk
        self._process = process
        self._fds: dict[int, Inode | str] = {}  # fd -> file, or the path of a directory
        self._next_fd = 3

    def _file(self, fd: int) -> Inode:
        inode = self._fds[fd]
        assert isinstance(inode, Inode), "not a file"
        return inode

    def open(self, path: str | Path, flags: int, mode: int = 0o777) -> int:
        disk = self._disk
        if flags & os.O_DIRECTORY:
            if str(path) not in disk.dirs:
                raise FileNotFoundError(errno.ENOENT, "no such directory", str(path))
            target: Inode | str = str(path)
        else:
            directory, name = disk._split(path)
            names = disk.dirs[directory]
            existing = names.get(name)
            if existing is not None and flags & os.O_CREAT and flags & os.O_EXCL:
                raise FileExistsError(errno.EEXIST, "file exists", str(path))
            if existing is None:
                if not flags & os.O_CREAT:
                    raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
                existing = names[name] = Inode()
            elif flags & os.O_TRUNC:
                existing.wrote(0)
                del existing.data[:]
            target = existing
        fd = self._next_fd
        self._next_fd += 1
        self._fds[fd] = target
        return fd

    def close(self, fd: int) -> None:
        if self._fds.pop(fd, None) is None:
            raise OSError(errno.EBADF, "bad file descriptor")

    def write(self, fd: int, data: Buffer) -> int:
        inode = self._file(fd)
        inode.wrote(len(inode.data))
        inode.data += data
        return len(data)

    def pwritev(self, fd: int, buffers: Sequence[Buffer], offset: int) -> int:
        inode = self._file(fd)
        data = b"".join(buffers)
        if offset > len(inode.data):
            inode.wrote(len(inode.data))
            inode.data += bytes(offset - len(inode.data))
        inode.wrote(offset)
        inode.data[offset : offset + len(data)] = data
        return len(data)

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        return bytes(self._file(fd).data[offset : offset + length])

    def _fail_injected(self) -> None:
        disk = self._disk
        if disk.fsync_error_after and disk.syncs + 1 >= disk.fsync_error_after:
            disk.fsync_errors += 1
            disk.fsync_error_after = 0
            disk.power_loss()  # the pages a sync failed on are in no known state
            self._process.kill()  # the node exits on a failed sync (journal_io.fatal)
            raise InjectedFault(f"simulated fdatasync failure (EIO) on {self._process.name}")

    def fdatasync(self, fd: int) -> None:
        self._fail_injected()
        self._disk.sync_file(self._file(fd))

    def fsync(self, fd: int) -> None:
        self._fail_injected()
        target = self._fds[fd]
        if isinstance(target, str):
            self._disk.sync_dir(target)
        else:
            self._disk.sync_file(target)

    def posix_fallocate(self, fd: int, offset: int, length: int) -> None:
        inode = self._file(fd)
        if offset + length > len(inode.data):
            inode.wrote(len(inode.data))
            inode.data += bytes(offset + length - len(inode.data))

    def posix_fadvise(self, fd: int, offset: int, length: int, advice: int) -> None:
        self._file(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        inode = self._file(fd)
        inode.wrote(min(length, len(inode.data)))
        del inode.data[length:]

    def truncate(self, path: str | Path, length: int) -> None:
        inode = self._disk.lookup(path)
        inode.wrote(min(length, len(inode.data)))
        del inode.data[length:]

    def fsize(self, fd: int) -> int:
        return len(self._file(fd).data)

    def size(self, path: Path) -> int:
        return len(self._disk.lookup(path).data)

    def replace(self, src: str | Path, dst: str | Path) -> None:
        disk = self._disk
        src_dir, src_name = disk._split(src)
        dst_dir, dst_name = disk._split(dst)
        inode = disk.dirs[src_dir].pop(src_name)
        disk.dirs[dst_dir][dst_name] = inode

    def unlink(self, path: Path) -> None:
        directory, name = self._disk._split(path)
        self._disk.dirs[directory].pop(name, None)

    def read_bytes(self, path: Path) -> bytes:
        return bytes(self._disk.lookup(path).data)

    def exists(self, path: Path) -> bool:
        disk = self._disk
        if str(path) in disk.dirs:
            return True
        directory, _, name = str(path).rpartition("/")
        return name in disk.dirs.get(directory, {})

    def listdir(self, directory: Path) -> list[str]:
        names = self._disk.dirs.get(str(directory))
        if names is None:
            raise FileNotFoundError(errno.ENOENT, "no such directory", str(directory))
        return sorted(names)

    def makedirs(self, directory: Path) -> None:
        disk = self._disk
        path = str(directory)
        while path and path not in disk.dirs:  # directories are created durably (simplification)
            disk.dirs[path] = {}
            disk.durable_dirs[path] = {}
            path = path.rpartition("/")[0]
