"""No import circles in the engine (`deltalog/`) or the adapter (`dbt/adapters/deltalog/`), counting every
import a module names: at its top, inside a function, and under `if TYPE_CHECKING:`. A type import never
runs, but it still says the module needs the other one: a circle through it is a circle of concepts, and
the next runtime import along it fails at import time. Break one by taking the pieces (or a
`typing.Protocol` of them) instead of the type, or by moving the type down."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("deltalog", "dbt/adapters/deltalog")


def _modules() -> dict[str, Path]:
    mods = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = path
    return mods


def _imports(tree: ast.Module) -> list[ast.stmt]:
    """Every Import/ImportFrom in the module, wherever it stands."""
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def _imported(module: str, is_package: bool, node: ast.stmt, mods: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in mods}
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[:len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    # `from package import module` imports that module; `from module import name`, the module
    return {f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names} & set(mods)


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[name] = {dep for node in _imports(tree)
                       for dep in _imported(name, path.name == "__init__.py", node, mods) if dep != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_type_and_function_imports_count():
    tree = ast.parse("import json\nif TYPE_CHECKING:\n    from .b import B\ndef f():\n    from . import c\n")
    assert [ast.unparse(n) for n in _imports(tree)] == ["import json", "from .b import B", "from . import c"]


def test_no_module_imports_one_that_imports_it_back():
    graph = import_graph()
    assert "deltalog.snapshot" in graph and "dbt.adapters.deltalog.impl" in graph
    assert circles(graph) == []
