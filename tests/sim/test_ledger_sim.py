"""Seeded simulation of a ledger under crashes, ensemble changes, fencing and recovery.

Each seed builds a fresh world (world.py) around the real pure cores (writer,
recovery, reads, placement, journal group commit, ledger state) and checks the
invariants of checkers.py after every step and at the end (docs/architecture.md §11,
docs/testing.md). Control runs (docs/testing.md §6) remove one safety
mechanism and must be caught, which proves the checks can fail.

Replay one seed:  FOLIO_SIM_SEED=<n> .venv/bin/python -m pytest tests/sim -q
More seeds:       FOLIO_SIM_SEEDS=2000 .venv/bin/python -m pytest tests/sim -q
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from .scenario import Outcome, make_scenario, run

pytestmark = pytest.mark.sim

SEEDS_DEFAULT = 200
CONTROL_SEEDS = tuple(range(40))  # fixed: each control must be caught on at least one of these
COVERAGE_SEEDS = tuple(range(40))


def seeds() -> list[int]:
    one = os.environ.get("FOLIO_SIM_SEED")
    if one:
        return [int(one)]
    return list(range(int(os.environ.get("FOLIO_SIM_SEEDS", SEEDS_DEFAULT))))


def report(outcome: Outcome) -> str:
    s = outcome.scenario
    return "\n".join(
        [
            s.describe(),
            f"replay: FOLIO_SIM_SEED={s.seed} .venv/bin/python -m pytest tests/sim/test_ledger_sim.py -q",
            f"stats: {outcome.stats}",
            *outcome.violations,
        ]
    )


@pytest.mark.parametrize("seed", seeds(), ids=lambda seed: f"seed{seed}")
def test_invariants_hold_under_crashes_and_recovery(seed: int) -> None:
    outcome = run(make_scenario(seed))
    if outcome.violations:
        pytest.fail(report(outcome), pytrace=False)


def test_control_without_fsync_reports_loss() -> None:
    """Nodes ack before their journal bytes are durable: a power loss must lose
    confirmed entries on some seed, and the checker must say so."""
    lossy = {}
    for seed in CONTROL_SEEDS:
        outcome = run(make_scenario(seed, fsync=False))
        loss = [v for v in outcome.violations if "LOSS" in v]
        if loss:
            lossy[seed] = loss
    assert lossy, f"no LOSS found without fsync on seeds {CONTROL_SEEDS}: the checker cannot fail"
    print(f"control without fsync: LOSS on seeds {sorted(lossy)}")  # for the record (pytest -s)


def test_control_without_fencing_lets_the_old_writer_in() -> None:
    """Nodes ignore the fenced flag for normal adds: the old writer gets in."""
    caught = [
        seed
        for seed in CONTROL_SEEDS
        if any("took its old writer" in v for v in run(make_scenario(seed, fencing=False)).violations)
    ]
    assert caught, f"no fencing violation found with fencing off on seeds {CONTROL_SEEDS}"


def test_same_seed_replays_exactly() -> None:
    first, again, other = run(make_scenario(11)), run(make_scenario(11)), run(make_scenario(12))
    assert first.digest == again.digest and first.stats == again.stats
    assert first.digest != other.digest


def test_scenarios_exercise_every_fault() -> None:
    """Guard against a generator that quietly stops injecting faults (all green, no test)."""
    totals: Counter[str] = Counter()
    shapes: Counter[str] = Counter()
    for seed in COVERAGE_SEEDS:
        scenario = make_scenario(seed)
        outcome = run(scenario)
        totals.update(outcome.stats)
        shapes[f"E={scenario.ensemble}"] += 1
        shapes["recovery while writing"] += outcome.stats["appended"] < scenario.entries
        shapes["outage"] += bool(scenario.outage)
        shapes["second recoverer"] += scenario.second_recovery_at_ms is not None
        shapes["slow disk"] += bool(scenario.slow_disks)
        shapes["clogged connection"] += bool(scenario.clogs)
        shapes[scenario.family] += 1
    for stat in (
        "crashes",
        "torn_or_lost_tails",
        "ensemble_changes",
        "writer_failed",
        "fenced_refusals",
        "journal_rejects",
        "tailer_entries",
        "lost_messages",
        "recovered_unconfirmed",
    ):
        assert totals[stat] > 0, f"no {stat} in seeds {COVERAGE_SEEDS}: {dict(totals)}"
    assert totals["recovery_attempts"] > len(COVERAGE_SEEDS), "no recovery ever had to retry"
    for shape in (
        "E=3",
        "E=4",
        "E=5",
        "recovery while writing",
        "outage",
        "second recoverer",
        "slow disk",
        "clogged connection",
        "takeover",
    ):
        assert shapes[shape] > 0, f"no seed with {shape}: {dict(shapes)}"
