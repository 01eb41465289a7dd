"""`/docs` renders offline: headless chromium loads Swagger UI with every request
off this server refused, and the page lists the API's operations from /openapi.json (OpenAPI 3.1)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Route, sync_playwright

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run"]


@pytest.fixture(scope="module")
def server(server_class: Any) -> Iterator[Any]:
    server = server_class("--engine", "sim", "--pp", "2", "--kv-blocks", "400", "--time-scale", "0.01")
    yield server
    assert server.stop() == 0, server.errors()


def test_the_api_docs_render_without_the_internet(server: Any) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: `make test` installs Debian's chromium package")
    ours = urlsplit(server.url).netloc
    refused: list[str] = []

    def only_this_server(route: Route) -> None:
        if urlsplit(route.request.url).netloc == ours:
            route.continue_()
        else:                                # a CDN, or anything else off the machine: as offline
            refused.append(route.request.url)
            route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page()
            page.route("**/*", only_this_server)
            page.goto(f"{server.url}/docs")
            page.locator(".opblock-summary-path").first.wait_for(timeout=30_000)
            paths = {t.get_attribute("data-path") or t.text_content() for t in
                     page.locator(".opblock-summary-path").all()}
            assert {"/v1/prefill", "/v1/completions", "/v1/knobs"} <= {(x or "").strip() for x in paths}, paths
            assert page.get_by_text("Unable to render this definition").count() == 0
        finally:
            browser.close()
    assert refused == [], refused
