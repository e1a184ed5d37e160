"""Deterministic simulated world for the storage layer: clock, events, network, disk, etcd.

Owns: simulated time, the event queue, message paths between endpoints, the
simulated disks, and the way simulated clients reach the (real) ``MemoryStore``.
Rules (docs/architecture.md §11, docs/testing.md §2):
- one seeded ``random.Random`` per component, derived from the seed by name, and
  no wall clock anywhere: a seed replays exactly;
- ``SimClock`` only moves when nothing is runnable at the current instant, and
  then straight to the next deadline (the next queued event);
- ``SimNetwork``: one FIFO path per (src, dst) connection with a seeded delay;
  different connections may overtake each other (``jitter``); a connection can
  be clogged for a while (its traffic arrives late, in order); a message to a
  crashed node (or to an older incarnation of it) is lost, and the sender hears
  "connection reset" on the same path, after every earlier reply;
- ``SimDisk`` keeps written and durable bytes apart (FoundationDB
  ``AsyncFileNonDurable``): ``sync`` makes a prefix durable (a no-op when fsync is
  disabled, for the control run); ``crash`` drops, keeps a prefix of, or tears
  the un-synced tail, never touching synced bytes;
- metadata calls run the real async ``MemoryStore`` to completion at one
  instant (``run_now``: its only suspension is ``asyncio.sleep(0)``), with a
  seeded round-trip delay on each side, so a CAS is atomic at a point in time.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


def seeded(seed: int, name: str) -> random.Random:
    """An independent stream per component (string seeds hash with sha512: stable)."""
    return random.Random(f"folio-sim/{seed}/{name}")


class SimClock:
    """The ``Clock`` port for the simulation (``now_ms``); only the scheduler moves it."""

    def __init__(self) -> None:
        self._now = 0

    def now_ms(self) -> int:
        return self._now

    def _advance_to(self, time_ms: int) -> None:
        assert time_ms >= self._now, "time never goes back"
        self._now = time_ms


class Scheduler:
    """A queue of (time, sequence, callback); equal times run in submission order."""

    EVENTS_MAX = 300_000  # a runaway scenario stops here (a seed needs a few thousand)

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self._heap: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.steps = 0

    def at(self, time_ms: int, fn: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (max(time_ms, self.clock.now_ms()), self._seq, fn))
        self._seq += 1

    def after(self, delay_ms: int, fn: Callable[[], None]) -> None:
        self.at(self.clock.now_ms() + delay_ms, fn)

    def soon(self, fn: Callable[[], None]) -> None:
        self.at(self.clock.now_ms(), fn)

    def run(self, done: Callable[[], bool], until_ms: int, after_step: Callable[[], None]) -> bool:
        """Run events until ``done()``; False if time or the event budget ran out first."""
        while not done():
            if not self._heap or self.steps >= self.EVENTS_MAX:
                return False
            if self._heap[0][0] > until_ms:
                return False
            time_ms, _, fn = heapq.heappop(self._heap)
            self.clock._advance_to(time_ms)
            fn()
            self.steps += 1
            after_step()
        return True


class Timer:
    """One re-armable deadline for a core (``next_deadline_ms``); stale firings are ignored.

    A core whose ``on_timer`` leaves its deadline at or before "now" would make a
    real shell spin; after ``SPINS_MAX`` such firings in a row the timer reports
    it through ``on_spin`` and stays disarmed (a liveness bug, not a hang)."""

    SPINS_MAX = 1000

    def __init__(
        self, sched: Scheduler, fire: Callable[[], None], on_spin: Callable[[str], None] | None = None
    ) -> None:
        self._sched = sched
        self._fire = fire
        self._on_spin = on_spin
        self._at: int | None = None
        self._generation = 0
        self._spins = 0
        self.spun = False

    def arm(self, deadline_ms: int | None) -> None:
        if deadline_ms == self._at or self.spun:
            return
        self._generation += 1
        self._at = deadline_ms
        if deadline_ms is not None:
            generation = self._generation
            self._sched.at(deadline_ms, lambda: self._run(generation))

    def cancel(self) -> None:
        self.arm(None)

    def _run(self, generation: int) -> None:
        if generation != self._generation:
            return
        self._at = None
        self._fire()
        now = self._sched.clock.now_ms()
        self._spins = self._spins + 1 if self._at is not None and self._at <= now else 0
        if self._spins >= self.SPINS_MAX:
            self.cancel()
            self.spun = True
            if self._on_spin is not None:
                self._on_spin(f"{self._fire.__qualname__} keeps asking to be woken at {now}ms (busy loop)")


# ---------------------------------------------------------------- network


class Endpoint(Protocol):
    name: str
    up: bool
    incarnation: int

    def receive(self, message: Any, src: str) -> None: ...

    def on_disconnect(self, peer: str, incarnation: int) -> None:
        """The connection to ``peer`` as of ``incarnation`` (and older) was reset."""
        ...


@dataclass(frozen=True, slots=True)
class NetConfig:
    delay_min_ms: int = 1
    delay_max_ms: int = 4
    jitter: bool = True  # False: a fixed delay, so nothing is ever reordered
    spike_chance: float = 0.0  # a slow message (e.g. a stalled connection)
    spike_ms: int = 0


class SimNetwork:
    def __init__(self, sched: Scheduler, rng: random.Random, config: NetConfig) -> None:
        self._sched = sched
        self._rng = rng
        self.config = config
        self._endpoints: dict[str, Endpoint] = {}
        self._path_last: dict[tuple[str, str], int] = {}
        self._clogged: dict[tuple[str, str], int] = {}  # path -> nothing delivered before this time
        self.sent = 0
        self.lost = 0

    def register(self, endpoint: Endpoint) -> None:
        self._endpoints[endpoint.name] = endpoint

    def incarnation(self, name: str) -> int:
        return self._endpoints[name].incarnation

    def _delay(self) -> int:
        c = self.config
        if not c.jitter:
            return c.delay_min_ms
        delay = self._rng.randint(c.delay_min_ms, c.delay_max_ms)
        if c.spike_chance and self._rng.random() < c.spike_chance:
            delay += self._rng.randint(c.spike_ms // 2, c.spike_ms)
        return delay

    def _on_path(self, src: str, dst: str, fn: Callable[[], None]) -> None:
        """Deliver ``fn`` after a seeded delay, never before earlier traffic on src->dst."""
        time_ms = self._sched.clock.now_ms() + self._delay()
        key = (src, dst)
        time_ms = max(time_ms, self._path_last.get(key, 0), self._clogged.get(key, 0))
        self._path_last[key] = time_ms
        self._sched.at(time_ms, fn)

    def clog(self, src: str, dst: str, until_ms: int) -> None:
        """Stall the src->dst connection: what is sent meanwhile arrives at ``until_ms``
        or later, still in order (FoundationDB clogging; a paused or slow process)."""
        key = (src, dst)
        self._clogged[key] = max(self._clogged.get(key, 0), until_ms)

    def send(self, src: str, dst: str, message: Any) -> None:
        target = self._endpoints[dst]
        self.sent += 1
        if not target.up:  # connection refused: the sender hears it, nothing arrives
            self.lost += 1
            self._reset(dst, src, target.incarnation)
            return
        incarnation = target.incarnation

        def deliver() -> None:
            if target.up and target.incarnation == incarnation:
                target.receive(message, src)
            else:
                self.lost += 1  # the process it was sent to is gone

        self._on_path(src, dst, deliver)

    def node_crashed(self, node: str, incarnation: int) -> None:
        """Every other endpoint sees its connection to ``node``'s process ``incarnation``
        reset, after that process's earlier replies."""
        for name in sorted(self._endpoints):
            if name != node:
                self._reset(node, name, incarnation)

    def _reset(self, peer: str, to: str, incarnation: int) -> None:
        endpoint = self._endpoints[to]
        self._on_path(peer, to, lambda: endpoint.on_disconnect(peer, incarnation))


