"""Journal compaction on a real disk (in-process node service, tmp dirs): the live
entries of mostly dead journal files are copied forward and the files deleted,
every entry stays readable (also across a restart), a crash between the copies and
the delete frees the files without copying again, and a round is bounded.
Control: before compaction, deleting two of three interleaved ledgers frees no file."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from test_node_storage import add_all, dir_bytes, entry, read_back

from coordination.clock import SystemClock
from storage.node.entry_store import scan_adds
from storage.node.journal_io import index_path, journal_path, list_journal_ids
from storage.node.service import NodeConfig, NodeService

pytestmark = pytest.mark.component

SIZE = 300
ENTRIES = 60  # per ledger


def config(tmp_path: Path, **overrides: object) -> NodeConfig:
    settings: dict[str, object] = {
        "journal_rotate_bytes": 3000,  # ~9 entries per file: every file holds all three ledgers
        "checkpoint_interval_s": 3600,
        "compaction_interval_s": 3600,  # rounds run when the test says, unless overridden
    }
    settings.update(overrides)
    return NodeConfig(tmp_path, **settings)  # type: ignore[arg-type]


async def interleaved(service: NodeService) -> list[int]:
    """Ledgers 1, 2, 3 written in turns; two of them deleted. Returns the sealed files."""
    items = [(ledger, e, SIZE) for e in range(ENTRIES) for ledger in (1, 2, 3)]
    await add_all(service, items, group=3)
    await service.checkpoint()
    journal = service.entries.directory
    sealed = [fid for fid in list_journal_ids(journal) if fid < service.journal.durable_position[0]]
    assert len(sealed) >= 10
    assert all(set(scan_adds(journal_path(journal, fid))[0::4]) == {1, 2, 3} for fid in sealed[1:-1])
    await service.delete_ledger(1)
    await service.delete_ledger(2)
    # the control: ledger 3 lives in every file, so deleting 1 and 2 frees none
    assert service.entries.reclaimable_files() == []
    assert set(sealed) <= set(list_journal_ids(journal))
    return sealed


async def all_of_ledger_3_reads_back(service: NodeService) -> None:
    for e in range(ENTRIES):
        assert await read_back(service, 3, e) == entry(3, e, SIZE)


async def test_compaction_copies_live_entries_forward_and_frees_the_files(tmp_path: Path) -> None:
    service = NodeService(config(tmp_path, compaction_interval_s=0.1), SystemClock())
    await service.start()
    sealed = await interleaved(service)
    before = dir_bytes(tmp_path)
    journal = service.entries.directory
    deadline = time.monotonic() + 10
    while set(sealed) & set(list_journal_ids(journal)):  # the service's own compaction loop
        assert time.monotonic() < deadline, "sealed files not compacted in time"
        await asyncio.sleep(0.05)
    assert not any(index_path(journal, fid).exists() for fid in sealed)
    moved = service.compactor.copied_bytes
    assert service.compactor.compacted_files >= len(sealed) - 1
    # only ledger 3's entries were copied: about a third of what was written
    assert 0 < moved <= ENTRIES * (SIZE + 64)
    assert dir_bytes(tmp_path) < before * 0.6
    assert all(service.entries.locate(3, e)[0] > sealed[-1] for e in range(ENTRIES - 5))  # type: ignore[index]
    await all_of_ledger_3_reads_back(service)
    metrics = service.metrics
    assert metrics.compaction_bytes._value.get() == moved
    await service.stop()

    again = NodeService(config(tmp_path), SystemClock())
    await again.start()
    await all_of_ledger_3_reads_back(again)
    assert again.entries.locate(1, 0) is None and again.entries.locate(2, 0) is None
    assert await again.compact() == 0  # the copies' files are all live: nothing more to do
    await again.stop()


async def test_a_crash_between_copy_and_delete_frees_the_files_without_copying_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = NodeService(config(tmp_path), SystemClock())
    await service.start()
    sealed = await interleaved(service)
    journal = service.entries.directory
    # copies durable, then the node dies before the old files give up their ledgers
    monkeypatch.setattr(service.entries, "release", lambda file_id, ledgers: None)
    assert await service.compact() > 0
    assert set(sealed) <= set(list_journal_ids(journal))  # nothing freed: two copies on disk
    for task in (service._checkpoint_task, service._compaction_task):  # the "crash"
        if task is not None:
            task.cancel()

    again = NodeService(config(tmp_path), SystemClock())
    await again.start()  # the newer copies are indexed; the old files count them as dead
    assert again.entries.compaction_candidates(0.5) == []  # ledger 3 is dead in them already
    for ledger in (1, 2):  # what the node's watch of etcd's ledger keys tells it after a restart
        await again.delete_ledger(ledger)  # ... and with them the old files' last ledgers go
    assert not set(sealed) & set(list_journal_ids(journal))  # freed without copying again
    assert await again.compact() == 0 and again.compactor.compacted_files == 0
    await all_of_ledger_3_reads_back(again)
    await again.stop()


async def test_a_round_copies_at_most_its_byte_bound_but_the_first_file_whole(tmp_path: Path) -> None:
    service = NodeService(config(tmp_path, compaction_bytes_per_round=1), SystemClock())
    await service.start()
    await interleaved(service)
    candidates = service.entries.compaction_candidates(0.5)
    assert len(candidates) >= 10
    first = await service.compact()
    assert first > 1 and service.compactor.compacted_files == 1  # one file, whole
    assert len(service.entries.compaction_candidates(0.5)) == len(candidates) - 1
    await all_of_ledger_3_reads_back(service)
    await service.stop()


async def test_a_ledger_deleted_while_its_entries_are_copied_stays_deleted(tmp_path: Path) -> None:
    service = NodeService(config(tmp_path), SystemClock())
    await service.start()
    await interleaved(service)
    copying = asyncio.get_running_loop().create_task(service.compact())
    await asyncio.sleep(0)
    await service.delete_ledger(3)
    await copying
    assert service.entries.locate(3, 0) is None and not service.entries.index.has_ledger(3)
    await service.checkpoint()
    await service.compact()
    assert len(list_journal_ids(service.entries.directory)) <= 2  # everything dead is gone
    await service.stop()


async def test_at_most_one_chunk_of_copies_waits_in_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from storage.node import compaction

    monkeypatch.setattr(compaction, "CHUNK_ENTRIES", 2)  # a file holds ~3 live entries
    service = NodeService(config(tmp_path), SystemClock())
    await service.start()
    await interleaved(service)
    journal = service.journal
    submit = journal.submit
    waiting = peak = 0

    def counted(parts: tuple[bytes, ...], size: int, cookie: tuple[object, ...]) -> bool:
        nonlocal waiting, peak
        if cookie[2] != compaction.RELOCATE:
            return submit(parts, size, cookie)
        durable = cookie[0]

        def done(location: int) -> None:
            nonlocal waiting
            waiting -= 1
            durable(location)  # type: ignore[operator]

        waiting += 1
        peak = max(peak, waiting)
        return submit(parts, size, (done, *cookie[1:]))

    monkeypatch.setattr(journal, "submit", counted)
    assert await service.compact() > 0
    assert peak == 2 and waiting == 0  # the bound was reached, never passed
    await all_of_ledger_3_reads_back(service)
    await service.stop()


async def test_a_read_only_node_does_not_compact(tmp_path: Path) -> None:
    service = NodeService(config(tmp_path), SystemClock())
    await service.start()
    sealed = await interleaved(service)
    service.read_only = True  # disk nearly full: copies would come before the space they free
    assert await service.compact() == 0 and service.compactor.compacted_files == 0
    assert set(sealed) <= set(list_journal_ids(service.entries.directory))
    service.read_only = False
    assert await service.compact() > 0  # the control: the same files, writable
    await service.stop()


async def test_a_failed_round_does_not_stop_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    service = NodeService(config(tmp_path, compaction_interval_s=0.05), SystemClock())
    await service.start()
    real = service.compactor.run_round
    failures = 0

    async def flaky() -> int:
        nonlocal failures
        if failures < 2:  # e.g. a file reclaimed under the round
            failures += 1
            raise OSError("journal file vanished")
        return await real()

    monkeypatch.setattr(service.compactor, "run_round", flaky)
    sealed = await interleaved(service)
    deadline = time.monotonic() + 10
    while set(sealed) & set(list_journal_ids(service.entries.directory)):
        assert time.monotonic() < deadline, "compaction stopped after a failed round"
        await asyncio.sleep(0.05)
    assert failures == 2 and "compaction round failed" in caplog.text
    await service.stop()
