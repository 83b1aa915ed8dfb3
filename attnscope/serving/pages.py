"""HTML pages: Translate (``/``), Compare (``/compare``), Models (``/models``) and Plotly.js.

The pages are Jinja2 templates; our JS and CSS live in ``static/``. Data reaches a page only
through ``|tojson`` or a JSON fetch of the API, and the JS inserts user text as text, never HTML.
Plotly.js is served from the installed ``plotly`` package, so the page needs nothing but this
server.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import plotly
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from attnscope.analysis.summary import summary_path
from attnscope.config import shipped
from attnscope.engine.schemas import MAX_BEAM
from attnscope.engine.service import ModelService
from attnscope.score_table import score_rows
from attnscope.serving import llm_common

logger = logging.getLogger(__name__)

TEMPLATES_DIR = shipped("templates")  # the checkout's, or the installed wheel's copy
STATIC_DIR = shipped("static")
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
PLOTLY_URL = f"/vendor/plotly.min.js?v={plotly.__version__}"

# One click away on the Translate and Compare pages, by source language.
EXAMPLES: dict[str, list[str]] = {
    "en": [
        "A man is riding a bicycle.",
        "Two dogs play in the snow.",
        "A little girl climbs a tree in the park.",
        "The man in the red shirt is cooking dinner for his family.",
        "A group of people stand outside a building, waiting for the bus.",
    ],
    "de": [
        "Ein Mann fährt Fahrrad.",
        "Zwei Hunde spielen im Schnee.",
        "Ein kleines Mädchen klettert auf einen Baum.",
        "Der Mann im roten Hemd kocht das Abendessen.",
    ],
    "fr": [
        "Un homme fait du vélo.",
        "Deux chiens jouent dans la neige.",
        "Une petite fille grimpe à un arbre.",
    ],
}


def _asset_version() -> str:
    """Changes whenever a file under ``static/`` changes, so browsers refetch our JS and CSS."""
    stamps = [int(p.stat().st_mtime) for p in STATIC_DIR.rglob("*") if p.is_file()]
    return format(max(stamps, default=0), "x")


templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
# max_beam: the inputs' max, which the pages' JS reads back; the limit is written once, in schemas.
templates.env.globals.update(plotly_url=PLOTLY_URL, asset_version=_asset_version(), max_beam=MAX_BEAM)

router = APIRouter(include_in_schema=False, tags=["pages"])


def _page(request: Request, name: str, **context: Any) -> HTMLResponse:
    context = {"examples": EXAMPLES, **context}
    if "cards" not in context:
        context["cards"] = model_cards(request)
    return templates.TemplateResponse(request, name, context)


@router.get("/", response_class=HTMLResponse)
def translate_page(request: Request) -> HTMLResponse:
    return _page(request, "translate.html", page="translate")


@router.get("/compare", response_class=HTMLResponse)
def compare_page(request: Request) -> HTMLResponse:
    return _page(request, "compare.html", page="compare")


@router.get("/models", response_class=HTMLResponse)
def models_page(request: Request) -> HTMLResponse:
    cards = model_cards(request)
    return _page(request, "models.html", page="models", cards=cards, score_rows=score_rows(cards))


@router.get("/testsets", response_class=HTMLResponse)
def testsets_page(request: Request) -> HTMLResponse:
    return _page(request, "testsets.html", page="testsets")


@router.get("/learn", response_class=HTMLResponse)
def learn_page(request: Request) -> HTMLResponse:
    """A guided tour of attention in eight stops, each drawn by the loaded models."""
    return _page(request, "learn.html", page="learn")


def model_cards(request: Request) -> list[dict[str, Any]]:
    """Every model's full ``card.json`` (curves, BLEU per test set...), from the registry: the
    served models with the facts the page needs even when a card is partial, and the folders
    that failed to load with an ``error`` naming the reason."""
    service: ModelService = request.app.state.service
    cards = service.registry.page_cards()
    for card in cards:  # whether GET /api/models/{id}/analysis has one: the pages ask only then
        folder = service.registry.folders.get(card["id"], service.settings.models_dir / card["id"])
        card["has_analysis"] = summary_path(folder, service.settings.analysis_dir).is_file()
    return cards + llm_common.page_cards(getattr(request.app.state, "llm", None), service.settings.analysis_dir)
