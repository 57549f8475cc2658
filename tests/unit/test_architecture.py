"""The product's layout holds: no import cycle, each half imports only what it may, no class grows
into a hall everything passes through (docs/architecture.md).

Imports are read from the source (every ``import``, at module level or inside a function or an
``if TYPE_CHECKING:`` block: a lazy import is still a dependency), never by importing anything.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("async_query", "async_query_cli", "flint_repl_job", "query_core", "index_mappings")
#: The classes allowed more than :data:`MAX_METHODS` methods: a parser's tree builder has one
#: method per grammar rule, a translator one per node kind.
LARGE_BY_NATURE = {
    ("query_core/ppl/parser.py", "_Builder"),
    ("query_core/ppl/translate.py", "_Translator"),
    ("query_core/flint/parser.py", "_AstBuilder"),
}
MAX_METHODS = 25
#: Classes still to be split (each leaves this list when it is): none.
PENDING_SPLIT: set[tuple[str, str]] = set()
MAX_SERVICE_IMPORTS = 15


@cache
def modules() -> dict[str, Path]:
    """Every product module by its dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _module_of(name: str) -> str | None:
    """The product module an imported name lives in (None: not the product's)."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


def _imported(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


@cache
def graph() -> dict[str, frozenset[str]]:
    """Each product module's imports of product modules."""
    edges: dict[str, frozenset[str]] = {}
    for name, path in modules().items():
        targets = {_module_of(imported) for imported in _imported(path)}
        edges[name] = frozenset(t for t in targets if t is not None and t != name)
    return edges


def cycles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
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
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset()}) == [
        ["a", "b", "c"]
    ]
    assert cycles({"a": frozenset({"b"}), "b": frozenset()}) == []


def test_no_import_cycle() -> None:
    assert cycles(graph()) == []


def _imports_of(package: str) -> set[str]:
    return {target for name, targets in graph().items() if name.split(".")[0] == package for target in targets}


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        # The plugin and the job meet only in query_core (the plugin↔job contract is query_core/jobconf.py).
        ("async_query", ("flint_repl_job",)),
        ("flint_repl_job", ("async_query", "async_query_cli")),
        # The command-line client speaks HTTP only: it imports no module of the service or the job.
        ("async_query_cli", ("async_query", "flint_repl_job")),
        ("query_core", ("async_query", "async_query_cli", "flint_repl_job")),
    ],
)
def test_each_half_imports_only_what_it_may(package: str, forbidden: tuple[str, ...]) -> None:
    wrong = sorted(t for t in _imports_of(package) if t.split(".")[0] in forbidden)
    assert wrong == [], f"{package} imports {wrong}"


def test_the_service_stays_small() -> None:
    internal = graph()["async_query.service"]
    assert len(internal) <= MAX_SERVICE_IMPORTS, sorted(internal)


def test_no_class_has_more_than_25_methods() -> None:
    large = []
    for path in modules().values():
        relative = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and (relative, node.name) not in LARGE_BY_NATURE | PENDING_SPLIT:
                methods = sum(isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) for item in node.body)
                if methods > MAX_METHODS:
                    large.append(f"{relative}:{node.name} ({methods})")
    assert large == []
