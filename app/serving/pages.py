"""HTML pages: Translate (``/``), Compare (``/compare``), Models (``/models``) and Plotly.js.

The pages are Jinja2 templates; our JS and CSS live in ``static/``. Data reaches a page only
through ``|tojson`` or a JSON fetch of the API, and the JS inserts user text as text, never HTML.
Plotly.js is served from the installed ``plotly`` package, so the page needs nothing but this
server.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import plotly
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.templating import Jinja2Templates

from app.nn.config import score_of
from app.repository import CARD_FILE, LoadedModel, discover, read_config

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES_DIR = ROOT / "templates"
STATIC_DIR = ROOT / "static"
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
PLOTLY_URL = f"/vendor/plotly.min.js?v={plotly.__version__}"
DEFAULT_MODELS_DIR = ROOT / "models"

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
templates.env.globals.update(plotly_url=PLOTLY_URL, asset_version=_asset_version())

router = APIRouter(include_in_schema=False, tags=["pages"])


def _page(request: Request, name: str, **context: Any) -> HTMLResponse:
    context = {"examples": EXAMPLES, "cards": model_cards(request), **context}
    return templates.TemplateResponse(request, name, context)


@router.get("/", response_class=HTMLResponse)
def translate_page(request: Request) -> HTMLResponse:
    return _page(request, "translate.html", page="translate")


@router.get("/compare", response_class=HTMLResponse)
def compare_page(request: Request) -> HTMLResponse:
    return _page(request, "compare.html", page="compare")


@router.get("/models", response_class=HTMLResponse)
def models_page(request: Request) -> HTMLResponse:
    return _page(request, "models.html", page="models")


@router.get("/vendor/plotly.min.js")
def plotly_js() -> FileResponse:
    """Plotly.js from the installed Python package (URL carries its version: cache for a year)."""
    if not PLOTLY_JS.is_file():  # pragma: no cover - a broken plotly install
        raise HTTPException(
            status_code=404, detail="plotly.min.js is missing from the plotly package"
        )
    return FileResponse(
        PLOTLY_JS,
        media_type="text/javascript",
        headers={"Cache-Control": "public, max-age=31536000, immutable"},
    )


def model_cards(request: Request) -> list[dict[str, Any]]:
    """Every served model's full ``card.json`` (curves, BLEU per test set...), with the facts the
    page needs even when a card is partial: language pair, architecture, score, parameters.

    Comes from the loaded models when the app has its service, otherwise from the model folders."""
    service = getattr(request.app.state, "service", None)
    if service is not None:
        return [_card_of_loaded(service.get(model_id).loaded) for model_id in service.ids]
    settings = getattr(request.app.state, "settings", None)
    return cards_from_folders(Path(getattr(settings, "models_dir", None) or DEFAULT_MODELS_DIR))


def _card_of_loaded(loaded: LoadedModel) -> dict[str, Any]:
    config = loaded.config
    facts = {
        "architecture": config.architecture,
        "score": score_of(config),
        "parameters": loaded.model.num_parameters,
    }
    return {
        **facts,
        **loaded.card,
        "id": loaded.id,
        "source_lang": loaded.source_lang,
        "target_lang": loaded.target_lang,
    }


def cards_from_folders(models_dir: Path) -> list[dict[str, Any]]:
    """The cards of the model folders in ``models_dir``, read from disk (no weights loaded).

    A folder whose files cannot be read still appears, with an ``error`` field, so the page
    shows what is wrong instead of silently leaving the model out."""
    cards = []
    for folder in discover(models_dir):
        card: dict[str, Any] = {"id": folder.name}
        try:
            config, meta = read_config(folder)
            card.update(
                architecture=config.architecture,
                score=score_of(config),
                source_lang=meta.get("source_lang"),
                target_lang=meta.get("target_lang"),
            )
            if (folder / CARD_FILE).is_file():
                card.update(json.loads((folder / CARD_FILE).read_text()))
        except (OSError, ValueError) as err:
            logger.warning("cannot read the card of %s: %s", folder, err)
            card["error"] = f"cannot read this model's card: {err}"
        card["id"] = folder.name
        cards.append(card)
    return cards
