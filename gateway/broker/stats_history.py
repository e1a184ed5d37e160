"""A topic's recent rates and backlog, for the dashboard's charts (pure).

Owns: ``StatsHistory``, a bounded ring of samples (one every ``interval_ms``,
the last ``capacity`` of them: 5 s x 180 = 15 minutes by default) and its JSON
form ``{"intervalMs", "samples": [{"t", "msgRateIn", ...}]}``. Rule: the
topic's maintenance loop offers a sample every tick; the ring keeps one per
interval and never grows past its capacity.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

HISTORY_INTERVAL_MS = 5_000
HISTORY_CAPACITY = 180  # 15 minutes


@dataclass(frozen=True, slots=True)
class StatsSample:
    t: int  # epoch ms
    msgRateIn: float  # Pulsar's field names
    msgRateOut: float
    msgThroughputIn: float
    msgThroughputOut: float
    msgBacklog: int
    storageSize: int


class StatsHistory:
    __slots__ = ("_interval_ms", "_samples")

    def __init__(self, interval_ms: int = HISTORY_INTERVAL_MS, capacity: int = HISTORY_CAPACITY) -> None:
        assert interval_ms > 0 and capacity > 0
        self._interval_ms = interval_ms
        self._samples: deque[StatsSample] = deque(maxlen=capacity)

    def due(self, now_ms: int) -> bool:
        """Whether a sample taken at ``now_ms`` would be kept."""
        return not self._samples or now_ms - self._samples[-1].t >= self._interval_ms

    def offer(self, sample: StatsSample) -> bool:
        """Keep ``sample`` if an interval has passed since the last one kept."""
        if not self.due(sample.t):
            return False
        self._samples.append(sample)
        return True

    def __len__(self) -> int:
        return len(self._samples)

    def to_json(self) -> dict[str, Any]:
        return {"intervalMs": self._interval_ms, "samples": [asdict(s) for s in self._samples]}


def merge(histories: list[dict[str, Any]]) -> dict[str, Any]:
    """Partitions' histories as one: samples summed per interval slot (partitioned topics)."""
    interval = int(histories[0]["intervalMs"]) if histories else HISTORY_INTERVAL_MS
    slots: dict[int, dict[str, Any]] = {}
    for history in histories:
        for sample in history["samples"]:
            slot = int(sample["t"]) // interval * interval
            merged = slots.setdefault(slot, {"t": slot})
            for key, value in sample.items():
                if key != "t":
                    merged[key] = merged.get(key, 0) + value
    return {"intervalMs": interval, "samples": [slots[t] for t in sorted(slots)]}
