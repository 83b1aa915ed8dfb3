"""The API docs work offline under the server's Content-Security-Policy: Swagger UI at /docs and
ReDoc at /redoc load their scripts from this server (the ``page`` fixture fails a test on any
request to another host, script error or blocked resource)."""

from __future__ import annotations

import urllib.request

from playwright.sync_api import Page, expect


def test_swagger_ui_lists_the_endpoints_and_tries_one(page: Page, server_url: str, shoot) -> None:
    page.goto(f"{server_url}/docs")
    expect(page.locator(".swagger-ui .opblock-summary-path").first).to_be_visible()
    paths = page.locator(".swagger-ui .opblock-summary-path").all_inner_texts()
    assert {"/api/translate", "/api/ready", "/api/models"} <= {p.replace("\u200b", "") for p in paths}
    health = page.locator(".opblock-get", has_text="/api/health")
    health.locator(".opblock-summary").click()
    health.get_by_role("button", name="Try it out").click()
    health.get_by_role("button", name="Execute").click()
    expect(health.locator(".live-responses-table tbody .response-col_status").first).to_contain_text("200")
    shoot(page, "docs")
    page.set_viewport_size({"width": 390, "height": 844})
    shoot(page, "docs-390")


def test_redoc_renders_the_reference(page: Page, server_url: str, shoot) -> None:
    page.goto(f"{server_url}/redoc")
    expect(page.get_by_role("heading", name="Translate one text and return every attention matrix")).to_be_visible()
    shoot(page, "redoc")


def test_pages_send_the_security_headers(server_url: str) -> None:
    for path in ("/", "/docs", "/api/health", "/static/css/app.css"):
        with urllib.request.urlopen(f"{server_url}{path}") as response:
            csp = response.headers["Content-Security-Policy"]
            assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "object-src 'none'" in csp
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert response.headers["Referrer-Policy"] == "no-referrer"


def test_every_page_links_to_the_api_docs(page: Page, server_url: str) -> None:
    for path in ("/", "/compare", "/models", "/vision"):
        page.goto(f"{server_url}{path}")
        link = page.locator("header nav a[href='/docs']")
        expect(link).to_have_text("API docs")
    link.click()
    expect(page.locator(".swagger-ui .opblock-summary-path").first).to_be_visible()
