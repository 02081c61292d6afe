"""Every import of a package that is loaded on first use (pyspark, sqlglot, duckdb, obstore, the metastore
client...) runs after `deltalog.lazy_imports.load` has imported that package whole, so two threads
reaching it first at once cannot meet inside it (issue 53: "partially initialized module 'pyspark.sql'").

Checked on the source, in the engine and the adapter: an import of such a package follows a
`load(<its group>)` call in its function or at its module's top (or, in a function, an import from
`deltalog.spark`, whose modules load the "spark" group at their top). A package's `__init__` is not
enough: Python runs a submodule without waiting for a package another thread is still importing."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from deltalog.lazy_imports import GATED, GROUPS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("deltalog", "dbt/adapters/deltalog")


def _imported_names(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return []


def _type_checking_only(tree: ast.Module) -> set:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def _loads_before(scope: ast.AST, line: int) -> set[str]:
    """The groups `scope` (a function, or a module's top statements) has loaded by `line`:
    load("group") calls, and in a function "spark" once it imported from deltalog.spark."""
    groups = set()
    nodes = ast.walk(scope) if not isinstance(scope, ast.Module) else \
        (n for stmt in scope.body if not isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) for n in ast.walk(stmt))
    for node in nodes:
        if getattr(node, "lineno", line) >= line:
            continue
        if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "load":
            groups.update(a.value for a in node.args if isinstance(a, ast.Constant))
        if not isinstance(scope, ast.Module) and any(
                n.startswith("deltalog.spark.") for n in _imported_names(node)):
            groups.add("spark")
    return groups


def ungated_imports() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "deltalog/lazy_imports.py":
                continue
            tree = ast.parse(path.read_text(), rel)
            skipped = _type_checking_only(tree)
            functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            for node in ast.walk(tree):
                if id(node) in skipped:
                    continue
                for name in _imported_names(node):
                    group = _group_of(name)
                    if group is None:
                        continue
                    enclosing = [f for f in functions
                                 if f.lineno <= node.lineno <= f.end_lineno]
                    module_loads = _loads_before(tree, node.lineno if not enclosing else 10**9)
                    if enclosing:
                        outermost = min(enclosing, key=lambda f: f.lineno)
                        loaded = module_loads | _loads_before(outermost, node.lineno)
                    else:
                        loaded = module_loads
                    if group not in loaded:
                        found.append(f"{rel}:{node.lineno}: `{name}` imported without load({group!r}) first")
    return found


def _group_of(name: str):
    if name == "pyarrow.pandas_compat":
        return "pandas"
    if name.startswith("pyspark.ml"):
        return "spark_ml"
    if name.startswith("pyspark.pandas"):
        return "pandas_on_spark"
    if name.startswith("pyspark.sql.connect"):
        return "spark_connect"
    return GATED.get(name.split(".")[0])


def test_every_lazily_imported_package_is_loaded_through_the_gate_first():
    assert ungated_imports() == []


def test_a_module_named_by_an_import_is_in_its_group():
    """A submodule imported by name is listed in its group, so the gate imports it too (two threads
    entering one package by two submodules is the failure)."""
    missing = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                for name in _imported_names(node):
                    group = _group_of(name)
                    if group and name not in GROUPS[group]:
                        missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert missing == []


def test_importing_the_spark_package_loads_the_spark_group():
    code = ("import sys, deltalog.spark\n"
            "from deltalog.lazy_imports import GROUPS\n"
            "print([m for m in GROUPS['spark'] if m not in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
