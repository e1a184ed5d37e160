"""Checkers of a fault-run history: a list of operation dicts in, counts out (pure).

Owns: what a history must satisfy. Operations (``history.py``) are dicts with
``t`` (seconds), ``type`` (invoke/ok/fail/info) and ``f``:
``publish`` (producer ``process``, ``topic``, ``seq``, ``key``; an ok carries the
message ``id`` "L:E:P:B" and ``duplicate``), ``deliver`` (a consumer got
``producer``/``seq`` with ``id`` on ``topic``/``sub`` of type ``subtype``),
``read`` (the final read of a topic partition, after the gateways were cold
restarted), ``cursor`` (a persisted mark-delete ``mark`` [L, E] sampled from
etcd), ``fault`` (``kind``, ``phase`` start/heal; a power loss's heal carries
``unsynced_bytes_dropped`` and ``unsynced_records_dropped``) and ``crash``.
Rules checked:
- lost: a publish answered ok whose value is not in the final read, or whose
  acked id is not there (an ack from a zombie, for a place the log lost);
- unexpected: a value read or delivered that no producer ever sent;
- inconsistent: one message id seen with two payloads;
- duplicated (dedup): a value stored twice in a namespace with dedup on;
- order: per (topic partition, producer) in the final read; per (producer, key)
  for Key_Shared deliveries; per producer for Exclusive/Failover deliveries -
  first occurrences of acked values come in sequence order (redeliveries, and
  the duplicates an at-least-once retry stores, are allowed);
- cursor regressions: a subscription's persisted mark-delete going back;
- acks without quorum: a publish sent after a fault killed ``QUORUM_LOST_DOWN``
  or more nodes (from its ``down`` op: every target had exited) and acked (not
  as a duplicate) before any of them was started again - with 3 nodes and an
  ack quorum of 2 nothing can be durable then;
- dual acks: no two owners acknowledge publishes for one topic partition in
  overlapping tenures. A message id's ledger names the tenure that acked it (an
  owner writes only ledgers it created, and a new owner recovers - fences - the
  previous owner's ledger before it writes its own), and a tenure begins with its
  ledger's first ack. An ok (not a duplicate) in ledger L for a publish *sent*
  after a later-begun ledger L' of the same topic partition had already acked is
  a dual ack: L's owner acknowledged while another tenure was in force (a gateway
  that kept serving after its lease ended, unfenced);
- unavailability: per fault, the seconds from its start until every topic has
  answered ok to a publish sent after that start (the worst topic counts);
  ``after-final-heal`` measures the same from the ``healed`` op (every fault
  over, every process running) - how long the cluster takes to serve again.
  Faults follow each other, so one long outage is charged to every fault that
  starts during it; the *own* figure leaves out of a fault's window each topic
  that had not published again since the previous fault began (counted as
  ``inherited``), and a fault with every topic inherited has no own window.
"""

from __future__ import annotations

import bisect
import statistics
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

Op = dict[str, Any]
Value = tuple[str, int]  # (producer, seq)
IdKey = tuple[int, int, int]  # (ledger, entry, batch index)

ORDERED_SUBSCRIPTIONS = ("Exclusive", "Failover")
QUORUM_LOST_DOWN = 2  # of 3 nodes, ack quorum 2
HEALED = "after-final-heal"  # liveness: from the end of the last fault until every topic publishes


def id_key(message_id: str) -> IdKey:
    ledger, entry, _partition, batch = (int(x) for x in message_id.split(":"))
    return ledger, entry, batch


@dataclass
class Unavailability:
    kind: str
    seconds: list[float] = field(default_factory=list)

    def describe(self) -> str:
        if not self.seconds:
            return f"{self.kind}=n/a"
        worst, median = max(self.seconds), statistics.median(self.seconds)
        return f"{self.kind}=max {worst:.1f}s p50 {median:.1f}s (n={len(self.seconds)})"


