"""A subscription's backlog, the age of its oldest unacknowledged message and
its time to drain, from a topic's profile and the cursor stored in etcd (pure).

Owns: ``subscription_lag``. Rule: the cursor is the JSON the gateways store
under ``coordination.keys.cursor`` (docs/decisions/0005: ``markDelete [L, E]``
and individually acknowledged ``ranges [[L, first, last]..]``); messages are
counted on the profile's per-ledger entry index, pro rata inside an index
cell, so counts are exact at cell edges and interpolated between. The consume
rate is the change in acknowledged messages since the previous run (or the
owning gateway's ``msgRateOut`` when known), and time to drain is backlog /
rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from folio_analytics.grid import NO_TIME
from folio_analytics.profile import Profile


@dataclass(frozen=True, slots=True)
class Lag:
    backlog: int
    backlog_bytes: int
    oldest_ms: int | None  # publish time of the oldest unacknowledged message (cell precision)
    acked: int  # messages of the profile acknowledged so far

    def to_json(self, now_ms: int, rate: float | None, previous: dict[str, Any] | None) -> dict[str, Any]:
        if rate is None and previous is not None and now_ms > int(previous["atMs"]):
            rate = max(0.0, (self.acked - int(previous["acked"])) * 1000.0 / (now_ms - int(previous["atMs"])))
        drain: float | None
        if self.backlog == 0:
            drain = 0.0
        elif rate:
            drain = self.backlog / rate
        else:
            drain = None  # nothing consumed recently: never, at this rate
        return {
            "backlog": self.backlog,
            "backlogBytes": self.backlog_bytes,
            "oldestUnackedMs": self.oldest_ms,
            "ageMs": None if self.oldest_ms is None else max(0, now_ms - self.oldest_ms),
            "consumeRate": rate,
            "drainSeconds": drain,
            "acked": self.acked,
            "atMs": now_ms,
        }


def _after(profile: Profile, ledger_id: int, entry_id: int) -> tuple[float, float, int]:
    messages = size = 0.0
    oldest = NO_TIME
    for lid, series in profile.index.items():
        if lid < ledger_id:
            continue
        m, b, o = series.total_after(entry_id if lid == ledger_id else -1)
        messages += m
        size += b
        if o != NO_TIME and (oldest == NO_TIME or o < oldest):
            oldest = o
    return messages, size, oldest


def subscription_lag(profile: Profile, cursor_state: dict[str, Any]) -> Lag:
    cursor = cursor_state.get("cursor", cursor_state)
    ledger_id, entry_id = (int(x) for x in cursor["markDelete"])
    messages, size, oldest = _after(profile, ledger_id, entry_id)
    for lid, first, last in cursor.get("ranges", []):
        series = profile.index.get(int(lid))
        if series is None:
            continue
        m1, b1, _ = series.total_after(int(first) - 1)
        m2, b2, _ = series.total_after(int(last))
        messages -= m1 - m2
        size -= b1 - b2
    backlog = max(0, round(messages))
    return Lag(
        backlog,
        max(0, round(size)),
        None if oldest == NO_TIME or backlog == 0 else oldest,
        profile.messages - backlog,
    )
