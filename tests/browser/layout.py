"""Helpers for layout checks in the browser tests."""

from __future__ import annotations

from playwright.sync_api import Page
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError


def page_width_settles(page: Page, width: int, timeout_ms: float = 10_000) -> int:
    """The page's scroll width once it fits ``width`` pixels (no sideways scroll), waiting for the
    layout after a viewport change: Plotly redraws its responsive charts on the window's resize
    event, a frame or more after the new size, so an immediate reading can see the old charts.
    Returns the width it read last, which the caller asserts on (a page that never fits fails)."""
    try:
        page.wait_for_function(f"() => document.documentElement.scrollWidth <= {width}", timeout=timeout_ms)
    except PlaywrightTimeoutError:
        pass  # the assertion that follows names the width it found
    return int(page.evaluate("document.documentElement.scrollWidth"))
