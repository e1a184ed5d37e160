"""The checkpoint file: ledger states up to a journal mark (BookKeeper's LastLogMark).

Owns: ``data_dir/checkpoint.json`` (ledger states and the tombstones of
deleted ledgers), the node-id cookie ``data_dir/NODE_ID`` and
refusing data dirs of the old on-disk format (docs/decisions/0002).
Rules: written as tmp + fsync + rename + fsync(dir), only after the index files
of the journal files before ``journal``'s file are durable; only after it is
durable may those files be reclaimed. A data dir with a version-1 checkpoint or
an ``entrylogs/`` dir (the format with a second copy of every entry) is refused:
no migration (pre-release).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import orjson

from storage.node.journal_io import write_atomically
from storage.ports import OS_DISK, Disk

CHECKPOINT_FILE = "checkpoint.json"
COOKIE_FILE = "NODE_ID"
OLD_ENTRY_LOG_DIR = "entrylogs"
VERSION = 3  # 3 added "deleted" (tombstone ranges); a version-2 file reads as having none
READABLE_VERSIONS = (2, 3)


class UnsupportedDataDir(Exception):
    """The data dir was written by another on-disk format; the node must not start."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    journal: tuple[int, int]  # (file id, offset): records up to here are in ``ledgers``
    ledgers: dict[int, tuple[bool, int, int]] = field(default_factory=dict)  # id -> fenced, lac, last
    deleted: list[tuple[int, int]] = field(default_factory=list)  # tombstones: inclusive id ranges

    @staticmethod
    def from_json(data: bytes) -> Checkpoint:
        raw = orjson.loads(data)
        if raw.get("version") not in READABLE_VERSIONS:
            version = raw.get("version")
            raise UnsupportedDataDir(f"unsupported checkpoint version {version} (expected {VERSION})")
        return Checkpoint(
            journal=(int(raw["journal"][0]), int(raw["journal"][1])),
            ledgers={int(i): (bool(f), int(lac), int(last)) for i, f, lac, last in raw["ledgers"]},
            deleted=[(int(first), int(last)) for first, last in raw.get("deleted", [])],
        )


class CheckpointRows:
    """The ``ledgers`` rows of the next checkpoint, kept up to date from the changes
    since the last one: a checkpoint re-encodes only the ledgers that changed, and the
    file it writes still lists every ledger held (the same format and promise)."""

    def __init__(self) -> None:
        self._rows: dict[int, list[int | bool]] = {}

    def apply(self, changes: dict[int, tuple[bool, int, int] | None]) -> None:
        rows = self._rows
        for lid, state in changes.items():
            if state is None:
                rows.pop(lid, None)
            else:
                rows[lid] = [lid, *state]

    def checkpoint_json(self, journal: tuple[int, int], deleted: list[tuple[int, int]]) -> bytes:
        """The checkpoint file's bytes, read back by ``Checkpoint.from_json``."""
        return encode_checkpoint(journal, list(self._rows.values()), deleted)


def encode_checkpoint(
    journal: tuple[int, int], rows: list[list[int | bool]], deleted: list[tuple[int, int]]
) -> bytes:
    """The checkpoint file's layout, written here only: rows are [id, fenced, lac, last]."""
    return orjson.dumps(
        {
            "version": VERSION,
            "journal": list(journal),
            "ledgers": rows,
            "deleted": [[first, last] for first, last in deleted],
        }
    )


def load_checkpoint(data_dir: Path, disk: Disk = OS_DISK) -> Checkpoint | None:
    """The last checkpoint, or None for a fresh dir. Raises ``UnsupportedDataDir``
    (one line naming the problem) for a data dir of the old entry-log format."""
    old = data_dir / OLD_ENTRY_LOG_DIR
    try:
        checkpoint = Checkpoint.from_json(disk.read_bytes(data_dir / CHECKPOINT_FILE))
    except FileNotFoundError:
        checkpoint = None
    except UnsupportedDataDir as exc:
        raise UnsupportedDataDir(
            f"data dir {data_dir} was written by an older storage format ({exc}); this node keeps "
            "entries only in journal files and cannot read it (no migration: move or wipe the dir)"
        ) from None
    if disk.exists(old):
        raise UnsupportedDataDir(
            f"data dir {data_dir} has {old} (the old entry-log storage format); this node keeps "
            "entries only in journal files and cannot read it (no migration: move or wipe the dir)"
        )
    return checkpoint


def save_checkpoint(data_dir: Path, data: bytes, disk: Disk = OS_DISK) -> None:
    """Write the checkpoint file's bytes (``encode_checkpoint``) atomically and durably."""
    write_atomically(data_dir, CHECKPOINT_FILE, data, disk)


class CookieMismatch(Exception):
    pass


def check_cookie(data_dir: Path, node_id: str) -> None:
    """Persist the node id on first start; refuse a data dir that belongs to another id."""
    path = data_dir / COOKIE_FILE
    try:
        stored = path.read_text().strip()
    except FileNotFoundError:
        write_atomically(data_dir, COOKIE_FILE, node_id.encode() + b"\n")
        return
    if stored != node_id:
        raise CookieMismatch(f"data dir {data_dir} belongs to node {stored!r}, not {node_id!r}")
