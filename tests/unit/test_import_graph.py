"""The import graph of our packages has no cycles (docs/architecture.md §2).

grimp builds the graph of every module in the packages ``[tool.importlinter]``
names in pyproject.toml, with the imports under ``if TYPE_CHECKING:`` and inside
functions included: a cycle that only the type checker or a late import sees
is still two modules that cannot be understood one without the other. The
layer contracts themselves are import-linter's (``make lint``).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]


def our_packages() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(config["tool"]["importlinter"]["root_packages"])


def import_cycles(*packages: str) -> list[list[str]]:
    """Every set of modules that import each other in a circle (the strongly connected
    components of more than one module, or a module importing itself), sorted."""
    graph = grimp.build_graph(*packages, include_external_packages=False, cache_dir=None)
    edges = {module: sorted(graph.find_modules_directly_imported_by(module)) for module in graph.modules}
    cycles = [sorted(c) for c in strongly_connected(edges) if len(c) > 1 or c[0] in edges[c[0]]]
    return sorted(cycles)


def strongly_connected(edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph is deeper than Python's recursion limit allows)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(edges.get(target, []))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components


def test_our_packages_have_no_import_cycles() -> None:
    cycles = import_cycles(*our_packages())
    assert cycles == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def write_package(root: Path, name: str, modules: dict[str, str]) -> None:
    package = root / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    for module, source in modules.items():
        (package / f"{module}.py").write_text(source)


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n.startswith(("looped", "straight"))]:
        monkeypatch.delitem(sys.modules, name)
    return tmp_path


def test_the_check_finds_a_cycle_made_on_purpose(on_path: Path) -> None:
    # b -> c only under TYPE_CHECKING: the circle a -> b -> c -> a is found only if those count
    write_package(
        on_path,
        "looped",
        {
            "a": "from looped import b\n",
            "b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from looped.c import C\n",
            "c": "import looped.a\nclass C: ...\n",
            "d": "from looped import a\n",
        },
    )
    assert import_cycles("looped") == [["looped.a", "looped.b", "looped.c"]]


def test_the_check_passes_a_graph_without_cycles(on_path: Path) -> None:
    write_package(on_path, "straight", {"a": "from straight import b\n", "b": "import json\n"})
    assert import_cycles("straight") == []
