"""The package's shape: no import cycle in anypair/ (every import counts, those inside functions
too: a cycle deferred into a function is still a cycle), backends/ never reaching up into
generation/, every engine the registry declares loadable from its own module under backends/, and
generation/ and serving/ talking to the engines through declared members only (no capability probing)."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "anypair"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """anypair's modules -> the anypair modules each imports, read from the source (nothing runs)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for successor in graph.get(node, ()):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(graph):
        if node not in index:
            visit(node)
    return found


def subpackage_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The same edges between anypair's subpackages (anypair.backends, anypair.generation, ...)."""
    def top(name: str) -> str:
        return ".".join(name.split(".")[:2])

    packages: dict[str, set[str]] = {}
    for name, targets in graph.items():
        packages.setdefault(top(name), set()).update(top(t) for t in targets if top(t) != top(name))
    return packages


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules_or_subpackages():
    graph = import_graph()
    assert "anypair.generation.members" in graph["anypair.generation.generator"]  # the graph sees lazy imports
    assert cycles(graph) == []
    assert cycles(subpackage_graph(graph)) == []


def test_backends_never_import_generation():
    graph = import_graph()
    reaching_up = {name: sorted(t for t in targets if t.startswith("anypair.generation"))
                   for name, targets in graph.items() if name.startswith("anypair.backends")}
    assert {name: up for name, up in reaching_up.items() if up} == {}


def test_every_declared_engine_loads_from_its_own_module_under_backends():
    from anypair.backends.engines import BUILT_IN_ENGINES

    for engine in BUILT_IN_ENGINES:
        module, function = engine.loader.split(":")
        assert module.startswith("anypair.backends."), engine
        assert callable(getattr(importlib.import_module(module), function)), engine


def test_generation_and_serving_never_probe_what_an_object_can_do():
    """The engines' slot interface is declared on ModelBackend: the scheduler, the generator and the
    worker call it, never ask with hasattr/getattr whether an engine has it."""
    probes = []
    for folder in ("generation", "serving"):
        for path in (PACKAGE / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr"):
                    probes.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.func.id}")
    assert probes == []
