"""History checkers for the failure tests (pure: no asyncio, no sockets, no clock).

Owns: the record types of a test history (``Sent`` - one logical message a
test producer published, with every ``ok`` reply it got across retries;
``Delivered`` - one message frame a test consumer received) and the checks
run over them (docs/testing.md §3):
- C1 acknowledged durability: every acked message is delivered at least once
  (``lost``); ``recovered`` counts unacked messages that showed up anyway;
- C2 no phantom reads: every delivered value was published (``unexpected``);
- C4 order: per group (a producer, or a producer and a key), the sequence of
  FIRST deliveries of acked messages has increasing sequence numbers;
  redeliveries (duplicates) are allowed and ignored;
- C5 stored duplicates: each (producer, seq) appears once in a log read;
- zombie acks: every ``ok`` reply's message id is in the log as read back.
Message ids are compared as (ledger, entry, batch index) so equal ids in
different encodings still match.
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

import orjson

from storage.formats.message_id import MessageId

IdKey = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Sent:
    """One logical message (a producer's ``seq``); ``ok_ids`` from every ok reply."""

    producer: str
    seq: int
    key: str | None = None
    ok_ids: tuple[str, ...] = ()

    @property
    def acked(self) -> bool:
        return bool(self.ok_ids)


@dataclass(frozen=True, slots=True)
class Delivered:
    """One received message frame; ``index`` is the global receipt order."""

    index: int
    consumer: str
    producer: str
    seq: int
    key: str | None
    message_id: str


@dataclass
class Report:
    acked: int = 0
    delivered: int = 0
    lost: list[tuple[str, int]] = field(default_factory=list)
    unexpected: list[tuple[str, int]] = field(default_factory=list)
    duplicates: int = 0  # deliveries beyond the first of a message (allowed: at-least-once)
    order_violations: list[tuple[Hashable, int, int]] = field(default_factory=list)
    recovered: int = 0  # never acked, but delivered

    @property
    def ok(self) -> bool:
        return not (self.lost or self.unexpected or self.order_violations)

    def line(self) -> str:
        return (
            f"acked={self.acked} delivered={self.delivered} lost={len(self.lost)} "
            f"unexpected={len(self.unexpected)} dup={self.duplicates} "
            f"order_violations={len(self.order_violations)} recovered={self.recovered}"
            + (f" first_lost={self.lost[:5]}" if self.lost else "")
            + (f" first_violations={self.order_violations[:5]}" if self.order_violations else "")
        )


def by_producer(d: Delivered) -> Hashable:
    return d.producer


def by_producer_and_key(d: Delivered) -> Hashable:
    return (d.producer, d.key)


def check_history(
    sent: Iterable[Sent],
    delivered: Iterable[Delivered],
    group: Callable[[Delivered], Hashable] = by_producer,
) -> Report:
    """C1, C2 and C4 over one history (see the module docstring)."""
    messages = {(s.producer, s.seq): s for s in sent}
    deliveries = sorted(delivered, key=lambda d: d.index)
    report = Report(acked=sum(1 for s in messages.values() if s.acked), delivered=len(deliveries))
    first: dict[tuple[str, int], Delivered] = {}
    for d in deliveries:
        ident = (d.producer, d.seq)
        if ident not in messages:
            report.unexpected.append(ident)
        elif ident in first:
            report.duplicates += 1
        else:
            first[ident] = d
    report.lost = sorted(ident for ident, s in messages.items() if s.acked and ident not in first)
    report.recovered = sum(1 for ident, s in messages.items() if not s.acked and ident in first)
    last_seq: dict[Hashable, int] = {}
    for d in sorted(first.values(), key=lambda d: d.index):
        if not messages[(d.producer, d.seq)].acked:
            continue
        g = group(d)
        previous = last_seq.get(g)
        if previous is not None and d.seq <= previous:
            report.order_violations.append((g, previous, d.seq))
        last_seq[g] = d.seq if previous is None else max(previous, d.seq)
    return report


def id_key(message_id: str) -> IdKey:
    """(ledger, entry, batch index) of a base64 or ``L:E:P[:B]`` message id."""
    parsed = MessageId.parse(message_id) if ":" in message_id else MessageId.from_base64(message_id)
    return parsed.ledger_id, parsed.entry_id, parsed.batch_index


def acked_ids_missing_from_log(acked_ids: Iterable[str], log_ids: Iterable[str]) -> list[str]:
    """``ok`` replies whose message id is not in the log (a zombie's or lost ack)."""
    in_log = {id_key(i) for i in log_ids}
    return [i for i in acked_ids if id_key(i) not in in_log]


def stored_duplicates(stored: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """(producer, seq) -> count, for every pair stored more than once (C5)."""
    return {ident: n for ident, n in Counter(stored).items() if n > 1}


# ------------------------------------------------------------------ payload codec


def encode_value(producer: str, seq: int, key: str | None = None) -> bytes:
    """A unique, self-describing payload: ``{"p":producer,"s":seq,"k":key}``."""
    return orjson.dumps({"p": producer, "s": seq, "k": key})


def decode_frame(index: int, consumer: str, frame: dict[str, object]) -> Delivered:
    """A consumer message frame carrying an ``encode_value`` payload."""
    payload = base64.b64decode(str(frame["payload"]))
    value = orjson.loads(payload)
    return Delivered(
        index, consumer, str(value["p"]), int(value["s"]), value.get("k"), str(frame["messageId"])
    )
