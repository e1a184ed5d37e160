"""The seeds a simulation test runs and the report of a failing one, shared by every
seeded simulation test (docs/testing.md §8): ``<ENV>=<n>`` replays one seed,
``<ENV>S=<count>`` runs that many, and a failure prints the exact replay command."""

from __future__ import annotations

import os
from collections.abc import Iterable


def seeds(env: str, default: int) -> list[int]:
    """One seed when ``env`` is set, else ``range(<env>S or default)``."""
    one = os.environ.get(env)
    if one:
        return [int(one)]
    return list(range(int(os.environ.get(f"{env}S", default))))


def report(description: str, env: str, seed: int, test: str, stats: object, violations: Iterable[str]) -> str:
    """What a failing seed prints: its scenario, how to replay it (``test`` is
    ``<file>::<name>``), its figures and every violation found."""
    return "\n".join(
        [
            description,
            f"replay: {env}={seed} .venv/bin/python -m pytest tests/sim/{test} -q",
            f"stats: {stats}",
            *violations,
        ]
    )