@dataclass
class Result:
    acked: int = 0
    read: int = 0
    lost: list[Value] = field(default_factory=list)
    unexpected: list[Value] = field(default_factory=list)
    inconsistent: list[IdKey] = field(default_factory=list)
    duplicated_dedup: list[Value] = field(default_factory=list)
    order_violations: list[tuple[Hashable, int, int]] = field(default_factory=list)
    cursor_regressions: list[tuple[str, str, list[int], list[int]]] = field(default_factory=list)
    acks_without_quorum: list[Value] = field(default_factory=list)
    dual_acks: list[tuple[str, int, int, Value]] = field(default_factory=list)  # topic, ledger, later one
    recovered: int = 0  # sent, never acked, read anyway
    faults: Counter[str] = field(default_factory=Counter)
    crashes: Counter[str] = field(default_factory=Counter)
    unavailability: dict[str, Unavailability] = field(default_factory=dict)
    unavailability_own: dict[str, Unavailability] = field(default_factory=dict)  # inherited topics left out
    inherited: int = 0  # (fault, topic) windows that began in an earlier fault's outage
    step_down_s: list[float] = field(default_factory=list)  # a woken, paused owner until it stepped down
    owners_still_running: int = 0  # woken owners that had not stepped down when the nemesis stopped watching
    powerloss_faults: int = 0
    powerloss_biting: int = 0  # power losses that dropped at least one unsynced byte
    powerloss_dropped_bytes: int = 0
    powerloss_dropped_records: int = 0

    @property
    def safe(self) -> bool:
        return not (
            self.lost
            or self.unexpected
            or self.inconsistent
            or self.duplicated_dedup
            or self.order_violations
            or self.cursor_regressions
            or self.acks_without_quorum
            or self.dual_acks
        )

    def line(self) -> str:
        return (
            f"acked={self.acked} lost={len(self.lost)} unexpected={len(self.unexpected)} "
            f"duplicated(dedup)={len(self.duplicated_dedup)} order_violations={len(self.order_violations)} "
            f"cursor_regressions={len(self.cursor_regressions)} inconsistent={len(self.inconsistent)} "
            f"acks_without_quorum={len(self.acks_without_quorum)} dual_acks={len(self.dual_acks)} "
            f"recovered={self.recovered} read={self.read} faults={sum(self.faults.values())} "
            f"powerloss_dropped_bytes={self.powerloss_dropped_bytes} "
            f"records={self.powerloss_dropped_records} over {self.powerloss_faults} faults "
            f"({self.powerloss_biting} dropped something)"
        )

    def unavailability_line(self) -> str:
        line = "unavailability " + " ".join(u.describe() for _, u in sorted(self.unavailability.items()))
        if self.step_down_s or self.owners_still_running:
            worst = f"max {max(self.step_down_s):.1f}s" if self.step_down_s else "n/a"
            line += f" | paused owners stepped down {worst} after waking (n={len(self.step_down_s)})"
            line += f", still running {self.owners_still_running}"
        return line

    def unavailability_own_line(self) -> str:
        kinds = [u.describe() for _, u in sorted(self.unavailability_own.items())]
        return " ".join(["unavailability_own", *kinds, f"inherited={self.inherited}"])

    def details(self, limit: int = 10) -> str:
        parts = []
        names = (
            "lost",
            "unexpected",
            "inconsistent",
            "duplicated_dedup",
            "order_violations",
            "acks_without_quorum",
            "dual_acks",
        )
        for name in names:
            items = getattr(self, name)
            if items:
                parts.append(f"{name}: {items[:limit]}")
        if self.cursor_regressions:
            parts.append(f"cursor_regressions: {self.cursor_regressions[:limit]}")
        if self.crashes:
            parts.append(f"crashes (exited on their own, restarted): {dict(self.crashes)}")
        return "\n".join(parts)


def _value(op: Op) -> Value:
    return str(op["producer"]), int(op["seq"])


