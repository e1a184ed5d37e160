"""The pure cores import nothing I/O-shaped (docs/architecture.md §11): no asyncio, os,
socket, threading, time, etcd client or web framework. A core that needs time
takes ``now_ms``; one that needs I/O returns an effect for its shell.

A module declares itself pure with one exact tag: the first paragraph of its
docstring (the summary) ends with ``(pure).``. The test finds every such module in
our packages, so a new pure module is checked without being listed here; the
word "pure" in a summary other than as that tag is refused, so the tag stays one.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TAG = re.compile(r"\(pure\)\.\s*$")
FORBIDDEN = {
    "asyncio",
    "os",
    "socket",
    "threading",
    "time",
    "subprocess",
    "aetcd",
    "grpc",
    "fastapi",
    "uvloop",
}


def package_dirs(root: Path) -> list[Path]:
    """Our top-level packages (pyproject's ``[tool.importlinter]`` list), wherever they live."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    names = config["tool"]["importlinter"]["root_packages"]
    places = [root, *(root / p for p in config["tool"]["setuptools"]["packages"]["find"]["where"])]
    return sorted({place / name for name in names for place in places if (place / name).is_dir()})


def summary(path: Path) -> str:
    """The first paragraph of a module's docstring ("" without one)."""
    doc = ast.get_docstring(ast.parse(path.read_text(), str(path)), clean=False) or ""
    return doc.split("\n\n")[0]


def modules(root: Path) -> list[Path]:
    return sorted(p for d in package_dirs(root) for p in d.rglob("*.py"))


def pure_modules(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in modules(root) if TAG.search(summary(p))]


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


PURE = pure_modules(ROOT)


@pytest.mark.parametrize("module", PURE)
def test_pure_core_imports_no_io(module: str) -> None:
    assert imported_roots(ROOT / module) & FORBIDDEN == set()


def test_the_pure_cores_are_found() -> None:
    # the packages are all searched (spark/ included) and today's cores are all there
    assert {"storage/wire.py", "coordination/lease.py", "spark/folio_analytics/grid.py"} <= set(PURE)
    assert len(PURE) > 50  # 96 when this was written


def test_a_summary_says_pure_only_with_the_tag() -> None:
    loose = [
        str(p.relative_to(ROOT))
        for p in modules(ROOT)
        if re.search(r"\bpure\b", summary(p), re.IGNORECASE) and not TAG.search(summary(p))
    ]
    assert loose == [], "declare a pure module by ending its docstring's first paragraph with '(pure).'"


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    shell = tmp_path / "shell.py"
    shell.write_text("import asyncio\nfrom os import path\n")
    assert imported_roots(shell) & FORBIDDEN == {"asyncio", "os"}


def test_a_new_tagged_module_is_found(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.importlinter]\nroot_packages = ["pkg"]\n[tool.setuptools.packages.find]\nwhere = ["."]\n'
    )
    (tmp_path / "pkg").mkdir()
    core = '"""Rules of a thing,\nsaid on two lines (pure).\n\nOwns: x."""\n'
    (tmp_path / "pkg" / "core.py").write_text(core)
    (tmp_path / "pkg" / "shell.py").write_text('"""The shell of the pure core.\n\nOwns: y."""\n')
    assert pure_modules(tmp_path) == ["pkg/core.py"]
