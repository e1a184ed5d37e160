"""PNG plots of ``folio bench gateway --plots DIR``: throughput, latency and the topic curve.

Owns: turning the run's rows (Folio's and the peers') into three figures and a
``rows.jsonl`` beside them (the data each figure shows, so it can be read or
plotted again). Rule: the series are chosen by pure functions (``*_series``);
only ``write_plots`` touches matplotlib (Agg backend, no display) and the
files. A figure with nothing to show is not written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import orjson

from folio.bench_gateway_report import TOPIC_WORKLOAD, Row

THROUGHPUT_PNG = "throughput.png"
LATENCY_PNG = "latency.png"
TOPICS_PNG = "topics.png"
ROWS_FILE = "rows.jsonl"


def _label(row: Row) -> str:
    mode = "" if row.mode == "-" else f" {row.mode}"
    return f"{row.workload}{mode} {row.size} B"


def throughput_series(rows: Sequence[Row]) -> dict[str, dict[str, float]]:
    """{workload and size: {system and mode: msg/s}} for W1 and W3 rows, so Folio's modes and
    the peers stand side by side in each group (pure)."""
    out: dict[str, dict[str, float]] = {}
    for row in rows:
        if row.workload in ("W1", "W3"):
            series = row.system if row.mode == "-" else f"{row.system} {row.mode}"
            out.setdefault(f"{row.workload} {row.size} B", {})[series] = row.msgs_per_s
    return out


def latency_series(rows: Sequence[Row]) -> list[tuple[str, float, float]]:
    """[(label, p50 ms, p99 ms)] of every row that measured latency, topic curve aside (pure)."""
    return [
        (f"{row.system}: {_label(row)}", row.p50_ms, row.p99_ms)
        for row in rows
        if row.p50_ms is not None and row.p99_ms is not None and row.workload != TOPIC_WORKLOAD
    ]


def topic_series(rows: Sequence[Row]) -> dict[str, list[float]]:
    """The topic curve as columns sorted by topic count: topics, msg/s, µs per message of the
    gateways, the storage nodes and the bench's client (pure)."""
    curve = sorted((r for r in rows if r.workload == TOPIC_WORKLOAD), key=lambda r: r.topics)
    return {
        "topics": [float(r.topics) for r in curve],
        "msg/s": [r.msgs_per_s for r in curve],
        "gw µs": [r.us_per_msg("gw") or 0.0 for r in curve],
        "node µs": [r.us_per_msg("node") or 0.0 for r in curve],
        "client µs": [r.us_per_msg("client") or 0.0 for r in curve],
    }


def write_plots(out_dir: Path, rows: Sequence[Row], peers: Sequence[Row], title: str) -> list[Path]:
    """Write the figures that have data and ``rows.jsonl``; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    rows_file = out_dir / ROWS_FILE
    rows_file.write_bytes(b"".join(orjson.dumps(asdict(r)) + b"\n" for r in [*rows, *peers]))
    written.append(rows_file)

    bars = throughput_series([*rows, *peers])
    if bars:
        systems = list(dict.fromkeys(s for per in bars.values() for s in per))
        fig, ax = plt.subplots(figsize=(max(8.0, 1.2 * len(bars)), 5))
        width = 0.8 / len(systems)
        for i, system in enumerate(systems):
            xs = [k + i * width for k in range(len(bars))]
            ax.bar(xs, [per.get(system, 0.0) for per in bars.values()], width, label=system)
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(bars))], list(bars), rotation=30, ha="right")
        ax.set_ylabel("messages per second (acked / consumed)")
        ax.set_title(f"Throughput per workload and mode\n{title}", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(_save(fig, out_dir / THROUGHPUT_PNG))

    latency = latency_series([*rows, *peers])
    if latency:
        fig, ax = plt.subplots(figsize=(9, max(3.0, 0.35 * len(latency) + 1.5)))
        ys = range(len(latency))
        ax.barh([y + 0.2 for y in ys], [p99 for _, _, p99 in latency], 0.4, label="p99")
        ax.barh([y - 0.2 for y in ys], [p50 for _, p50, _ in latency], 0.4, label="p50")
        ax.set_yticks(list(ys), [label for label, _, _ in latency], fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel("milliseconds (log scale): ack latency for W1, end to end and pub-ack for W2")
        ax.set_title(f"Latency percentiles\n{title}", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(_save(fig, out_dir / LATENCY_PNG))

    curve = topic_series(rows)
    if curve["topics"]:
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
        top.plot(curve["topics"], curve["msg/s"], marker="o")
        top.set_ylabel("acked msg/s")
        top.set_ylim(bottom=0)
        for name in ("gw µs", "node µs", "client µs"):
            bottom.plot(curve["topics"], curve[name], marker="o", label=name.replace(" µs", ""))
        bottom.set_ylabel("CPU µs per acked message")
        bottom.set_ylim(bottom=0)
        bottom.set_xscale("log")
        bottom.set_xlabel("topics the same load is spread over (100 B, one message per frame)")
        bottom.legend(fontsize=8)
        top.set_title(f"The topic curve\n{title}", fontsize=9)
        fig.tight_layout()
        written.append(_save(fig, out_dir / TOPICS_PNG))
    return written


def _save(fig: object, path: Path) -> Path:
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    assert isinstance(fig, Figure)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
