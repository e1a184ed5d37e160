"""Every reference to the repository's docs resolves: the file exists, and a section
(``docs/architecture.md §4``, ``§6.2-6.5``) or an ADR number (``ADR 0006``,
``docs/decisions/0005``) it names exists too; every relative Markdown link of the
README and of docs/ (``[guide](docs/guide.md)``, ``[x](publishing.md#2-http-consumers)``)
leads to a file or folder that exists, and to a heading of that page when it names one.

Searched: every Python file (docstrings and comments are where modules cite the
rules they follow), docs/ and README.md, pyproject.toml and the Makefile. A
section is a numbered heading (``## 4. Topics``, ``### 4.4 Shared``); a bare
``name.md §N`` must name a page in docs/ (or the README). References to pages
outside the repository are refused: they do not resolve here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {"node_modules", "examples", "__pycache__"}  # examples: Pulsar's clients, kept as published

SECTION = r"§\s?(?P<sec>\d+(?:\.\d+)*)(?:\s*[-\u2013/]\s*(?P<sec2>\d+(?:\.\d+)*))?"
# docs/<path>, then optionally a section; the closing backtick of `docs/x.md` may come between
DOCS_REF = re.compile(r"(?<![\w/.:-])docs/(?P<path>[\w./-]*[\w/])(?:`?\s*" + SECTION + ")?")
BARE_PAGE_REF = re.compile(r"(?<![\w/.:-])(?P<page>[\w-]+\.md)`?\s*" + SECTION)
ADR_REF = re.compile(r"\bADRs? (?P<number>\d{4})\b")
HEADING = re.compile(r"^#+\s+(?P<number>\d+(?:\.\d+)*)\.?\s", re.MULTILINE)


def searched_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if not any(p.startswith(".") or p in SKIP_DIRS for p in parts) and path != Path(__file__).resolve():
            yield path  # (this file's examples are made up on purpose)
    yield from sorted((root / "docs").rglob("*.md"))
    for name in ("README.md", "pyproject.toml", "Makefile"):
        if (root / name).exists():
            yield root / name


def sections(page: Path) -> set[str]:
    return {m["number"] for m in HEADING.finditer(page.read_text())}


def adr(root: Path, number: str) -> Path | None:
    found = sorted((root / "docs" / "decisions").glob(f"{number}-*.md"))
    return found[0] if found else None


def broken_in(root: Path, text: str) -> list[str]:
    """What ``text`` cites that does not resolve in the repository at ``root``."""
    broken: list[str] = []

    def check_sections(page: Path, match: re.Match[str]) -> None:
        known = sections(page)
        for number in (match["sec"], match["sec2"]):
            if number is not None and number not in known:
                broken.append(f"{' '.join(match[0].split())}: {page.relative_to(root)} has no §{number}")

    for match in DOCS_REF.finditer(text):
        path = root / "docs" / match["path"]
        decision = re.fullmatch(r"decisions/(\d{4})", match["path"].rstrip("/"))
        if decision:
            page = adr(root, decision[1])
            if page is None:
                broken.append(f"{match[0]}: no ADR {decision[1]}")
        elif not path.exists():
            broken.append(f"{match[0]}: no such file")
            continue
        else:
            page = path
        if page is not None and match["sec"] is not None:
            check_sections(page, match)
    for match in BARE_PAGE_REF.finditer(text):
        candidates = [root / "docs" / match["page"], root / match["page"]]
        page = next((p for p in candidates if p.is_file()), None)
        if page is None:
            broken.append(f"{' '.join(match[0].split())}: no {match['page']} in docs/ or the repository root")
        else:
            check_sections(page, match)
    for match in ADR_REF.finditer(text):
        if adr(root, match["number"]) is None:
            broken.append(f"{match[0]}: no docs/decisions/{match['number']}-*.md")
    return broken


MD_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\((?P<target>[^)\s]+)\)")
MD_HEADING = re.compile(r"^#+\s+(?P<title>.+?)\s*$", re.MULTILINE)


def slug(title: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def broken_links(root: Path, page: Path) -> list[str]:
    """The relative Markdown links of ``page`` that lead nowhere in the repository at ``root``."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # links in code blocks are code
    broken: list[str] = []
    for match in MD_LINK.finditer(text):
        target = match["target"]
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # http:, https:, mailto: - outside the repository
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.exists() or root.resolve() not in (linked, *linked.parents):
            broken.append(f"{target}: no such file or folder in the repository")
            continue
        if anchor and linked.suffix == ".md":
            anchors = {slug(m["title"]) for m in MD_HEADING.finditer(linked.read_text())}
            if anchor not in anchors:
                broken.append(f"{target}: {linked.relative_to(root.resolve())} has no heading #{anchor}")
    return broken


