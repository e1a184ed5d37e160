"""Read positions in a topic partition's log, as offsets and option values (pure).

Owns: ``Pos`` - the next message to read, ``(ledger_id, entry_id, batch_index)``,
totally ordered as the log is (ledger, entry, index in the entry) - its text form
``L:E:B`` used in offsets and checkpoints, and the parsing of the
``startingOffsets`` / ``endingOffsets`` options. Rule: a position is where
reading starts (inclusive) or stops (exclusive); ``EARLIEST`` is before every
message; ``latest`` is resolved at planning time to the end of what is
readable (LAC of the open ledger). Offsets JSON is Kafka-shaped
``{"<topic>": {"<partition>": pos}}`` (partition -1 for a non-partitioned topic)
or flat ``{"<partition's full name>": pos}``; ``pos`` is ``"L:E"``, ``"L:E:B"``,
``-2`` (earliest) or ``-1`` (latest).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from pyspark_folio.names import PARTITION_SUFFIX, TopicPartition


class Pos(NamedTuple):
    ledger_id: int
    entry_id: int
    batch_index: int = 0

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}:{self.batch_index}"

    @classmethod
    def parse(cls, text: str) -> Pos:
        parts = text.split(":")
        if not 2 <= len(parts) <= 3:
            raise ValueError(f"position {text!r} is not L:E or L:E:B")
        numbers = [int(part) for part in parts]
        return cls(*numbers)


EARLIEST = Pos(-1, -1, 0)
LATEST_MARK = "latest"  # an unresolved "latest" in parsed offsets
EARLIEST_MARK = "earliest"

# what a parsed offsets option gives per partition name: a position or a mark
Spec = Pos | str


def parse_spec(value: Any) -> Spec:
    if value in (-2, "-2", EARLIEST_MARK):
        return EARLIEST_MARK
    if value in (-1, "-1", LATEST_MARK):
        return LATEST_MARK
    if isinstance(value, str):
        return Pos.parse(value)
    if isinstance(value, list) and 2 <= len(value) <= 3 and all(type(v) is int for v in value):
        return Pos(*value)
    raise ValueError(f"offset {value!r} is not -2, -1, 'L:E[:B]' or [L, E, B]")


def parse_offsets(text: str | None, default: str) -> tuple[str, dict[str, Spec]]:
    """(the default for partitions not named, per-partition specs by full name)."""
    if text is None or text in (EARLIEST_MARK, LATEST_MARK):
        return (text or default), {}
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"offsets {text[:80]!r} are neither earliest, latest nor JSON") from exc
    if not isinstance(data, dict):
        raise ValueError("offsets JSON must be an object")
    specs: dict[str, Spec] = {}
    for topic, value in data.items():
        if isinstance(value, dict):
            for partition, spec in value.items():
                index = int(partition)
                name = topic if index < 0 else f"{topic}{PARTITION_SUFFIX}{index}"
                specs[name] = parse_spec(spec)
        else:
            specs[topic] = parse_spec(value)
    return default, specs


def spec_for(log: TopicPartition, default: str, specs: dict[str, Spec]) -> Spec:
    return specs.get(log.name, default)


def offsets_json(positions: dict[str, Pos]) -> dict[str, str]:
    """A streaming offset: partition full name -> ``L:E:B`` (JSON-friendly)."""
    return {name: str(pos) for name, pos in sorted(positions.items())}


def offsets_from_json(offset: dict[str, Any]) -> dict[str, Pos]:
    return {name: Pos.parse(str(text)) for name, text in offset.items()}
