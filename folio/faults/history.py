"""The history of a fault run: every operation, in the order it happened.

Owns: the operation log (``checkers.py`` says what an operation holds). Each
``record`` stamps ``t`` (seconds since the run began, monotonic) and ``wall``
(Unix time) and appends one JSON line to the history file, so a run that is
killed still leaves what it did. Single-threaded: the workload and the
nemesis run on one event loop.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import IO, Any

import orjson


class History:
    def __init__(self, path: Path | None = None) -> None:
        self.ops: list[dict[str, Any]] = []
        self._started = time.monotonic()
        self._file: IO[bytes] | None = open(path, "ab") if path else None  # noqa: SIM115 - closed in close()

    def now(self) -> float:
        return time.monotonic() - self._started

    def record(self, type_: str, f: str, **fields: Any) -> dict[str, Any]:
        op = {"t": round(self.now(), 4), "wall": round(time.time(), 3), "type": type_, "f": f, **fields}
        self.ops.append(op)
        if self._file is not None:
            self._file.write(orjson.dumps(op) + b"\n")
        return op

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def load(path: Path) -> list[dict[str, Any]]:
    """The operations in a history file; a run killed mid-write may leave its last line cut short,
    which is left out (a broken line anywhere else raises)."""
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    ops = [orjson.loads(line) for line in lines[:-1]]
    with contextlib.suppress(orjson.JSONDecodeError):
        ops.extend(orjson.loads(line) for line in lines[-1:])
    return ops
