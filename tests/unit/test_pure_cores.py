"""The pure cores import nothing I/O-shaped (docs/architecture.md §11): no asyncio, os,
socket, threading, time, etcd client or web framework. A core that needs time
takes ``now_ms``; one that needs I/O returns an effect for its shell."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PURE = [
    "coordination/lease.py",
    "coordination/election_core.py",
    "storage/wire.py",
    "storage/types.py",
    "storage/node/journal_core.py",
    "storage/node/ledger_state.py",
    "storage/client/schedule.py",
    "storage/client/placement.py",
    "storage/client/write_core.py",
    "storage/client/write_effects.py",
    "storage/client/recovery_core.py",
    "storage/client/read_core.py",
    "storage/auditor/audit_core.py",
    "storage/runtime.py",
    "storage/formats/positions.py",
    "storage/formats/message_id.py",
    "storage/formats/log_record.py",
    "storage/formats/entry_format.py",
    "gateway/broker/cursor_core.py",
    "gateway/broker/log_layout.py",
    "storage/formats/key_hash.py",
    "coordination/analytics_run.py",
    *(
        f"spark/folio_analytics/{m}.py"
        for m in ("grid", "sketches", "profile", "keyshare", "backlog", "results", "assemble", "sql_core")
    ),
    "storage/formats/key_routing.py",
    "gateway/broker/flow.py",
    "gateway/broker/log_policy.py",
    "gateway/broker/publish_core.py",
    "gateway/broker/publish_results.py",
    "gateway/broker/topic_policies.py",
    "gateway/broker/topic_upkeep.py",
    "gateway/broker/message_counts.py",
    "gateway/broker/stats.py",
    "gateway/broker/stats_history.py",
    "gateway/api/paging.py",
    "gateway/api/admin_bodies.py",
    "gateway/names.py",
    "gateway/meta/policies.py",
    "gateway/ownership/bundles.py",
    "gateway/ownership/assign_core.py",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "gateway/protocol").glob("*.py")),
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "gateway/broker/dispatch").glob("*.py")),
]
FORBIDDEN = {
    "asyncio",
    "os",
    "socket",
    "threading",
    "time",
    "subprocess",
    "aetcd",
    "grpc",
    "fastapi",
    "uvloop",
}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("module", PURE)
def test_pure_core_imports_no_io(module: str) -> None:
    path = ROOT / module
    assert path.exists(), f"{module} is listed as a pure core but does not exist"
    assert imported_roots(path) & FORBIDDEN == set()


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    shell = tmp_path / "shell.py"
    shell.write_text("import asyncio\nfrom os import path\n")
    assert imported_roots(shell) & FORBIDDEN == {"asyncio", "os"}
