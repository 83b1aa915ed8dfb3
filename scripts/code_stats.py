"""The numbers of docs/architecture.md, measured from the source (nothing is imported or run):
files and lines per package of ``attnscope/``, functions over 60 and 80 lines, functions over 8
parameters, ``isinstance`` checks, the import edges between packages, each package's import depth
(the levels of its modules' imports of one another: a module importing none of its package's
modules is level 1, one importing a level-3 module at least level 4) and the file circles (modules
that import one another round a loop, inside a package or across packages; lazy and
``TYPE_CHECKING`` imports count, as in tests/test_layers.py).

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
    depth: int = 0  # import levels among the unit's own modules


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


def module_of(path: Path, app: Path) -> str:
    """``attnscope/engine/batching.py`` -> ``attnscope.engine.batching``; an ``__init__`` is its package."""
    parts = list(path.relative_to(app.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def file_graph(app: Path) -> dict[str, set[str]]:
    """module -> the modules of attnscope it imports (``from attnscope.nn import layers``: the
    module ``attnscope.nn.layers``; a name that is no module: its package; never a module's own
    package, which Python runs first but which is no dependency)."""
    modules = {module_of(path, app): path for path in app.rglob("*.py") if "__pycache__" not in path.parts}
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name.startswith("attnscope") and name != module and not module.startswith(f"{name}."):
                    graph[module].add(name)
    return graph


def components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of modules (Tarjan), each sorted, in an order where a group
    comes after every group it imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of more than one module that import one another round a loop."""
    return sorted(group for group in components(graph) if len(group) > 1)


def depth(graph: dict[str, set[str]], members: set[str]) -> int:
    """Import levels among ``members``: the longest chain of imports between them, a circle
    counted as one level."""
    inner = {m: {w for w in graph[m] if w in members} for m in members}
    level: dict[str, int] = {}
    for group in components(inner):  # imported groups first
        below = [level[w] for m in group for w in inner[m] if w not in group]
        for m in group:
            level[m] = 1 + max(below, default=0)
    return max(level.values(), default=0)


def unit_modules(graph: dict[str, set[str]], app: Path) -> dict[str, set[str]]:
    units: dict[str, set[str]] = defaultdict(set)
    for module in graph:
        parts = module.split(".")
        units[parts[1] if len(parts) > 2 or (len(parts) == 2 and (app / parts[1]).is_dir()) else "(top)"].add(module)
    return units


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--list", action="store_true", help="name every function over 60 lines or 8 parameters")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure (default: this one)")
    args = parser.parse_args(argv)
    units = measure(args.root.resolve())
    app = args.root.resolve() / "attnscope"
    graph = file_graph(app)
    for name, members in unit_modules(graph, app).items():
        if name != "(top)" and name in units:
            units[name].depth = depth(graph, members)
    loops = circles(graph)
    if args.json:
        out: dict[str, object] = {name: {**asdict(u), "imports": sorted(u.imports)} for name, u in units.items()}
        out["file_circles"] = loops
        json.dump(out, sys.stdout, indent=1)
        emit("")
        return 0
    header = (f"{'package':<11} {'files':>5} {'lines':>6} {'C++':>5} {'>60':>4} {'>80':>4} {'>8 params':>9} "
              f"{'isinstance':>10} {'depth':>5}  imports")
    emit(header)
    totals = Unit()
    for name, u in units.items():
        emit(f"{name:<11} {u.files:>5} {u.lines:>6} {u.native_lines:>5} {len(u.over_60):>4} {len(u.over_80):>4} "
              f"{len(u.over_8_params):>9} {u.isinstance_checks:>10} {u.depth or '':>5}  {', '.join(sorted(u.imports))}")
        totals.files += u.files
        totals.lines += u.lines
        totals.native_lines += u.native_lines
        totals.over_60 += u.over_60
        totals.over_80 += u.over_80
        totals.over_8_params += u.over_8_params
        totals.isinstance_checks += u.isinstance_checks
    emit(f"{'attnscope':<11} {totals.files:>5} {totals.lines:>6} {totals.native_lines:>5} {len(totals.over_60):>4} "
          f"{len(totals.over_80):>4} {len(totals.over_8_params):>9} {totals.isinstance_checks:>10}")
    emit(f"\nfile circles: {len(loops)}")
    for loop in loops:
        emit(f"  {' <-> '.join(loop)}")
    if args.list:
        for title, rows in (("over 80 lines", totals.over_80), ("over 60 lines", totals.over_60),
                            ("over 8 parameters", totals.over_8_params)):
            emit(f"\n{title}:")
            for row in rows:
                emit(f"  {row}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
