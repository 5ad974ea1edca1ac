"""A saved evaluation report opened in headless chromium with every outside request refused:
the page is self-contained (what was evaluated, summary, the SVG plot, side-by-side table,
embedded image thumbnails that load), uses the page's full width, runs no script that came from
data, and asks the network for nothing. The screenshot goes to
``test-artifacts/eval-report.png`` when asked for (tests/browser/artifacts.py)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import flownb
from flownb import scorers as S
from tests.browser.artifacts import screenshot
from tests.browser.chromium import Chromium, browser_context

pytestmark = pytest.mark.timeout(120)


def test_saved_report_is_self_contained_in_chromium(
    tmp_path: Path, blog_flow_path: Path, chromium: Chromium
) -> None:
    flow = flownb.load_flow(blog_flow_path)
    variants = {
        "baseline": flow,
        "punchy": flow.with_prompts({"Blog intro": "Write a {tone}, punchy intro about {topic}."}),
    }
    data = pd.DataFrame(
        {
            "topic": ["tide pools", "<script>window.pwned = 1</script>owls", "sourdough"],
            "tone": ["dry", "warm", "odd"],
        }
    )
    report = flownb.evaluate(
        variants,
        data,
        [S.contains("intro", S.col("topic")), S.length("intro", max=60)],
        progress=False,
    )
    page_file = report.save(tmp_path / "report.html")
    requested: list[str] = []
    with browser_context(chromium, viewport={"width": 1300, "height": 900}) as context:
        page = context.new_page()
        page.on("request", lambda r: requested.append(r.url))
        page.route(
            "**/*",
            lambda route: (
                route.continue_()
                if route.request.url.startswith(("file:", "data:"))
                else route.abort()
            ),
        )
        page.goto(page_file.as_uri(), wait_until="load")
        images = page.locator("table.flownb-eval img")
        assert images.count() == 6  # 3 rows x 2 variants, one thumbnail each
        sizes = images.evaluate_all("imgs => imgs.map(i => [i.complete, i.naturalWidth])")
        assert all(done and width > 0 for done, width in sizes), sizes
        text = page.inner_text("body")
        assert "punchy" in text and "contains_intro" in text
        assert "Write a {tone}, punchy intro about {topic}." in text  # the header's prompts
        assert "<script>window.pwned = 1</script>owls" in text  # shown as text...
        assert page.evaluate("() => window.pwned") is None  # ...never run
        # Two pictures: the scores with their intervals, and the frontier (quality against
        # price per row); both drawn from the page itself.
        plots = page.locator("img.flownb-plot")
        assert plots.count() == 2
        drawn = plots.evaluate_all("imgs => imgs.map(i => i.complete && i.naturalWidth > 0)")
        assert drawn == [True, True], drawn
        width = page.evaluate("() => document.documentElement.clientWidth")
        tables = page.locator("table.flownb-eval")
        assert all(tables.nth(k).bounding_box()["width"] > 0.9 * width for k in range(3))
        assert page.locator("ins").count() > 0  # the differing words are marked
        screenshot(page, "eval-report.png", full_page=True)
    outside = [u for u in requested if not u.startswith(("file:", "data:"))]
    assert requested and not outside, f"the page asked for outside resources: {outside[:5]}"