def check(history: Iterable[Op], dedup_topics: Iterable[str] = ()) -> Result:
    ops = sorted(history, key=lambda op: op["t"])
    result = Result()
    sent: set[Value] = set()
    acked: dict[Value, list[str]] = defaultdict(list)
    reads: list[Op] = []
    deliveries: list[Op] = []
    for op in ops:
        f, kind = op.get("f"), op.get("type")
        if f == "publish" and kind == "invoke":
            sent.add((str(op["process"]), int(op["seq"])))
        elif f == "publish" and kind == "ok":
            acked[(str(op["process"]), int(op["seq"]))].append(str(op.get("id", "")))
        elif f == "read":
            reads.append(op)
        elif f == "deliver":
            deliveries.append(op)
        elif f == "fault" and op.get("phase") == "start":
            result.faults[str(op["kind"])] += 1
        elif f == "fault" and op.get("phase") == "heal" and "unsynced_bytes_dropped" in op:
            result.powerloss_faults += 1
            result.powerloss_biting += op["unsynced_bytes_dropped"] > 0
            result.powerloss_dropped_bytes += int(op["unsynced_bytes_dropped"])
            result.powerloss_dropped_records += int(op.get("unsynced_records_dropped", 0))
        elif f == "fault" and op.get("phase") == "heal" and "stepped_down_s" in op:
            result.step_down_s.append(float(op["stepped_down_s"]))
        elif f == "fault" and op.get("phase") == "heal" and "still_running_after_s" in op:
            result.owners_still_running += 1
        elif f == "crash":
            result.crashes[str(op["process"])] += 1
    result.acked = len(acked)
    result.read = len(reads)
    read_values = {_value(op) for op in reads}
    read_ids = {id_key(op["id"]) for op in reads}
    for value, ids in sorted(acked.items()):
        stored_ids = [id_key(i) for i in ids if i and id_key(i)[0] >= 0]
        if value not in read_values or any(i not in read_ids for i in stored_ids):
            result.lost.append(value)
    result.recovered = len({v for v in read_values if v in sent and v not in acked})
    result.unexpected = sorted({_value(op) for op in (*reads, *deliveries)} - sent)
    result.inconsistent = _inconsistent(reads, deliveries, acked)
    dedup = set(dedup_topics)
    stored: dict[Value, set[IdKey]] = defaultdict(set)  # a value read twice at one id is one copy
    for op in reads:
        if _base(op["topic"]) in dedup:
            stored[_value(op)].add(id_key(op["id"]))
    result.duplicated_dedup = sorted(v for v, ids in stored.items() if len(ids) > 1)
    result.order_violations = _order(reads, deliveries, set(acked))
    result.cursor_regressions = _cursor_regressions(ops)
    result.unavailability, result.unavailability_own, result.inherited = _unavailability(ops)
    result.acks_without_quorum = _acks_without_quorum(ops)
    result.dual_acks = _dual_acks(ops)
    return result


def _dual_acks(ops: list[Op]) -> list[tuple[str, int, int, Value]]:
    """Acks of one tenure (ledger) for publishes sent after a later tenure of the same
    topic partition had begun acking (``ops`` in time order)."""
    sent_at: dict[tuple[str, int, str], float] = {}  # (producer, seq, topic) -> its latest send
    acks: dict[tuple[str, int], list[tuple[int, float, float, Value]]] = defaultdict(list)
    for op in ops:
        if op.get("f") != "publish":
            continue
        value, topic = (str(op["process"]), int(op["seq"])), str(op["topic"])
        if op["type"] == "invoke":
            sent_at[(*value, topic)] = float(op["t"])
        elif op["type"] == "ok" and op.get("id") and not op.get("duplicate"):
            ledger, _entry, partition, _batch = (int(x) for x in str(op["id"]).split(":"))
            if ledger >= 0:
                sent = sent_at.get((*value, topic), float(op["t"]))
                acks[(topic, partition)].append((ledger, sent, float(op["t"]), value))
    found: list[tuple[str, int, int, Value]] = []
    for (topic, _partition), items in sorted(acks.items()):
        began: dict[int, float] = {}
        for ledger, _sent, acked_at, _value in items:
            began[ledger] = min(began.get(ledger, acked_at), acked_at)
        for ledger, sent, _acked_at, value in items:
            later = [other for other, t in began.items() if t > began[ledger] and t < sent]
            if later:
                found.append((topic, ledger, min(later, key=began.__getitem__), value))
    return found


def _base(topic: str) -> str:
    """The topic a partition belongs to (``x-partition-2`` -> ``x``)."""
    head, sep, tail = topic.rpartition("-partition-")
    return head if sep and tail.isdigit() else topic


def _inconsistent(reads: list[Op], deliveries: list[Op], acked: dict[Value, list[str]]) -> list[IdKey]:
    seen: dict[IdKey, set[Value]] = defaultdict(set)
    for op in (*reads, *deliveries):
        seen[id_key(op["id"])].add(_value(op))
    for value, ids in acked.items():
        for i in ids:
            if i and id_key(i)[0] >= 0:
                seen[id_key(i)].add(value)
    return sorted(k for k, values in seen.items() if len(values) > 1)


def _first_in_order(
    records: Iterable[tuple[Hashable, Value]], acked: set[Value]
) -> list[tuple[Hashable, int, int]]:
    """Groups whose first occurrences of acked values go back in sequence."""
    violations = []
    seen: set[tuple[Hashable, Value]] = set()
    highest: dict[Hashable, int] = {}
    for group, value in records:
        if value not in acked or (group, value) in seen:
            continue
        seen.add((group, value))
        top = highest.get(group, -1)
        if value[1] < top:
            violations.append((group, top, value[1]))
        highest[group] = max(top, value[1])
    return violations


