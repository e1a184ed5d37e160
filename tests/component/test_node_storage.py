"""The node's file layer in-process on a real disk (tmp dirs): journal files, entry
logs, index files, checkpoints and the bounds of the entry store."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest

from coordination.clock import SystemClock
from storage import wire
from storage.errors import Status
from storage.node.entry_index import decode_index_file, encode_index_file
from storage.node.entry_log import idx_path, list_log_ids
from storage.node.entry_store import EntryStore
from storage.node.journal_io import JournalWriter, add_record_head, list_journal_ids, replay
from storage.node.service import NodeConfig, NodeService

pytestmark = pytest.mark.component


def entry(ledger: int, entry_id: int, size: int = 100) -> bytes:
    return wire.encode_entry(ledger, entry_id, entry_id - 1, bytes([entry_id % 256]) * size)


class Collect:
    def __init__(self) -> None:
        self.replies: list[tuple[int, int, Status, bytes]] = []

    def reply(self, op: int, request_id: int, status: Status, body: object = b"") -> None:
        self.replies.append((op, request_id, status, bytes(body)))  # type: ignore[call-overload]


async def test_journal_rotates_and_replays_every_file(tmp_path: Path) -> None:
    writer = JournalWriter(tmp_path, first_file_id=1, rotate_bytes=1000)
    for i in range(30):
        data = entry(1, i)
        writer.write([add_record_head(data), data])
    writer.run_sync(writer.take_sync_job())
    assert len(list_journal_ids(tmp_path)) >= 3
    replayed = [wire.entry_header(r.body)[1] for r in replay(tmp_path, None)]
    assert replayed == list(range(30))
    start = next(r for r in replay(tmp_path, None) if wire.entry_header(r.body)[1] == 12)
    later = [wire.entry_header(r.body)[1] for r in replay(tmp_path, (start.file_id, start.end_offset))]
    assert later == list(range(13, 30))
    assert writer.delete_before(start.file_id) >= 1
    writer.close()


def test_index_file_roundtrip_and_corruption(tmp_path: Path) -> None:
    records = array("q", [1, 0, 8, 40, 1, 1, 52, 40, 2, 0, 96, 41])
    path = tmp_path / "x.idx"
    path.write_bytes(encode_index_file(records))
    assert decode_index_file(path) == records
    data = bytearray(path.read_bytes())
    data[20] ^= 1
    path.write_bytes(bytes(data))
    assert decode_index_file(path) is None  # a corrupt index file is not trusted (log is scanned)
    path.write_bytes(bytes(data[:30]))
    assert decode_index_file(path) is None
    assert decode_index_file(tmp_path / "missing.idx") is None


async def test_entry_store_cache_bound_and_overload_bound(tmp_path: Path) -> None:
    store = EntryStore(tmp_path, rotate_bytes=3_000, cache_max_bytes=2_000, unflushed_max_bytes=5_000)
    store.load(None)
    for i in range(60):  # one batch, no chance for the write thread to run
        store.append(1, i, entry(1, i))
    store.end_batch()
    assert store.overloaded  # more unwritten bytes than allowed: adds would be refused
    position = await store.flush(sync=True)
    assert not store.overloaded
    assert store.cache_bytes <= 2_000  # written batches were evicted down to the bound
    for i in range(60):  # evicted ones are read back from the files
        cached = store.cached(1, i)
        if cached is None:
            location = store.locate(1, i)
            assert location is not None
            (data,) = await store.read_files([location])
        else:
            data = bytes(cached)
        assert data == entry(1, i)
    sealed = [lid for lid in list_log_ids(tmp_path) if lid < position[0]]
    assert sealed and all(decode_index_file(idx_path(tmp_path, lid)) is not None for lid in sealed)
    store.close()

    reloaded = EntryStore(tmp_path, rotate_bytes=3_000)
    reloaded.load(position)
    assert [reloaded.locate(1, i) is not None for i in range(60)] == [True] * 60
    reloaded.close()


async def test_service_restart_from_checkpoint_and_journal(tmp_path: Path) -> None:
    config = NodeConfig(tmp_path, checkpoint_interval_s=3600)
    service = NodeService(config, SystemClock())
    await service.start()
    conn = Collect()
    for i in range(50):
        service.add(conn, i, memoryview(wire.add_body(entry(7, i))))
    await service.journal.drain()
    await service.checkpoint()  # entries 0..49 now in entry logs, journal trimmed
    for i in range(50, 80):
        service.add(conn, i, memoryview(wire.add_body(entry(7, i))))
    service.fence(conn, 999, 7)
    await service.journal.drain()
    assert [r[2] for r in conn.replies] == [Status.OK] * 81
    assert wire.parse_lac_reply(conn.replies[-1][3]) == (78, 79)
    # a crash: no stop(), files stay as they are
    service.journal.close()
    service.entries.close()

    again = NodeService(config, SystemClock())
    await again.start()
    assert again.ledgers.lac_reply(7) == (78, 79)
    assert again.ledgers.check_add(7, recovery=False) is Status.FENCED
    for i in range(80):
        location = again.entries.locate(7, i)
        cached = again.entries.cached(7, i)
        assert cached is not None or location is not None
    await again.stop()
