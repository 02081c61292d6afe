"""No module of the engine (`deltalog/`) or the adapter (`dbt/adapters/deltalog/`) over 800 lines, and no
function over 150 lines (from its `def` to its last line) unless its docstring or its first comment says
why, in a line containing `Long because` (CONTRIBUTING.md). A module or function that grows past these is
split; the allow-lists name the exceptions, each with its reason, and an entry that no longer offends fails
too, so the lists only shrink."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("deltalog", "dbt/adapters/deltalog")
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 150
MARKER = "long because"

# path -> why it may be longer
MODULES_ALLOWED: dict[str, str] = {}
# "path::function" -> why it may be longer
FUNCTIONS_ALLOWED: dict[str, str] = {}


def _sources() -> dict[str, str]:
    return {path.relative_to(ROOT).as_posix(): path.read_text()
            for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def _says_why(function: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> bool:
    """Whether the docstring or the comments before the first statement hold the marker."""
    statements = function.body[1:] if ast.get_docstring(function) is not None else function.body
    end = statements[0].lineno - 1 if statements else function.end_lineno
    return any(MARKER in line.lower() for line in lines[function.lineno - 1:end])


def long_modules(sources: dict[str, str]) -> dict[str, int]:
    return {path: n for path, text in sources.items() if (n := len(text.splitlines())) > MAX_MODULE_LINES}


def long_functions(sources: dict[str, str]) -> dict[str, int]:
    """"path::function" -> lines, for every function too long that does not say why."""
    out = {}
    for path, text in sources.items():
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text, path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES and not _says_why(node, lines):
                    out[f"{path}::{node.name}"] = n
    return out


def test_the_checks_find_long_code():
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES))
    assert long_functions({"m.py": f"def f():\n{body}\n"}) == {"m.py::f": MAX_FUNCTION_LINES + 1}
    assert long_functions({"m.py": f"def f():\n    '''Long because: reasons.'''\n{body}\n"}) == {}
    assert long_functions({"m.py": f"def f():\n    # long because: reasons\n{body}\n"}) == {}
    assert long_functions({"m.py": f"def f():\n{body}\n    # long because: too late\n"}) == {"m.py::f": 151}
    assert long_modules({"m.py": "x = 1\n" * (MAX_MODULE_LINES + 1), "n.py": "x = 1\n"}) == {"m.py": 801}


def test_no_module_too_long():
    found = long_modules(_sources())
    assert set(found) - set(MODULES_ALLOWED) == set(), f"over {MAX_MODULE_LINES} lines: split them ({found})"
    assert set(MODULES_ALLOWED) - set(found) == set(), "allowed but no longer too long: remove from MODULES_ALLOWED"


def test_no_function_too_long_without_saying_why():
    found = long_functions(_sources())
    assert set(found) - set(FUNCTIONS_ALLOWED) == set(), (
        f"over {MAX_FUNCTION_LINES} lines: split them, or say why in a '{MARKER}' line of the docstring ({found})")
    assert set(FUNCTIONS_ALLOWED) - set(found) == set(), \
        "allowed but no longer too long: remove from FUNCTIONS_ALLOWED"
