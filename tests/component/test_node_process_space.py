"""Disk space on real storage-node processes and a real etcd: journal files of deleted
ledgers are reclaimed, and files a live ledger shares with deleted ones are compacted
(their live entries copied forward), also across kill -9 (docs/decisions/0002)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from nodeproc import (
    NodeProcess,
    delete_ledger,
    journal_files,
    metric,
    metrics_text,
    new_node,
    payload,
    put_ledger,
    wait_until,
)

from storage import wire
from storage.errors import Status

pytestmark = pytest.mark.component


def test_deleted_ledger_is_reclaimed(
    nodes: list[NodeProcess], tmp_path: Path, etcd_endpoint: str, ns: str
) -> None:
    args = ("--checkpoint-interval", "0.2", "--journal-rotate-bytes", "30000")
    node = new_node(nodes, tmp_path, etcd_endpoint, ns, *args).start()
    put_ledger(etcd_endpoint, ns, 1)
    put_ledger(etcd_endpoint, ns, 2)
    journal_dir = node.data_dir / "journal"
    with node.client() as c:
        for ledger, count in ((1, 300), (2, 100)):
            for first in range(0, count, 10):  # small groups: many journal files
                adds = [(e, payload(ledger, e)) for e in range(first, first + 10)]
                assert set(c.add_many(ledger, adds).values()) == {Status.OK}
        wait_until(lambda: len(list(journal_dir.glob("*.idx"))) >= 5, what="sealed journal files indexed")
        before = len(journal_files(node))
        delete_ledger(etcd_endpoint, ns, 1)
        wait_until(lambda: c.read(1, 299)[0] is Status.NO_SUCH_LEDGER, what="ledger 1 dropped")
        assert c.read_range(1, 0, 10)[0] is Status.NO_SUCH_LEDGER
        wait_until(lambda: len(journal_files(node)) <= before - 4, what="dead journal files deleted")
        assert c.read(2, 99)[1] == wire.Entry(2, 99, 98, payload(2, 99))
    node.kill9()
    node.start()
    with node.client() as c:
        wait_until(lambda: c.read(1, 299)[0] is Status.NO_SUCH_LEDGER, what="still gone after restart")
        assert c.read(2, 0)[1] == wire.Entry(2, 0, -1, payload(2, 0))


@pytest.mark.parametrize("threshold", ["0.5", "0"])
def test_compaction_frees_files_a_live_ledger_shares_with_a_deleted_one(
    nodes: list[NodeProcess], tmp_path: Path, etcd_endpoint: str, ns: str, threshold: str
) -> None:
    """Ledgers 1 and 2 written in turns, then 1 deleted: every journal file still holds
    some of ledger 2, so only compaction (copying ledger 2's entries forward) frees
    them. Control: --compaction-threshold 0 keeps them all."""
    args = ("--checkpoint-interval", "0.2", "--journal-rotate-bytes", "30000")
    args += ("--compaction-interval", "0.2", "--compaction-threshold", threshold)
    node = new_node(nodes, tmp_path, etcd_endpoint, ns, *args).start()
    put_ledger(etcd_endpoint, ns, 1)
    put_ledger(etcd_endpoint, ns, 2)
    journal_dir = node.data_dir / "journal"
    with node.client() as c:
        for turn in range(30):
            assert set(
                c.add_many(1, [(e, payload(1, e)) for e in range(turn * 10, turn * 10 + 10)]).values()
            ) == {Status.OK}
            assert set(
                c.add_many(2, [(e, payload(2, e)) for e in range(turn * 2, turn * 2 + 2)]).values()
            ) == {Status.OK}
        wait_until(lambda: len(list(journal_dir.glob("*.idx"))) >= 8, what="sealed journal files indexed")
        sealed = sorted(journal_dir.glob("*.idx"))
        delete_ledger(etcd_endpoint, ns, 1)
        wait_until(lambda: c.read(1, 0)[0] is Status.NO_SUCH_LEDGER, what="ledger 1 dropped")
        if threshold == "0":
            time.sleep(2)  # ten compaction intervals, had there been compaction
            assert all(p.exists() for p in sealed)
            return
        wait_until(lambda: not any(p.exists() for p in sealed), what="mixed journal files compacted away")
        for e in range(60):
            assert c.read(2, e)[1] == wire.Entry(2, e, e - 1, payload(2, e))
        assert metric(metrics_text(node), "folio_node_compacted_files_total") >= len(sealed) - 1
    node.kill9()
    node.start()
    with node.client() as c:
        status, entries = c.read_range(2, 0, 59)
        assert status is Status.OK and [x.payload for x in entries] == [payload(2, e) for e in range(60)]
        wait_until(lambda: c.read(1, 0)[0] is Status.NO_SUCH_LEDGER, what="ledger 1 still gone")


def test_kill9_during_compaction_loses_nothing(
    nodes: list[NodeProcess], tmp_path: Path, etcd_endpoint: str, ns: str
) -> None:
    """Compaction one file per round (a round every 0.05 s), the node killed (-9) four
    times while the rounds go on (the kills land between or inside rounds, as they
    fall): after every restart the live ledger reads back whole, and in the end the
    mixed files are gone all the same."""
    args = ("--checkpoint-interval", "0.1", "--journal-rotate-bytes", "30000")
    args += ("--compaction-interval", "0.05", "--compaction-bytes-per-round", "1")
    node = new_node(nodes, tmp_path, etcd_endpoint, ns, *args).start()
    put_ledger(etcd_endpoint, ns, 1)
    put_ledger(etcd_endpoint, ns, 2)
    journal_dir = node.data_dir / "journal"
    live = [(e, payload(2, e)) for e in range(80)]
    with node.client() as c:
        for turn in range(40):
            dead = [(e, payload(1, e)) for e in range(turn * 10, turn * 10 + 10)]
            assert set(c.add_many(1, dead).values()) == {Status.OK}
            assert set(c.add_many(2, live[turn * 2 : turn * 2 + 2]).values()) == {Status.OK}
        wait_until(lambda: len(list(journal_dir.glob("*.idx"))) >= 12, what="sealed journal files indexed")
        sealed = sorted(journal_dir.glob("*.journal"))[:-2]
    delete_ledger(etcd_endpoint, ns, 1)
    for pause in (0.3, 0.1, 0.25, 0.15):
        time.sleep(pause)
        node.kill9()
        node.start()
        with node.client() as c:
            status, entries = c.read_range(2, 0, 79)
            assert status is Status.OK and [(x.entry_id, x.payload) for x in entries] == live
    with node.client() as c:
        wait_until(lambda: not any(p.exists() for p in sealed), what="mixed files compacted away")
        status, entries = c.read_range(2, 0, 79)
        assert status is Status.OK and [(x.entry_id, x.payload) for x in entries] == live
    assert "compacted journal file" in node.log_text()
