"""The connector's options, parsed once on the driver (pure).

Owns: ``ReadOptions`` and ``WriteOptions`` and their parsing from Spark's
case-insensitive option map. Rules: ``etcd`` is required (``host:port[,...]``);
exactly one of ``topic``, ``topics`` (comma-separated) and ``topicsPattern``
(a regex matched in full against topic names, as Kafka's subscribePattern)
selects what is read; offsets default to ``earliest``..``latest`` for batch reads
and ``latest`` for a new stream; ``decode`` (default false) adds the
payload as a typed struct column; times are epoch milliseconds. A bad value is a
``ValueError`` naming the option; an option the reader or writer does not know
(a misspelling) is a ``ValueError`` naming the known ones (``READ_OPTIONS``,
``WRITE_OPTIONS``: name -> (default, meaning), the table docs/spark.md shows).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark_folio.names import path_of
from pyspark_folio.plan import BYTES_PER_RANGE, ENTRIES_PER_RANGE
from pyspark_folio.positions import EARLIEST_MARK, LATEST_MARK, Spec, parse_offsets

TRUE = ("true", "1", "yes")

CONNECTION_OPTIONS: dict[str, tuple[str, str]] = {
    "etcd": ("(required)", "etcd endpoints, `host:port[,host:port...]`"),
    "etcdNamespace": ("empty", "the cluster's key prefix in etcd, when it shares etcd"),
}
READ_OPTIONS: dict[str, tuple[str, str]] = {
    **CONNECTION_OPTIONS,
    "topic": ("-", "one topic (`persistent://tenant/ns/name`); exactly one of topic, topics, topicsPattern"),
    "topics": ("-", "topics, comma-separated"),
    "topicsPattern": ("-", "a regular expression matched in full against topic names"),
    "startingOffsets": (
        "`earliest` (batch), `latest` (stream)",
        "`earliest`, `latest` or JSON `{log: message id or mark}`",
    ),
    "endingOffsets": ("`latest`", "batch only: `latest` or JSON per log"),
    "startingTimestamp": ("-", "keep messages published at or after this epoch ms"),
    "endingTimestamp": ("-", "keep messages published at or before this epoch ms"),
    "failOnDataLoss": ("true", "false: a ledger gone since planning is logged and skipped"),
    "maxMessagesPerTrigger": ("-", "stream only: at most this many messages a micro-batch"),
    "entriesPerPartition": (str(ENTRIES_PER_RANGE), "entries a Spark input partition reads at most"),
    "bytesPerPartition": (str(BYTES_PER_RANGE), "entry bytes a Spark input partition reads at most"),
    "decode": ("false", "true: add the payload decoded by the topic's schema as a `decoded` struct"),
    "pushdown": ("auto", "true/false: take Spark's filters (needs filterPushdown.enabled)"),
}
WRITE_OPTIONS: dict[str, tuple[str, str]] = {
    **CONNECTION_OPTIONS,
    "topic": ("-", "the topic written to; without it, every row names its topic in a `topic` column"),
    "gateways": ("the live gateways in etcd", "gateway HTTP base URLs, comma-separated"),
    "batchMessages": ("1000", "messages a publish frame carries at most (1..1000)"),
    "batchBytes": ("1048576", "payload bytes a publish frame carries at most"),
    "bytesInFlight": ("16777216", "bytes of unacknowledged publish frames a write task holds at most"),
    "producerName": (
        "a fresh name (batch), the query id (stream)",
        "the producer name rows are deduplicated under",
    ),
}
SPARK_OWN = frozenset({"path", "checkpointlocation"})  # options Spark itself may pass along


def check_known(options: Mapping[str, str], known: Mapping[str, object], what: str) -> None:
    """A ``ValueError`` for an option ``what`` (the reader, the writer) does not know."""
    names = {name.lower(): name for name in known}
    for given in options:
        if given.lower() in names or given.lower() in SPARK_OWN:
            continue
        close = difflib.get_close_matches(given.lower(), names, n=1)
        hint = f" (did you mean {names[close[0]]}?)" if close else ""
        raise ValueError(
            f"unknown option {given!r} for the folio {what}{hint}; known options: {', '.join(known)}"
        )


def _get(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name.lower())
    return None if value is None else str(value)


def _int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    text = _get(options, name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError as exc:
        raise ValueError(f"option {name}: {text!r} is not an integer") from exc


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = _get(options, name)
    return default if text is None else text.strip().lower() in TRUE


@dataclass(frozen=True)
class Connection:
    etcd: str
    etcd_namespace: str = ""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Connection:
        etcd = _get(options, "etcd")
        if not etcd:
            raise ValueError("option etcd (host:port[,host:port...]) is required")
        return cls(etcd, _get(options, "etcdNamespace") or "")


@dataclass(frozen=True)
class ReadOptions:
    connection: Connection
    topics: frozenset[str] = frozenset()
    pattern: str | None = None
    starting_default: str = EARLIEST_MARK
    starting: dict[str, Spec] = field(default_factory=dict)
    ending_default: str = LATEST_MARK
    ending: dict[str, Spec] = field(default_factory=dict)
    starting_timestamp_ms: int | None = None
    ending_timestamp_ms: int | None = None
    fail_on_data_loss: bool = True
    max_messages_per_trigger: int | None = None
    entries_per_range: int = ENTRIES_PER_RANGE
    bytes_per_range: int = BYTES_PER_RANGE
    decode: bool = False  # add the payload as a typed struct column (decode.py)

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool = False) -> ReadOptions:
        check_known(options, READ_OPTIONS, "reader")
        given = [name for name in ("topic", "topics", "topicsPattern") if _get(options, name)]
        if len(given) != 1:
            raise ValueError("give exactly one of the options topic, topics, topicsPattern")
        topics: frozenset[str] = frozenset()
        pattern = None
        if given[0] == "topicsPattern":
            pattern = _get(options, "topicsPattern")
            assert pattern is not None
            re.compile(pattern)
        else:
            names = [n.strip() for n in (_get(options, given[0]) or "").split(",") if n.strip()]
            for name in names:
                path_of(name)  # validates
            topics = frozenset(names)
        starting_default, starting = parse_offsets(
            _get(options, "startingOffsets"), LATEST_MARK if streaming else EARLIEST_MARK
        )
        ending_default, ending = parse_offsets(_get(options, "endingOffsets"), LATEST_MARK)
        if streaming and (ending or _get(options, "endingOffsets")):
            raise ValueError("option endingOffsets is for batch reads only")
        max_messages = _int(options, "maxMessagesPerTrigger", None)
        if max_messages is not None and max_messages < 1:
            raise ValueError("option maxMessagesPerTrigger must be >= 1")
        entries = _int(options, "entriesPerPartition", ENTRIES_PER_RANGE) or ENTRIES_PER_RANGE
        byte_bound = _int(options, "bytesPerPartition", BYTES_PER_RANGE) or BYTES_PER_RANGE
        if entries < 1 or byte_bound < 1:
            raise ValueError("options entriesPerPartition and bytesPerPartition must be >= 1")
        return cls(
            Connection.parse(options),
            topics,
            pattern,
            starting_default,
            starting,
            ending_default,
            ending,
            _int(options, "startingTimestamp", None),
            _int(options, "endingTimestamp", None),
            _flag(options, "failOnDataLoss", True),
            max_messages,
            entries,
            byte_bound,
            _flag(options, "decode", False),
        )

    def selects(self, topic: str, name: str) -> bool:
        """Whether the log ``name`` of ``topic`` is read."""
        if self.pattern is not None:
            return (
                re.fullmatch(self.pattern, topic) is not None or re.fullmatch(self.pattern, name) is not None
            )
        return topic in self.topics or name in self.topics


@dataclass(frozen=True)
class WriteOptions:
    connection: Connection
    topic: str | None = None  # None: every row names its topic
    gateways: tuple[str, ...] = ()  # HTTP base URLs; empty: the live gateways in etcd
    batch_messages: int = 1000
    batch_bytes: int = 1024 * 1024
    bytes_in_flight: int = 16 * 1024 * 1024  # a task's unacknowledged frames, all partitions together
    producer_name: str | None = None  # the stable name a streaming query's producers derive from

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        check_known(options, WRITE_OPTIONS, "writer")
        topic = _get(options, "topic")
        if topic is not None:
            path_of(topic)
        gateways = tuple(
            g.strip().rstrip("/") for g in (_get(options, "gateways") or "").split(",") if g.strip()
        )
        batch_messages = _int(options, "batchMessages", 1000) or 1000
        batch_bytes = _int(options, "batchBytes", 1024 * 1024) or 1024 * 1024
        if not 1 <= batch_messages <= 1000 or batch_bytes < 1:
            raise ValueError("option batchMessages must be 1..1000 and batchBytes >= 1")
        in_flight = _int(options, "bytesInFlight", 16 * 1024 * 1024) or 16 * 1024 * 1024
        if in_flight < 1:
            raise ValueError("option bytesInFlight must be >= 1")
        return cls(
            Connection.parse(options),
            topic,
            gateways,
            batch_messages,
            batch_bytes,
            in_flight,
            _get(options, "producerName"),
        )