def markdown_pages(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def test_every_markdown_link_resolves() -> None:
    broken = [
        f"{page.relative_to(ROOT)}: {problem}"
        for page in markdown_pages(ROOT)
        if page.exists()
        for problem in broken_links(ROOT, page)
    ]
    assert broken == [], "links that lead nowhere:\n" + "\n".join(broken)


def test_what_links_resolve(tree: Path) -> None:
    (tree / "README.md").write_text(
        "[g](docs/guide.md) [s](docs/guide.md#1-one) [d](docs/decisions/) [w](https://x.org/a.md)\n"
        "```\n[in code](nowhere.md)\n```\n![img](docs/guide.md) [gone](docs/gone.md) "
        "[bad](docs/guide.md#2-two) [out](../outside.md)\n"
    )
    (tree / "docs" / "other.md").write_text("[up](../README.md) [g](guide.md#12-two) [x](guide.md#nope)\n")
    assert broken_links(tree, tree / "README.md") == [
        "docs/gone.md: no such file or folder in the repository",
        "docs/guide.md#2-two: docs/guide.md has no heading #2-two",
        "../outside.md: no such file or folder in the repository",
    ]
    assert broken_links(tree, tree / "docs" / "other.md") == [
        "guide.md#nope: docs/guide.md has no heading #nope"
    ]


def test_every_docs_reference_resolves() -> None:
    broken = [
        f"{path.relative_to(ROOT)}: {problem}"
        for path in searched_files(ROOT)
        for problem in broken_in(ROOT, path.read_text())
    ]
    assert broken == [], "references that do not resolve:\n" + "\n".join(broken)


def test_every_decision_record_has_a_status() -> None:
    missing = [
        p.name
        for p in sorted((ROOT / "docs" / "decisions").glob("*.md"))
        if not re.search(r"^Status: \w", p.read_text(), re.MULTILINE)
    ]
    assert missing == [], "ADRs without a 'Status:' line"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "docs" / "decisions").mkdir(parents=True)
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\n## 1. One\n\n### 1.2 Two\n\n## 3. Three\n")
    (tmp_path / "docs" / "decisions" / "0004-entries.md").write_text("# 0004 - Entries\n")
    return tmp_path


def test_what_resolves(tree: Path) -> None:
    text = (
        "Rules (docs/guide.md §1.2, `docs/guide.md`\n§3, docs/guide.md §1-3, docs/decisions/0004,\n"
        "docs/decisions/0004-entries.md, ADR 0004, guide.md §1, docs/decisions/). "
        "Served at http://host/docs/oauth2-redirect."
    )
    assert broken_in(tree, text) == []


def test_what_does_not_resolve(tree: Path) -> None:
    text = (
        "docs/missing.md; docs/guide.md §2; docs/guide.md §1.2-1.3; docs/decisions/0009-x.md; "
        "docs/decisions/0005 §1; ADR 0007; elsewhere.md §1."
    )
    assert broken_in(tree, text) == [
        "docs/missing.md: no such file",
        "docs/guide.md §2: docs/guide.md has no §2",
        "docs/guide.md §1.2-1.3: docs/guide.md has no §1.3",
        "docs/decisions/0009-x.md: no such file",
        "docs/decisions/0005 §1: no ADR 0005",
        "elsewhere.md §1: no elsewhere.md in docs/ or the repository root",
        "ADR 0007: no docs/decisions/0007-*.md",
    ]
