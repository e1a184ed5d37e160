"""The storage shells' ports for transport and disk, and their production implementations.

Owns: the two narrow Protocols the storage node (server, service, journal, entry
store, checkpoint) and the ledger client (connection, pool) do their I/O
through, and ``ASYNCIO_NETWORK`` / ``OS_DISK``, what production passes. Time is
the third port (``coordination.clock.Clock``; asyncio's own timers follow the
event loop's clock). Rule (docs/architecture.md §11, docs/testing.md §8): a shell
never opens a socket or touches a file except through these, so the
deterministic simulation (tests/sim) runs the same shells over a simulated
network and disk; the production implementations are the plain asyncio and
``os`` calls (``OsDisk``'s methods are the ``os`` functions themselves: no
extra call on the hot path). ``GrayDisk`` is the fault suite's slow disk (a
test-only delay before each sync), chosen by ``disk_from_env`` at node start.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

Buffer = bytes | memoryview
ProtocolFactory = Callable[[], asyncio.Protocol]


class Listener(Protocol):
    """A listening endpoint (``asyncio.Server`` is one)."""

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


class Network(Protocol):
    """Stream connections: dial a node, or listen for clients."""

    async def connect(
        self, host: str, port: int, factory: ProtocolFactory
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]: ...

    async def listen(
        self, host: str, port: int, factory: ProtocolFactory, backlog: int
    ) -> tuple[Listener, tuple[str, int]]:
        """Start listening; returns the listener and the address it got (port 0: any)."""
        ...


class AsyncioNetwork:
    """TCP through the running event loop."""

    async def connect(
        self, host: str, port: int, factory: ProtocolFactory
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        return await asyncio.get_running_loop().create_connection(factory, host, port)

    async def listen(
        self, host: str, port: int, factory: ProtocolFactory, backlog: int
    ) -> tuple[Listener, tuple[str, int]]:
        server = await asyncio.get_running_loop().create_server(factory, host, port, backlog=backlog)
        sock = server.sockets[0].getsockname()
        return server, (str(sock[0]), int(sock[1]))


class Disk(Protocol):
    """The file operations of a storage node, named and shaped as the ``os`` calls.

    Durability: bytes written to a file are durable once an ``fdatasync``/``fsync``
    of it returned; a new or renamed name once an ``fsync`` of its directory did."""

    def open(self, path: str | Path, flags: int, mode: int = 0o777) -> int: ...

    def close(self, fd: int) -> None: ...

    def write(self, fd: int, data: Buffer) -> int: ...

    def pwritev(self, fd: int, buffers: Sequence[Buffer], offset: int) -> int: ...

    def pread(self, fd: int, length: int, offset: int) -> bytes: ...

    def fdatasync(self, fd: int) -> None: ...

    def fsync(self, fd: int) -> None: ...

    def posix_fallocate(self, fd: int, offset: int, length: int) -> None: ...

    def posix_fadvise(self, fd: int, offset: int, length: int, advice: int) -> None: ...

    def ftruncate(self, fd: int, length: int) -> None: ...

    def truncate(self, path: str | Path, length: int) -> None: ...

    def fsize(self, fd: int) -> int: ...

    def size(self, path: Path) -> int: ...

    def replace(self, src: str | Path, dst: str | Path) -> None: ...

    def unlink(self, path: Path) -> None:
        """Remove ``path`` if it exists."""
        ...

    def read_bytes(self, path: Path) -> bytes:
        """The whole file; raises FileNotFoundError."""
        ...

    def exists(self, path: Path) -> bool: ...

    def listdir(self, directory: Path) -> list[str]: ...

    def makedirs(self, directory: Path) -> None:
        """Create ``directory`` and its parents if missing."""
        ...


class OsDisk:
    """The local file system."""

    open = staticmethod(os.open)
    close = staticmethod(os.close)
    write = staticmethod(os.write)
    pwritev = staticmethod(os.pwritev)
    pread = staticmethod(os.pread)
    fdatasync = staticmethod(os.fdatasync)
    fsync = staticmethod(os.fsync)
    posix_fallocate = staticmethod(os.posix_fallocate)
    posix_fadvise = staticmethod(os.posix_fadvise)
    ftruncate = staticmethod(os.ftruncate)
    truncate = staticmethod(os.truncate)
    replace = staticmethod(os.replace)

    @staticmethod
    def fsize(fd: int) -> int:
        return os.fstat(fd).st_size

    @staticmethod
    def size(path: Path) -> int:
        return path.stat().st_size

    @staticmethod
    def unlink(path: Path) -> None:
        path.unlink(missing_ok=True)

    @staticmethod
    def read_bytes(path: Path) -> bytes:
        return path.read_bytes()

    @staticmethod
    def exists(path: Path) -> bool:
        return path.exists()

    @staticmethod
    def listdir(directory: Path) -> list[str]:
        return os.listdir(directory)

    @staticmethod
    def makedirs(directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)


GRAY_DISK_ENV = "FOLIO_TEST_DISK_DELAY_FILE"


class GrayDisk(OsDisk):
    """The local file system whose fdatasync and fsync first wait the milliseconds
    written in ``delay_file`` (a slow disk, or one that stalls writes while reads go
    on; the fault suite's gray failures). Named by ``GRAY_DISK_ENV``; tests only."""

    def __init__(self, delay_file: Path) -> None:
        self.delay_file = delay_file

    def _wait(self) -> None:
        try:
            delay_ms = int(self.delay_file.read_text() or 0)
        except (OSError, ValueError):
            delay_ms = 0
        if delay_ms > 0:
            time.sleep(delay_ms / 1000)

    def fdatasync(self, fd: int) -> None:  # type: ignore[override]
        self._wait()
        os.fdatasync(fd)

    def fsync(self, fd: int) -> None:  # type: ignore[override]
        self._wait()
        os.fsync(fd)


def disk_from_env() -> Disk:
    """``OS_DISK``, or a ``GrayDisk`` when ``GRAY_DISK_ENV`` names a delay file."""
    path = os.environ.get(GRAY_DISK_ENV, "")
    return GrayDisk(Path(path)) if path else OS_DISK


ASYNCIO_NETWORK: Network = AsyncioNetwork()
OS_DISK: Disk = OsDisk()
