"""When scheduled statistics runs are due, namespace by namespace (pure).

Owns: ``Schedule`` (the cluster's interval and the namespaces' own, from the
namespace policy ``analyticsIntervalSeconds``), ``due_scope`` (which
namespaces a scheduled run covers now) and ``covered`` (the record of when each
namespace was last covered, kept under ``keys.ANALYTICS_SCHEDULE``). Rules: a
namespace's interval is its policy when set, else the cluster setting (0: on
demand only); a namespace is due when it was never covered or its interval
has passed since the last run that covered it finished (failed or not, so a
failing run is not retried at once); one scheduled run covers every
namespace due at that moment - the shortest due schedule decides when it
starts - and is scoped to all namespaces (``()``) when all are due. Time is an
argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from coordination.analytics_run import DEFAULT_INTERVAL_S

POLICY = "analyticsIntervalSeconds"  # the field of a namespace's policies JSON


@dataclass(frozen=True, slots=True)
class Schedule:
    cluster_s: int = DEFAULT_INTERVAL_S
    namespaces: Mapping[str, int | None] = field(default_factory=dict)  # every namespace: policy or None

    def interval_s(self, namespace: str) -> int:
        own = self.namespaces.get(namespace)
        return self.cluster_s if own is None else own

    @classmethod
    def of(cls, settings: Mapping[str, Any] | None, policies: Mapping[str, Mapping[str, Any]]) -> Schedule:
        """From the cluster settings JSON and each namespace's policies JSON (deleted ones left out)."""
        cluster = _seconds((settings or {}).get("intervalSeconds"), DEFAULT_INTERVAL_S)
        own = {ns: _seconds(p.get(POLICY), None) for ns, p in policies.items() if not p.get("deleted")}
        return cls(cluster if cluster is not None else DEFAULT_INTERVAL_S, own)


def _seconds(value: Any, default: int | None) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return default
    return value


def due_scope(schedule: Schedule, last_ms: Mapping[str, int], now_ms: int) -> tuple[str, ...] | None:
    """The namespaces a scheduled run covers now (``()``: every one), or None if none is due."""
    due = []
    for namespace in schedule.namespaces:
        interval = schedule.interval_s(namespace)
        last = last_ms.get(namespace)
        if interval > 0 and (last is None or now_ms - last >= interval * 1000):
            due.append(namespace)
    if not due:
        return None
    return () if len(due) == len(schedule.namespaces) else tuple(sorted(due))


def covered(
    last_ms: Mapping[str, int], scope: tuple[str, ...], namespaces: Iterable[str], now_ms: int
) -> dict[str, int]:
    """``last_ms`` after a run of ``scope`` finished at ``now_ms``; namespaces that no longer
    exist are dropped, so the record stays as small as the namespace list."""
    alive = set(namespaces)
    out = {ns: ms for ns, ms in last_ms.items() if ns in alive}
    for ns in scope or alive:
        if ns in alive:
            out[ns] = now_ms
    return dict(sorted(out.items()))
