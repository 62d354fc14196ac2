"""The import graph: no cycles between modules, and imports that point one way.

Every `import` statement of `ingest_gateway/` and `platform/loglake/` counts, wherever it is:
at the top, under `if TYPE_CHECKING:` (a type is a dependency too: it is what makes a module
unreadable without another) and inside functions (a deferred import is still an import).
`ingest_gateway`'s packages are layers (`ingest_gateway.LAYERS`, from the bottom); a module
imports modules of its own layer or of the layers below it, never above.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest_gateway import LAYERS

ROOT = Path(__file__).resolve().parents[2]
# Package roots: where each top-level package of ours lives in the checkout.
SOURCES = {"ingest_gateway": ROOT / "ingest_gateway", "loglake": ROOT / "platform" / "loglake"}
# What no module of loglake may import (the core library runs without a web server or Airflow).
LOGLAKE_FORBIDDEN = ("ingest_gateway", "harness", "jobs", "fastapi", "starlette", "uvicorn", "airflow")
# Above both: the Spark jobs import loglake (not the broker); the DAGs import nothing of ours
# (Airflow runs them in a virtualenv of its own).
ENTRY_POINTS_FORBIDDEN = {
    "jobs": ("ingest_gateway", "harness"),
    "airflow_dags": ("loglake", "ingest_gateway", "jobs", "harness"),
}
# Only loglake.spark may import these (delta: delta-spark's Python package, a pyspark extension).
SPARK_ONLY = ("pyspark", "delta")


def _module_files() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for top, directory in SOURCES.items():
        for path in directory.rglob("*.py"):
            parts = [top, *path.relative_to(directory).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


MODULES = _module_files()


def _imported_names(module: str, path: Path) -> Iterator[str]:
    """Every module name `module` imports, in full ("a.b.c"); `from a.b import c` yields a.b.c
    when c is a module of ours, else a.b."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                yield submodule if submodule in MODULES else source


def _ours(name: str) -> str | None:
    """The module of ours `name` is or lies in (a name imported from a package is its __init__)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


IMPORTS: dict[str, set[str]] = {module: set(_imported_names(module, path)) for module, path in MODULES.items()}
GRAPH: dict[str, set[str]] = {
    module: {target for name in names if (target := _ours(name)) is not None and target != module}
    for module, names in IMPORTS.items()
}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
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
                        components.append(sorted(component))
    return components


def _layer(module: str) -> int:
    """The index of an ingest_gateway module's layer; the package's own modules (__init__,
    __main__) sit above every layer."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else len(LAYERS)


def test_the_graph_is_read_whole() -> None:
    # The walk sees TYPE_CHECKING and function-local imports: the broker's own module
    # imports the layers, and the layers list names packages that exist.
    assert "ingest_gateway.apis.request_router" in GRAPH["ingest_gateway.server.broker"]
    assert all((SOURCES["ingest_gateway"] / layer / "__init__.py").is_file() for layer in LAYERS)
    packaged = {p.name for p in SOURCES["ingest_gateway"].iterdir() if (p / "__init__.py").is_file()}
    assert packaged == set(LAYERS), "every package of ingest_gateway is a layer"


def test_no_import_cycles() -> None:
    assert _cycles(GRAPH) == []


def test_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_ingest_gateway_imports_point_down() -> None:
    upward = [
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if module.startswith("ingest_gateway.")
        for target in targets
        if target.startswith("ingest_gateway.") and _layer(target) > _layer(module)
    ]
    assert upward == []


@pytest.mark.parametrize("forbidden", LOGLAKE_FORBIDDEN)
def test_loglake_does_not_import(forbidden: str) -> None:
    offenders = [
        module
        for module, names in IMPORTS.items()
        if module.startswith("loglake") and any(n == forbidden or n.startswith(forbidden + ".") for n in names)
    ]
    assert offenders == []


@pytest.mark.parametrize("folder", sorted(ENTRY_POINTS_FORBIDDEN))
def test_jobs_and_dags_import_only_what_they_may(folder: str) -> None:
    forbidden = ENTRY_POINTS_FORBIDDEN[folder]
    offenders = [
        f"{path.name}: {name}"
        for path in sorted((ROOT / folder).glob("*.py"))
        for name in _imported_names(f"{folder}.{path.stem}", path)
        if name.split(".")[0] in forbidden
    ]
    assert offenders == []


def test_only_loglake_spark_imports_pyspark() -> None:
    offenders = [
        module
        for module, names in IMPORTS.items()
        if not module.startswith("loglake.spark")
        and any(n.split(".")[0] in SPARK_ONLY for n in names)
    ]
    assert offenders == []
