"""The numbers of docs/architecture.md, measured from the source (nothing is imported or run):
files and lines per package of ``attnscope/``, functions over 60 and 80 lines, functions over 8
parameters, ``isinstance`` checks in ``attnscope/serving``, and the import edges between packages.

    python scripts/code_stats.py            # a table
    python scripts/code_stats.py --json     # the same numbers as JSON
    python scripts/code_stats.py --list     # also name every long or wide function
    python scripts/code_stats.py --root ../other-checkout
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # --root DIR measures another checkout (e.g. before a merge)


@dataclass
class Unit:
    """One package of attnscope/ (``nn``) or its top-level modules together (``(top)``)."""

    files: int = 0
    lines: int = 0
    native_lines: int = 0  # C++ sources
    over_60: list[str] = field(default_factory=list)
    over_80: list[str] = field(default_factory=list)
    over_8_params: list[str] = field(default_factory=list)
    isinstance_checks: int = 0
    imports: set[str] = field(default_factory=set)


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")


def unit_of(path: Path, app: Path) -> str:
    rel = path.relative_to(app)
    return rel.parts[0] if len(rel.parts) > 1 else "(top)"


def imported_unit(name: str, app: Path) -> str | None:
    parts = name.split(".")
    if parts[0] != "attnscope" or len(parts) < 2:
        return None
    return parts[1] if (app / parts[1]).is_dir() else "(top)"


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Parameters a caller can pass, ``self``/``cls`` not counted."""
    args = node.args
    named = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    count = len(named) + (args.vararg is not None) + (args.kwarg is not None)
    return count - (1 if named and named[0].arg in ("self", "cls") else 0)


def measure_file(path: Path, root: Path, unit: Unit, name: str) -> None:
    text = path.read_text(encoding="utf-8")
    unit.files += 1
    unit.lines += text.count("\n")
    tree = ast.parse(text)
    rel, app = path.relative_to(root), root / "attnscope"
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            where = f"{rel}:{node.lineno} {node.name} ({length} lines, {parameters(node)} params)"
            if length > 60:
                unit.over_60.append(where)
            if length > 80:
                unit.over_80.append(where)
            if parameters(node) > 8:
                unit.over_8_params.append(where)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            unit.isinstance_checks += 1
        elif isinstance(node, ast.Import):
            unit.imports.update(u for a in node.names if (u := imported_unit(a.name, app)) and u != name)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if node.module != "attnscope" else [f"attnscope.{a.name}" for a in node.names]
            unit.imports.update(u for n in names if (u := imported_unit(n, app)) and u != name)


def measure(root: Path = ROOT) -> dict[str, Unit]:
    """Every unit of ``root/app``, by name."""
    units: dict[str, Unit] = defaultdict(Unit)
    app = root / "attnscope"
    for path in sorted(app.rglob("*")):
        if "__pycache__" in path.parts or path.is_dir():
            continue
        name = unit_of(path, app)
        if path.suffix == ".py":
            measure_file(path, root, units[name], name)
        elif path.suffix in (".cpp", ".h"):
            units[name].native_lines += path.read_text(encoding="utf-8").count("\n")
    return dict(sorted(units.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--list", action="store_true", help="name every function over 60 lines or 8 parameters")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure (default: this one)")
    args = parser.parse_args(argv)
    units = measure(args.root.resolve())
    if args.json:
        out = {name: {**asdict(u), "imports": sorted(u.imports)} for name, u in units.items()}
        json.dump(out, sys.stdout, indent=1)
        emit("")
        return 0
    header = f"{'package':<11} {'files':>5} {'lines':>6} {'C++':>5} {'>60':>4} {'>80':>4} {'>8 params':>9} {'isinstance':>10}  imports"
    emit(header)
    totals = Unit()
    for name, u in units.items():
        emit(f"{name:<11} {u.files:>5} {u.lines:>6} {u.native_lines:>5} {len(u.over_60):>4} {len(u.over_80):>4} "
              f"{len(u.over_8_params):>9} {u.isinstance_checks:>10}  {', '.join(sorted(u.imports))}")
        totals.files += u.files
        totals.lines += u.lines
        totals.native_lines += u.native_lines
        totals.over_60 += u.over_60
        totals.over_80 += u.over_80
        totals.over_8_params += u.over_8_params
        totals.isinstance_checks += u.isinstance_checks
    emit(f"{'app':<11} {totals.files:>5} {totals.lines:>6} {totals.native_lines:>5} {len(totals.over_60):>4} "
          f"{len(totals.over_80):>4} {len(totals.over_8_params):>9} {totals.isinstance_checks:>10}")
    if args.list:
        for title, rows in (("over 80 lines", totals.over_80), ("over 60 lines", totals.over_60),
                            ("over 8 parameters", totals.over_8_params)):
            emit(f"\n{title}:")
            for row in rows:
                emit(f"  {row}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