def _order(reads: list[Op], deliveries: list[Op], acked: set[Value]) -> list[tuple[Hashable, int, int]]:
    records: list[tuple[Hashable, Value]] = [
        (("read", op["topic"], op["producer"]), _value(op)) for op in reads
    ]
    for op in deliveries:
        where = (op["topic"], op["sub"], op["producer"])
        if op["subtype"] == "Key_Shared":
            records.append((("key", *where, op.get("key")), _value(op)))
        elif op["subtype"] in ORDERED_SUBSCRIPTIONS:
            records.append((("sub", *where), _value(op)))
    return _first_in_order(records, acked)


def _cursor_regressions(ops: list[Op]) -> list[tuple[str, str, list[int], list[int]]]:
    last: dict[tuple[str, str], list[int]] = {}
    regressions = []
    for op in ops:
        if op.get("f") != "cursor":
            continue
        where, mark = (str(op["topic"]), str(op["sub"])), list(op["mark"])
        before = last.get(where)
        if before is not None and mark < before:
            regressions.append((*where, before, mark))
        last[where] = mark if before is None else max(before, mark)
    return regressions


def _unavailability(ops: list[Op]) -> tuple[dict[str, Unavailability], dict[str, Unavailability], int]:
    """Per kind: the windows until every topic publishes again, the same leaving out the
    topics still down from an earlier fault, and how many (fault, topic) windows were so left out."""
    starts = [
        (op["t"], str(op["kind"])) for op in ops if op.get("f") == "fault" and op.get("phase") == "start"
    ]
    healed = [op["t"] for op in ops if op.get("f") == "healed"]
    invoked: dict[tuple[str, int], float] = {}
    oks: dict[str, list[tuple[float, float]]] = defaultdict(list)  # topic -> (invoked, answered)
    for op in ops:
        if op.get("f") != "publish":
            continue
        value = (str(op["process"]), int(op["seq"]))
        if op["type"] == "invoke":
            invoked[value] = op["t"]  # the latest attempt's time
        elif op["type"] == "ok" and value in invoked:
            oks[_base(str(op["topic"]))].append((invoked[value], op["t"]))
    end = max((op["t"] for op in ops), default=0.0)
    back = [_Recovery(answers, end) for answers in oks.values()]
    out: dict[str, Unavailability] = {}
    own: dict[str, Unavailability] = {}
    inherited = 0
    previous: float | None = None
    for t0, kind in sorted(starts):
        windows = [topic.after(t0) - t0 for topic in back]
        out.setdefault(kind, Unavailability(kind)).seconds.append(max(windows, default=0.0))
        # a topic not yet publishing again since the previous fault began is still in that outage
        still_down = [previous is not None and topic.after(previous) > t0 for topic in back]
        inherited += sum(still_down)
        mine = [w for w, down in zip(windows, still_down, strict=True) if not down]
        if mine or not windows:
            own.setdefault(kind, Unavailability(kind)).seconds.append(max(mine, default=0.0))
        previous = t0
    for t0 in healed:
        worst = max((topic.after(t0) - t0 for topic in back), default=0.0)
        out.setdefault(HEALED, Unavailability(HEALED)).seconds.append(worst)
    return out, own, inherited


class _Recovery:
    """One topic's publishes: when the first one sent at or after a time was answered ok."""

    def __init__(self, answers: list[tuple[float, float]], end: float) -> None:
        answers = sorted(answers)
        self.sent = [sent_at for sent_at, _ in answers]
        self.first_ok = [end] * (len(answers) + 1)  # earliest answer among those sent from i on
        for i in range(len(answers) - 1, -1, -1):
            self.first_ok[i] = min(answers[i][1], self.first_ok[i + 1])

    def after(self, t0: float) -> float:
        return self.first_ok[bisect.bisect_left(self.sent, t0)]


def _acks_without_quorum(ops: list[Op]) -> list[Value]:
    windows: list[tuple[float, float]] = []
    start: float | None = None
    for op in ops:
        if op.get("f") != "fault":
            continue
        if op.get("phase") in ("start", "down"):
            start = op["t"]  # ``down`` (every target exited) narrows the window when recorded
        elif op.get("phase") == "restart" and start is not None and op.get("down", 0) >= QUORUM_LOST_DOWN:
            windows.append((start, op["t"]))
    if not windows:
        return []
    invoked: dict[Value, float] = {}
    bad: list[Value] = []
    for op in ops:
        if op.get("f") != "publish":
            continue
        value = (str(op["process"]), int(op["seq"]))
        if op["type"] == "invoke":
            invoked[value] = op["t"]
        elif op["type"] == "ok" and not op.get("duplicate") and value in invoked:
            sent, answered = invoked[value], op["t"]
            if any(low <= sent and answered < high for low, high in windows):
                bad.append(value)
    return bad
