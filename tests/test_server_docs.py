"""``/docs`` renders in a real browser (Debian's chromium via Playwright) with every request to
anything but the server refused: the Swagger UI files are served by flownb, not a CDN, and the
page shows the contract's operations and their status codes."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.browser.chromium import Chromium, browser_context
from tests.conftest import FLOWS
from tests.serving import run_server

pytestmark = pytest.mark.timeout(120)


def test_docs_render_offline_with_every_status(tmp_path: Path, chromium: Chromium) -> None:
    from playwright.sync_api import Route

    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "blog-intro.json").write_bytes((FLOWS / "blog-intro.json").read_bytes())
    with run_server(flows, tmp_path / "home") as server, browser_context(chromium) as context:
        host = urlsplit(server.url).netloc
        outside: list[str] = []

        def only_loopback(route: Route) -> None:
            if urlsplit(route.request.url).netloc == host:
                route.continue_()
            else:
                outside.append(route.request.url)
                route.abort()

        page = context.new_page()
        page.route("**/*", only_loopback)
        page.goto(f"{server.url}/docs")
        page.get_by_text("Run a flow once (object) or once per element (array)").click()
        for status in ("200", "400", "401", "404", "413", "422", "429", "500", "502", "504"):
            page.locator(f"tr.response[data-code='{status}']").first.wait_for(timeout=15000)
        assert page.get_by_text("Authorize").count() >= 1  # the x-api-key scheme
    assert outside == []
