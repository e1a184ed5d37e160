"""Result rows and tables of ``folio bench gateway``: no I/O but ``str`` building (pure).

Owns: the ``Row`` of one measurement, the median over repetitions, the text
table (the same columns for Folio and for the peers so they read side by
side), the peer harness's JSON lines turned into rows, and the summary of a
py-spy profile in collapsed ("raw") format. Rule: CPU columns are % of ONE
core, as the peer harness prints them; ``srv%`` = everything server-side we
started (gateways + storage nodes + etcd + auditor), comparable with the
peers' ``server`` CPU.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from folio.bench_stats import percentile

SERVER_GROUPS = ("gw", "node", "etcd")
TOPIC_WORKLOAD = "W1 topics"  # the rows of the topic curve (``--topics``)
PEER_NAMES = {"nats-jetstream": "nats", "redis-streams": "redis", "rabbitmq": "rabbit"}


@dataclass(frozen=True)
class Row:
    system: str  # "folio" or "<peer>:<config>"
    workload: str  # "W1", "W3", "W2 e2e", "W2 ack"
    mode: str  # ws, ws-batch, rest-batch (peers: "-")
    size: int
    msgs: int
    seconds: float
    msgs_per_s: float
    mb_per_s: float
    p50_ms: float | None = None
    p99_ms: float | None = None
    cpu: Mapping[str, float] = field(default_factory=dict)
    errors: int = 0
    note: str = ""
    error_kinds: Mapping[str, int] = field(default_factory=dict)  # what each error was -> how many
    reps: int = 1
    topics: int = 1  # the load spread over this many topics (``--topics``)

    @property
    def key(self) -> tuple[str, str, str, int, int]:
        return self.system, self.workload, self.mode, self.size, self.topics

    def us_per_msg(self, group: str) -> float | None:
        """CPU of ``group`` ("srv": the server side) per message, in microseconds."""
        pct = server_cpu(self.cpu) if group == "srv" else self.cpu.get(group)
        return us_per_msg(pct, self.msgs_per_s)


def us_per_msg(cpu_pct: float | None, msgs_per_s: float) -> float | None:
    """CPU % of one core at ``msgs_per_s`` -> CPU microseconds per message."""
    if cpu_pct is None or msgs_per_s <= 0:
        return None
    return cpu_pct * 1e4 / msgs_per_s


def latency_columns(samples: Sequence[float]) -> tuple[float | None, float | None]:
    if not samples:
        return None, None
    return percentile(samples, 50), percentile(samples, 99)


def server_cpu(cpu: Mapping[str, float]) -> float | None:
    if "server" in cpu:
        return cpu["server"]
    if not any(group in cpu for group in SERVER_GROUPS):
        return None
    return round(sum(cpu.get(group, 0.0) for group in SERVER_GROUPS), 1)


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def merge_reps(rows: Sequence[Row]) -> list[Row]:
    """One row per (system, workload, mode, size): medians over repetitions, errors (and their
    kinds) summed,
    each part of the notes once (with how many reps had it, if not all). Order of first
    appearance is kept."""
    groups: dict[tuple[str, str, str, int, int], list[Row]] = {}
    for row in rows:
        groups.setdefault(row.key, []).append(row)
    merged = []
    for same in groups.values():
        first = same[0]
        if len(same) == 1:
            merged.append(first)
            continue
        cpu_keys = {k for r in same for k in r.cpu}
        parts: dict[str, int] = {}  # each "; "-separated part of the notes -> reps that had it
        for r in same:
            for part in dict.fromkeys(p for p in r.note.split("; ") if p):
                parts[part] = parts.get(part, 0) + 1
        notes = [p if n == len(same) else f"{p} ({n} of {len(same)} reps)" for p, n in parts.items()]
        merged.append(
            replace(
                first,
                msgs=int(statistics.median(r.msgs for r in same)),
                seconds=statistics.median(r.seconds for r in same),
                msgs_per_s=statistics.median(r.msgs_per_s for r in same),
                mb_per_s=statistics.median(r.mb_per_s for r in same),
                p50_ms=_median(r.p50_ms for r in same),
                p99_ms=_median(r.p99_ms for r in same),
                cpu={k: statistics.median(r.cpu.get(k, 0.0) for r in same) for k in sorted(cpu_keys)},
                errors=sum(r.errors for r in same),
                error_kinds=dict(sum((Counter(r.error_kinds) for r in same), Counter())),
                note="; ".join(notes),
                reps=len(same),
            )
        )
    return merged


def _num(value: float | None, width: int, digits: int = 0) -> str:
    if value is None:
        return "-".rjust(width)
    if digits == 0 or abs(value) >= 100:
        return f"{value:>{width},.0f}"
    if abs(value) >= 10:
        return f"{value:>{width}.1f}"
    return f"{value:>{width}.{digits}f}"


HEADER = (
    f"{'system':<22} {'workload':<8} {'mode':<10} {'bytes':>5} {'msgs':>8} {'msg/s':>8} {'MB/s':>6}"
    f" {'p50 ms':>7} {'p99 ms':>7} {'gw%':>5} {'node%':>5} {'etcd%':>5} {'srv%':>5} {'cli%':>5}"
    f" {'oth%':>5} {'srvµs':>6} {'cliµs':>6}  note"
)


def format_row(row: Row) -> str:
    cpu = row.cpu
    note = row.note
    if row.errors:
        note = f"{row.errors} errors; {note}" if note else f"{row.errors} errors"
    return (
        f"{row.system:<22} {row.workload:<8} {row.mode:<10} {row.size:>5} {row.msgs:>8,}"
        f" {_num(row.msgs_per_s, 8)} {_num(row.mb_per_s, 6, 2)}"
        f" {_num(row.p50_ms, 7, 2)} {_num(row.p99_ms, 7, 2)}"
        f" {_num(cpu.get('gw'), 5)} {_num(cpu.get('node'), 5)} {_num(cpu.get('etcd'), 5)}"
        f" {_num(server_cpu(cpu), 5)} {_num(cpu.get('client'), 5)} {_num(cpu.get('other'), 5)}"
        f" {_num(row.us_per_msg('srv'), 6, 1)} {_num(row.us_per_msg('client'), 6, 1)}  {note}"
    ).rstrip()


def format_table(rows: Sequence[Row]) -> str:
    lines = [HEADER, "-" * len(HEADER)]
    previous = ""
    for row in rows:
        if previous and row.system != previous:
            lines.append("")
        previous = row.system
        lines.append(format_row(row))
    return "\n".join(lines)


# ---------------------------------------------------------------- the topic curve

TOPIC_HEADER = (
    f"{'system':<22} {'topics':>6} {'msgs':>8} {'msg/s':>8} {'p50 ms':>7} {'p99 ms':>7}"
    f" {'gw µs':>6} {'node µs':>7} {'srv µs':>6} {'cli µs':>6} {'gw idle%':>8} {'node idle%':>10}"
    f" {'cli%':>5} {'oth%':>5}  note"
)


def format_topic_row(row: Row) -> str:
    note = f"{row.errors} errors; {row.note}" if row.errors else row.note
    return (
        f"{row.system:<22} {row.topics:>6,} {row.msgs:>8,} {_num(row.msgs_per_s, 8)}"
        f" {_num(row.p50_ms, 7, 2)} {_num(row.p99_ms, 7, 2)} {_num(row.us_per_msg('gw'), 6, 1)}"
        f" {_num(row.us_per_msg('node'), 7, 1)} {_num(row.us_per_msg('srv'), 6, 1)}"
        f" {_num(row.us_per_msg('client'), 6, 1)} {_num(row.cpu.get('gw idle'), 8, 1)}"
        f" {_num(row.cpu.get('node idle'), 10, 1)} {_num(row.cpu.get('client'), 5)}"
        f" {_num(row.cpu.get('other'), 5)}  {note}"
    ).rstrip()


def topic_ratios(rows: Sequence[Row]) -> dict[str, float]:
    """Most topics ÷ fewest: throughput and CPU per message per group (empty if < 2 counts;
    a failed row, with no message, is left out)."""
    curve = sorted((r for r in rows if r.workload == TOPIC_WORKLOAD and r.msgs > 0), key=lambda r: r.topics)
    if len(curve) < 2 or curve[0].topics == curve[-1].topics:
        return {}
    low, high = curve[0], curve[-1]
    ratios: dict[str, float] = {}
    if low.msgs_per_s > 0:
        ratios["msg/s"] = high.msgs_per_s / low.msgs_per_s
    for group in ("gw", "node", "srv", "client"):
        a, b = low.us_per_msg(group), high.us_per_msg(group)
        if a and b is not None:
            ratios[f"{group} µs/msg"] = b / a
    return ratios


def format_topic_table(rows: Sequence[Row]) -> str:
    curve = [r for r in rows if r.workload == TOPIC_WORKLOAD]
    lines = [TOPIC_HEADER, "-" * len(TOPIC_HEADER), *(format_topic_row(r) for r in curve)]
    ratios = topic_ratios(curve)
    if ratios:
        counts = sorted(r.topics for r in curve)
        parts = ", ".join(f"{name} {value:.2f}x" for name, value in ratios.items())
        lines.append(f"{counts[-1]:,} topics ÷ {counts[0]:,}: {parts}")
    return "\n".join(lines)


# ---------------------------------------------------------------- peers


def peer_rows(records: Iterable[Mapping[str, Any]]) -> list[Row]:
    """Rows from the peer harness's JSON lines (results/<group>.jsonl), one per record."""
    rows = []
    for r in records:
        workload = r.get("workload")
        name = str(r.get("system", "?"))
        system = f"{PEER_NAMES.get(name, name)}:{r.get('config', '?')}"
        cpu = {
            "server": float(r.get("cpu_server_pct", 0.0)),
            "client": float(r.get("cpu_client_pct", 0.0)),
            "other": float(r.get("other_pct", 0.0)),
        }
        if workload in ("W1", "W3"):
            note = ""
            if workload == "W3":
                note = f"backlog {r.get('backlog', 0):,}"
            if r.get("capped_by_time"):
                note = f"{note}; time-capped" if note else "time-capped"
            rows.append(
                Row(system, str(workload), "-", int(r.get("payload", 0)), int(r.get("msgs", 0)),
                    float(r.get("secs", 0.0)), float(r.get("msgs_per_s", 0.0)), float(r.get("MBps", 0.0)),
                    cpu=cpu, errors=int(r.get("errors", 0) or 0), note=note)
            )  # fmt: skip
        elif workload == "W2":
            rate = float(r.get("achieved_send_rate", 0.0))
            note = f"offered {r.get('offered_rate')}/s, received {r.get('received')}/{r.get('msgs')}"
            base = Row(system, "W2 e2e", "-", 100, int(r.get("received", 0)), 0.0, rate, rate * 100 / 1e6,
                       r.get("e2e_p50_ms"), r.get("e2e_p99_ms"), cpu, note=note)  # fmt: skip
            rows.append(base)
            rows.append(replace(base, workload="W2 ack", p50_ms=r.get("puback_p50_ms"),
                                p99_ms=r.get("puback_p99_ms"), note=""))  # fmt: skip
    return rows


# ---------------------------------------------------------------- profiles

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def _function(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = "/".join(match.group("file").split("/")[-2:])
    return f"{match.group('func')} ({path})"


def profile_top(collapsed: str, top: int = 10) -> tuple[int, list[tuple[str, float, float]]]:
    """From py-spy ``--format raw`` output: (samples, [(function, self %, total %)]) sorted by self %."""
    self_count: Counter[str] = Counter()
    total_count: Counter[str] = Counter()
    samples = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        samples += count
        frames = [_function(f) for f in stack.split(";") if f]
        if not frames:
            continue
        self_count[frames[-1]] += count
        for name in set(frames):
            total_count[name] += count
    if samples == 0:
        return 0, []
    ranked = [
        (name, 100.0 * n / samples, 100.0 * total_count[name] / samples)
        for name, n in self_count.most_common(top)
    ]
    return samples, ranked