# ---------------------------------------------------------------- disk


class SimFile:
    __slots__ = ("data", "durable")

    def __init__(self) -> None:
        self.data = bytearray()
        self.durable = 0  # bytes [0, durable) survive a crash


CRASH_MODES = ("drop", "prefix", "torn")
SECTOR_BYTES = 512


class SimDisk:
    """Files of written bytes with a durable prefix; see the module docstring."""

    def __init__(self, rng: random.Random, fsync_enabled: bool = True) -> None:
        self._rng = rng
        self.fsync_enabled = fsync_enabled
        self.files: dict[str, SimFile] = {}  # insertion order = creation order
        self.syncs = 0

    def create(self, name: str) -> None:
        assert name not in self.files
        self.files[name] = SimFile()

    def append(self, name: str, data: bytes) -> int:
        f = self.files[name]
        f.data += data
        return len(f.data)

    def size(self, name: str) -> int:
        return len(self.files[name].data)

    def read(self, name: str) -> bytes:
        return bytes(self.files[name].data)

    def sync(self, name: str, upto: int) -> None:
        """fdatasync that covered the first ``upto`` bytes (skipped in the control run)."""
        self.syncs += 1
        if self.fsync_enabled:
            f = self.files[name]
            f.durable = max(f.durable, min(upto, len(f.data)))

    @property
    def unsynced_bytes(self) -> int:
        return sum(len(f.data) - f.durable for f in self.files.values())

    def crash(self) -> list[str]:
        """Power loss: each file keeps its durable bytes and a seeded fate for the rest."""
        notes = []
        for name, f in self.files.items():
            tail = len(f.data) - f.durable
            if tail <= 0:
                continue
            mode = self._rng.choice(CRASH_MODES)
            keep = 0 if mode == "drop" else self._rng.randint(0, tail)
            del f.data[f.durable + keep :]
            if mode == "torn":
                if self._rng.random() < 0.5:
                    garbage = bytes(self._rng.getrandbits(8) for _ in range(self._rng.randint(1, 24)))
                else:
                    garbage = bytes(-len(f.data) % SECTOR_BYTES or SECTOR_BYTES)  # zeros to the sector end
                f.data += garbage
            f.durable = len(f.data)
            notes.append(f"{name}:{mode} kept {keep}/{tail}")
        return notes


# ---------------------------------------------------------------- metadata


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """Run a ``MemoryStore`` coroutine to completion synchronously (no event loop):
    its only suspension point is ``asyncio.sleep(0)``, which yields ``None``."""
    try:
        while True:
            yielded = coro.send(None)
            assert yielded is None, f"unexpected suspension {yielded!r}"
    except StopIteration as stop:
        result: T = stop.value
        return result


class MetaService:
    """A client's round trip to etcd: the call runs atomically after one delay and
    its result (or exception) comes back after another."""

    def __init__(self, sched: Scheduler, rng: random.Random, delay_max_ms: int = 3) -> None:
        self._sched = sched
        self._rng = rng
        self._delay_max = delay_max_ms
        self.calls = 0

    def call(self, make: Callable[[], Coroutine[Any, Any, Any]], done: Callable[[Any], None]) -> None:
        self.calls += 1

        def execute() -> None:
            try:
                result: Any = run_now(make())
            except Exception as exc:  # delivered to the caller like a failed RPC
                result = exc
            self._sched.after(self._rng.randint(1, self._delay_max), lambda: done(result))

        self._sched.after(self._rng.randint(1, self._delay_max), execute)
