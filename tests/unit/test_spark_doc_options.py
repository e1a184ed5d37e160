"""docs/spark.md's option tables are the connector's option lists (pure): an option
added, renamed or given another default without the guide fails here. The tables
are rendered by ``render``; paste its output between the markers to update them."""

from __future__ import annotations

from pathlib import Path

from pyspark_folio.options import READ_OPTIONS, WRITE_OPTIONS

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "spark.md"


def render(options: dict[str, tuple[str, str]]) -> str:
    lines = ["| option | default | meaning |", "|---|---|---|"]
    lines += [f"| `{name}` | {default} | {meaning} |" for name, (default, meaning) in options.items()]
    return "\n".join(lines)


def _between(text: str, marker: str) -> str:
    begin, end = f"<!-- {marker} begin -->\n", f"\n<!-- {marker} end -->"
    assert begin in text and end in text, f"docs/spark.md lost its {marker} markers"
    return text[text.index(begin) + len(begin) : text.index(end)]


def test_the_guide_lists_every_read_option_as_the_code_does():
    assert _between(GUIDE.read_text(), "read options") == render(READ_OPTIONS)


def test_the_guide_lists_every_write_option_as_the_code_does():
    assert _between(GUIDE.read_text(), "write options") == render(WRITE_OPTIONS)
