"""The CI fault run and the controls that must fail (folio/faults/).

- ``test_fault_run``: etcd, 3 storage nodes, the auditor and 2 gateways as
  processes; WebSocket and REST producers, consumers of all four subscription
  types, a partitioned topic, dedup on in one namespace; 56 seeded faults of
  every kind (power loss included), then heal, cold-restart the gateways, read
  everything back. Prints the checkers' line and the unavailability per kind.
  Each node and gateway runs in its own network namespace, so the faults include
  partitions (links cut one way or both, flapping) and gray failures (slow and
  stalled fsyncs, a gateway's event loop blocked); every kind comes at least twice.
  The nodes' fdatasyncs trail their writes by ``SYNC_LAG_MS``, so the power
  losses drop written-but-unsynced journal bytes: the run asserts they did
  (else power loss is only a kill -9 and proves nothing more) and lost nothing.
- controls, kept with their assertion inverted: power loss with fsync off loses
  acked messages; a zombie writer is acked when fencing is off; the safe twins
  lose nothing; an owner cut from etcd that ignores the loss of its lease (nodes
  not fencing) acknowledges alongside its successor (dual acks). The checkers must
  catch each, or the suite proves nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from folio.faults.checkers import HEALED, Result, check
from folio.faults.controls import fencing_scenario, zombie_owner_scenario
from folio.faults.history import load
from folio.faults.nemesis import FaultKind
from folio.faults.run import RunConfig, run

pytestmark = pytest.mark.component

CI_SEED = 17
CI_FAULTS = 56  # every kind at least twice (28 kinds)
AFTER_HEAL_BOUND_S = 30.0
# each journal fdatasync trails its write this long: a power loss then finds unsynced
# groups often enough that at least two of the six bite, even on a loaded box (at
# 20 ms, one run in a loaded box had only one of six drop anything)
CI_SYNC_LAG_MS = 50


Report = Callable[[str], None]


def show(report: Report, name: str, result: Result) -> None:
    """The checkers' lines in the run's closing summary (tests/conftest.py ``run_report``)."""
    report(f"[{name}] {result.line()}")
    if result.faults:  # the fencing scenarios inject none: no unavailability to speak of
        report(f"[{name}] {result.unavailability_line()}")
        report(f"[{name}] {result.unavailability_own_line()}")
    details = result.details()
    if details:
        print(details)


@pytest.mark.timeout(900)  # about 5 min on a quiet box; a loaded one stretches every restart
async def test_fault_run(tmp_path: Path, run_report: Report) -> None:
    config = RunConfig(
        root=tmp_path / "run",
        seed=CI_SEED,
        faults=CI_FAULTS,
        interval=(1.5, 3.0),
        hold_scale=0.5,
        lease_ttl_s=3,
        sync_lag_ms=CI_SYNC_LAG_MS,
    )
    result = await run(config)
    show(run_report, f"fault run seed={CI_SEED}", result)
    assert sum(result.faults.values()) >= 50
    assert set(result.faults) == {str(k) for k in FaultKind}, result.faults
    assert min(result.faults.values()) >= 2, result.faults  # partitions and gray failures included
    assert result.acked > 0
    assert result.powerloss_faults >= 6, result.line()
    # the shim bites: power losses found unsynced records and dropped them (never an acked one)
    assert result.powerloss_dropped_records > 0 and result.powerloss_biting >= 2, result.line()
    assert result.safe, f"history: {config.root / 'history.jsonl'}\n{result.details()}"
    # liveness: once every fault is healed, every topic takes publishes again (generous bound)
    healed = max(result.unavailability[HEALED].seconds)
    assert healed < AFTER_HEAL_BOUND_S, f"publishing resumed {healed:.1f}s after the final heal"


@pytest.mark.timeout(300)
async def test_control_power_loss_with_fsync_off_loses_acked_messages(
    tmp_path: Path, run_report: Report
) -> None:
    config = RunConfig(
        root=tmp_path / "run",
        seed=5,
        faults=2,
        interval=(4.0, 4.0),
        kinds=(FaultKind.POWER_LOSS_ALL_NODES,),
        node_args=("--unsafe-no-fsync",),
        settle_s=2.0,
        drain_s=5.0,
        read_limit_s=20.0,
    )
    result = await run(config)
    show(run_report, "control: fsync off + power loss", result)
    assert result.lost, "power loss with fsync off lost nothing: the suite cannot see a missing fsync"


@pytest.mark.timeout(120)
async def test_fenced_ledger_refuses_the_old_writer(tmp_path: Path, run_report: Report) -> None:
    result = check(await fencing_scenario(tmp_path, "zombie"))
    show(run_report, "zombie writer, fencing on", result)
    assert result.acked == 5 and not result.lost


@pytest.mark.timeout(120)
async def test_control_fencing_off_acks_a_zombie_writer(tmp_path: Path, run_report: Report) -> None:
    result = check(await fencing_scenario(tmp_path, "zombie", ("--unsafe-no-fencing",)))
    show(run_report, "control: fencing off", result)
    assert len(result.lost) == 5, "a zombie writer was not acked with fencing off: the control proves nothing"


@pytest.mark.timeout(180)
async def test_an_owner_cut_from_etcd_never_acks_alongside_its_successor(
    tmp_path: Path, run_report: Report
) -> None:
    result = check(await zombie_owner_scenario(tmp_path, unsafe=False))
    run_report(
        f"[owner cut from etcd, lease honoured] acked={result.acked} dual_acks={len(result.dual_acks)}"
    )
    acked = {
        op["process"]
        for op in load(tmp_path / "history.jsonl")
        if op["f"] == "publish" and op["type"] == "ok"
    }
    assert "via-other" in acked, "the other gateway never served the topic: the scenario proves nothing"
    assert not result.dual_acks, result.details()


@pytest.mark.timeout(180)
async def test_control_a_gateway_keeping_its_lost_lease_acks_twice(
    tmp_path: Path, run_report: Report
) -> None:
    """The owner is cut from etcd while its clients still reach it, and it ignores the
    loss of its lease (and the nodes do not fence): it keeps acknowledging into its
    ledger while the gateway that took its topic acknowledges into a new one."""
    result = check(await zombie_owner_scenario(tmp_path, unsafe=True))  # no final read: only dual acks count
    run_report(
        f"[control: a zombie owner cut from etcd] acked={result.acked} dual_acks={result.dual_acks[:5]}"
    )
    assert result.dual_acks, (
        "a gateway acking without its lease was not seen: the dual-ack checker proves nothing"
    )


def test_the_gateway_refuses_its_unsafe_switch_outside_the_controls() -> None:
    env = {k: v for k, v in os.environ.items() if k != "FOLIO_UNSAFE_TEST_SWITCHES"}
    command = [sys.executable, "-m", "gateway.main", "--port", "0", "--etcd", "x:1"]
    done = subprocess.run(
        [*command, "--unsafe-keep-lease-on-loss"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "FOLIO_UNSAFE_TEST_SWITCHES=1" in done.stderr


@pytest.mark.parametrize(
    "switch", ["--unsafe-no-fsync", "--unsafe-no-fencing", "--unsafe-forget-fence-on-delete"]
)
def test_unsafe_switches_are_refused_outside_the_controls(tmp_path: Path, switch: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "FOLIO_UNSAFE_TEST_SWITCHES"}
    command = [
        sys.executable,
        "-m",
        "storage.node",
        "--port",
        "0",
        "--data-dir",
        str(tmp_path),
        "--etcd",
        "x:1",
    ]
    done = subprocess.run([*command, switch], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "FOLIO_UNSAFE_TEST_SWITCHES=1" in done.stderr


@pytest.mark.timeout(120)
async def test_deleted_ledger_refuses_its_recovered_writer(tmp_path: Path, run_report: Report) -> None:
    result = check(await fencing_scenario(tmp_path, "deleted"))
    show(run_report, "deleted ledger, tombstones on", result)
    assert result.acked == 0 and not result.lost


@pytest.mark.timeout(120)
async def test_control_forgetting_the_fence_on_delete_acks_into_nothing(
    tmp_path: Path, run_report: Report
) -> None:
    result = check(await fencing_scenario(tmp_path, "deleted", ("--unsafe-forget-fence-on-delete",)))
    show(run_report, "control: deletion forgets the fence", result)
    assert len(result.lost) == 5, "an add to a deleted ledger was refused anyway: the control proves nothing"
