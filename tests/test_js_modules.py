"""The browser code's boundaries, read from the source: one transport (only static/js/api.js
calls ``fetch``), no page module watching another's DOM (``MutationObserver``: panels register
with the explorer, static/js/explorer.js ``addPanel``), and no copy of the server's catalogs (the
explanation methods' labels come from GET /api/explain-methods)."""

from __future__ import annotations

import re
from pathlib import Path

JS = Path(__file__).resolve().parent.parent / "static" / "js"
MODULES = sorted(p for p in JS.glob("*.js") if p.name != "swagger-init.js")


def _code(path: Path) -> str:
    """The module without its comments (a comment may name fetch)."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"(^|[^:\"'`])//[^\n]*", r"\1", text)


def test_only_api_js_calls_fetch() -> None:
    callers = [p.name for p in MODULES if re.search(r"\bfetch\s*\(", _code(p))]
    assert callers == ["api.js"], f"modules other than api.js call fetch: {[c for c in callers if c != 'api.js']}"


def test_the_rule_sees_a_fetch_call(tmp_path: Path) -> None:
    """The check above is not vacuous: a module that calls fetch is caught, a comment is not."""
    caller = tmp_path / "x.js"
    caller.write_text('// fetch( in a comment\nconst r = await fetch("/api/ready");\n', encoding="utf-8")
    quiet = tmp_path / "y.js"
    quiet.write_text("// only a comment naming fetch(\n/* and fetch( here */\n", encoding="utf-8")
    assert re.search(r"\bfetch\s*\(", _code(caller)) and not re.search(r"\bfetch\s*\(", _code(quiet))


def test_no_module_watches_the_dom_of_another() -> None:
    watchers = [p.name for p in MODULES if "MutationObserver" in _code(p)]
    assert watchers == [], f"use Explorer.addPanel instead of a MutationObserver: {watchers}"


def test_no_module_copies_the_explanation_methods() -> None:
    """A table keyed by method names (``value_zeroing: "value zeroing"`` or ``rollout: {label: ...}``)
    in a page module is a copy of the registry's."""
    table = re.compile(r"\b(norm|rollout|value_zeroing|alti)\s*:\s*[\"'`{]")
    copies = [p.name for p in MODULES if table.search(_code(p))]
    assert copies == [], f"explanation-method text copied from the server into {copies}"
