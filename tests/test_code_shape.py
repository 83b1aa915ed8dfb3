"""Every function in ``attnscope/`` stays readable: at most 80 lines and 8 parameters (issue 29,
shared/STYLE.md). Read from the source with ``ast`` (nothing is imported); a method's ``self`` or
``cls`` is not counted, ``*args`` and ``**kwargs`` are one parameter each; nested functions and
methods count like any other."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "attnscope"
MAX_LINES = 80
MAX_PARAMETERS = 8


def functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(``path:line name``, node) of every function and method under attnscope/."""
    found = []
    for path in sorted(APP.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((f"attnscope/{path.relative_to(APP)}:{node.lineno} {node.name}", node))
    return found


def lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """From ``def`` to the last line of the body (decorators not counted)."""
    assert node.end_lineno is not None
    return node.end_lineno - node.lineno + 1


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    count = len(names) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
    return count - (1 if names and names[0] in ("self", "cls") else 0)


def test_the_checks_see_every_function() -> None:
    found = functions()
    assert len(found) > 500  # the whole package, not an empty glob
    sample = ast.parse("def f(self, a, /, b, *c, d, **e):\n    pass\n").body[0]
    assert isinstance(sample, ast.FunctionDef)
    assert parameters(sample) == 5 and lines(sample) == 2


def test_no_function_is_over_80_lines() -> None:
    long = [f"{where} ({lines(node)} lines)" for where, node in functions() if lines(node) > MAX_LINES]
    assert not long, f"split these (at most {MAX_LINES} lines): {long}"


def test_no_function_takes_over_8_parameters() -> None:
    wide = [f"{where} ({parameters(node)})" for where, node in functions() if parameters(node) > MAX_PARAMETERS]
    assert not wide, f"group these parameters (a dataclass, at most {MAX_PARAMETERS}): {wide}"
