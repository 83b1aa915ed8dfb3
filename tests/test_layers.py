"""The package's layers import downward only, and no module imports itself round a circle
(docs/architecture.md).

Imports are read from the source with ``ast`` (nothing is imported), the ones inside functions
and under ``TYPE_CHECKING`` included: a lazy import is still a dependency. A unit is a
subpackage of ``attnscope`` (``attnscope.nn``) or a top-level module (``attnscope.translator``);
the file graph has one node per module (``attnscope.engine.batching``, a package's
``__init__`` as the package)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "attnscope"
WEB = {"serving", "cli"}  # the web layer and the command line: the top, nothing imports them
# The layers below the web; none of them may import serving (or the command line) at all.
BELOW_WEB = {"nn", "decoding", "text", "training", "alignment", "vision", "explain", "analysis", "hf",
             "repository", "translator", "config", "device", "allocator", "anatomy", "attribution",
             "score_table", "testing", "engine", "extras", "executor",
             "staging", "weights_header", "seal", "inside", "llm"}
# The Python API (attnscope.load, attnscope.Client) is a door onto the service like the routes and
# the command line (issue 44); its notebook views draw with the pages' files and import no layer.
WEB |= {"api"}
BELOW_WEB |= {"widget"}


def _unit(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "attnscope" and len(parts) > 1 else None


def import_graph() -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> the files (relative to attnscope/) that import it."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(APP.rglob("*.py")):
        rel = path.relative_to(APP)
        unit = rel.parts[0].removesuffix(".py")
        if unit == "__init__":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
                names = names[:1] if node.module != "attnscope" else names[1:]
            else:
                continue
            for name in names:
                target = _unit(name)
                if target and target != unit:
                    graph[unit][target].append(str(rel))
    return graph


def find_cycle(graph: dict[str, dict[str, list[str]]]) -> list[str]:
    """One cycle of units (first unit repeated at the end), or [] when the graph has none."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(unit: str) -> list[str]:
        state[unit] = 1
        path.append(unit)
        for target in sorted(graph.get(unit, {})):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[unit] = 2
        return []

    for unit in sorted(graph):
        if unit not in state and (cycle := visit(unit)):
            return cycle
    return []


def module_of(path: Path) -> str:
    """``attnscope/engine/batching.py`` -> ``attnscope.engine.batching``; an ``__init__`` is its package."""
    parts = list(path.relative_to(APP.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def file_graph() -> dict[str, dict[str, list[str]]]:
    """module -> imported module -> [the importing module]: ``from attnscope.nn import layers``
    imports the module ``attnscope.nn.layers``, ``from attnscope.nn.config import X`` the module
    ``attnscope.nn.config`` (a name that is no module: its package). A package is not counted as
    imported by its own modules (Python runs its ``__init__`` first, but that is no dependency)."""
    modules = {module_of(path): path for path in APP.rglob("*.py")}
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for module, path in sorted(modules.items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name.startswith("attnscope") and name != module and not module.startswith(f"{name}."):
                    graph[module][name].append(module)
    return graph


def test_the_graph_is_read() -> None:
    graph = import_graph()
    assert "nn" in graph["decoding"]
    assert "serving" in graph["cli"]
    assert "vision" in graph["serving"]


def test_no_cycle_between_app_packages() -> None:
    graph = import_graph()
    cycle = find_cycle(graph)
    ties = [f"{a} -> {b}: {sorted(set(graph[a][b]))}" for a, b in zip(cycle, cycle[1:], strict=False)]
    assert not cycle, "import cycle between app's packages:\n" + "\n".join(ties)


def test_the_file_graph_is_read() -> None:
    graph = file_graph()
    assert "attnscope.engine.batching" in graph["attnscope.engine.service"]  # from attnscope.engine.batching import ...
    assert "attnscope.engine.limits" in graph["attnscope.engine.service"]  # from attnscope.engine import limits
    assert "attnscope.explain" in graph["attnscope.engine.explanations"]  # a name defined in a package's __init__


def test_no_cycle_between_modules() -> None:
    """No file circle anywhere in attnscope/, inside a package included (a circle of two
    modules is two that cannot be read, tested or moved apart)."""
    graph = file_graph()
    cycle = find_cycle(graph)
    assert not cycle, "import cycle between modules: " + " -> ".join(cycle)


def test_find_cycle_finds_one() -> None:
    graph = {"a": {"b": ["a.py"]}, "b": {"c": ["b.py"]}, "c": {"a": ["c.py"]}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": ["a.py"]}, "b": {}}) == []


def test_nothing_below_the_web_imports_it() -> None:
    graph = import_graph()
    upward = {
        f"{unit} -> {target}": sorted(set(files))
        for unit in BELOW_WEB
        for target, files in graph.get(unit, {}).items()
        if target in WEB
    }
    assert not upward, f"imports that point up into the web layer: {upward}"


def test_every_unit_has_a_layer() -> None:
    """A new package must be placed: below the web (and listed in BELOW_WEB) or in it."""
    units = {p.name.removesuffix(".py") for p in APP.iterdir()
             if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.name != "__init__.py")}
    assert units - WEB - BELOW_WEB == set()
