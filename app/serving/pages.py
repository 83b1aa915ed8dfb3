"""HTML pages (placeholder; the front-end fills this in)."""

from fastapi import APIRouter

router = APIRouter(include_in_schema=False)
