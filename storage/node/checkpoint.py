"""The checkpoint file: what is durable outside the journal (BookKeeper's LastLogMark).

Owns: ``data_dir/checkpoint.json`` and the node-id cookie ``data_dir/NODE_ID``.
Rule: written as tmp + fsync + rename + fsync(dir), only after the entry logs
and index files it points at are fsynced; journal files before
``journal`` may be deleted only after this file is durable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from storage.node.entry_log import fsync_dir

CHECKPOINT_FILE = "checkpoint.json"
COOKIE_FILE = "NODE_ID"
VERSION = 1


@dataclass(frozen=True, slots=True)
class Checkpoint:
    journal: tuple[int, int]  # replay journal records after (file id, offset)
    entry_log: tuple[int, int]  # entry logs are valid up to (log id, size)
    ledgers: dict[int, tuple[bool, int, int]] = field(default_factory=dict)  # id -> fenced, lac, last

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "version": VERSION,
                "journal": list(self.journal),
                "entryLog": list(self.entry_log),
                "ledgers": [[lid, f, lac, last] for lid, (f, lac, last) in self.ledgers.items()],
            }
        )

    @staticmethod
    def from_json(data: bytes) -> Checkpoint:
        raw = orjson.loads(data)
        if raw.get("version") != VERSION:
            raise ValueError(f"unsupported checkpoint version {raw.get('version')}")
        return Checkpoint(
            journal=(int(raw["journal"][0]), int(raw["journal"][1])),
            entry_log=(int(raw["entryLog"][0]), int(raw["entryLog"][1])),
            ledgers={int(i): (bool(f), int(lac), int(last)) for i, f, lac, last in raw["ledgers"]},
        )


def write_atomically(directory: Path, name: str, data: bytes) -> None:
    tmp = directory / (name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / name)
    fsync_dir(directory)


def load_checkpoint(data_dir: Path) -> Checkpoint | None:
    path = data_dir / CHECKPOINT_FILE
    try:
        return Checkpoint.from_json(path.read_bytes())
    except FileNotFoundError:
        return None


def save_checkpoint(data_dir: Path, checkpoint: Checkpoint) -> None:
    write_atomically(data_dir, CHECKPOINT_FILE, checkpoint.to_json())


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
