"""Long result frames show one page of rows (static HTML a saved notebook keeps), with the way
to other pages named, and a pager of buttons for a live notebook."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pandas as pd
import pytest

import flownb
from flownb.errors import ConfigError
from flownb.show.display import FrameView, display_frame, image_columns
from flownb.show.frame_views import frame_html as _frame_html


def _big(n: int = 10_000) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "topic": [f"topic {i}" for i in range(n)],
            "out": pd.array([f"answer {i}" if i % 7 else None for i in range(n)], dtype="string"),
        },
        index=pd.RangeIndex(1000, 1000 + n),
    )


def _table(page: str) -> tuple[list[str], list[list[str]], str]:
    """Return the row labels, the cells and the page line of a FrameView's HTML (parsed as XML,
    so it must be well formed)."""
    root = ET.fromstring(page)
    body = root.find("./table/tbody")
    assert body is not None
    labels = [tr.findtext("th") or "" for tr in body.findall("tr")]
    cells = [[td.text or "" for td in tr.findall("td")] for tr in body.findall("tr")]
    line = root.find("./p")
    text = "".join(line.itertext()) if line is not None else ""
    return labels, cells, text


def test_a_long_frame_shows_its_first_page_and_how_to_see_the_others() -> None:
    df = _big()
    page = display_frame(df, page_size=50)._repr_html_()
    labels, cells, line = _table(page)
    assert labels == [str(i) for i in range(1000, 1050)]
    assert cells[1] == ["topic 1", "answer 1"] and cells[0] == ["topic 0", ""]  # <NA>: empty
    assert line.startswith("rows 1–50 of 10,000 (page 1 of 200)")
    assert "flownb.display_frame(df).page(2)" in line and ".pager()" in line
    # One page, not the frame: the HTML grows with the page, not with the 10,000 rows.
    assert len(page) * 100 < len(df.to_html())


def test_another_page_and_the_last_one() -> None:
    view = display_frame(_big(), page_size=50)
    labels, cells, line = _table(view.page(3)._repr_html_())
    assert labels[0] == "1100" and labels[-1] == "1149" and cells[-1][0] == "topic 149"
    assert line.startswith("rows 101–150 of 10,000 (page 3 of 200)") and ".page(4)" in line
    labels, _, line = _table(view.page(200)._repr_html_())
    assert labels[-1] == "10999" and len(labels) == 50
    assert line.startswith("rows 9,951–10,000 of 10,000 (page 200 of 200)") and ".page(199)" in line
    assert "[rows 9,951–10,000 of 10,000, page 200 of 200]" in repr(view.page(200))


def test_the_default_page_is_pandas_display_max_rows() -> None:
    with pd.option_context("display.max_rows", 25):
        labels, _, line = _table(display_frame(_big(100))._repr_html_())
    assert len(labels) == 25 and line.startswith("rows 1–25 of 100 (page 1 of 4)")


def test_a_frame_that_fits_has_no_page_line() -> None:
    labels, _, line = _table(display_frame(_big(30), page_size=50)._repr_html_())
    assert len(labels) == 30 and line == ""


@pytest.mark.parametrize("page", [0, 5, -1, 1.5, True])
def test_a_page_that_is_not_there_is_one_clear_error(page: object) -> None:
    with pytest.raises(ConfigError, match=r"page must be a whole number from 1 to 4, got"):
        display_frame(_big(100), page_size=25, page=page)  # type: ignore[arg-type]


def test_the_pager_shows_other_pages_with_its_buttons() -> None:
    view = display_frame(_big(120), page_size=50)
    pager = view.pager()
    (back, number, status, ahead), table = pager.children[0].children, pager.children[1]
    assert back.disabled and not ahead.disabled and status.value == "of 3"
    assert _table(table.value)[2].startswith("rows 1–50 of 120")
    ahead.click()
    assert number.value == 2 and _table(table.value)[0][0] == "1050"
    ahead.click()
    labels, _, line = _table(table.value)
    assert labels[-1] == "1119" and line.startswith("rows 101–120 of 120 (page 3 of 3)")
    assert ahead.disabled and not back.disabled
    back.click()
    assert number.value == 2 and _table(table.value)[2].startswith("rows 51–100")


def test_with_the_extension_a_long_frame_shows_a_page_and_a_short_one_pandas_view() -> None:
    with pd.option_context("display.max_rows", 40):
        labels, _, line = _table(_frame_html(_big(1000)) or "")
        assert len(labels) == 40 and line.startswith("rows 1–40 of 1,000")
        short = _big(10)
        assert _frame_html(short) == short._repr_html_()


def test_a_failed_rows_missing_image_keeps_the_column_an_image_column(tmp_path) -> None:
    from PIL import Image

    from flownb.infra.media import MediaStore

    store = MediaStore(tmp_path / "media")  # flownb reads images from its media store only
    pic = store.path_for("f" * 40 + ".png")
    pic.parent.mkdir(parents=True)
    Image.new("RGB", (4, 4), "red").save(pic)
    df = pd.DataFrame({"art": pd.array([pic.as_uri(), None], dtype="string")})
    assert image_columns(df) == ["art"]
    page = FrameView(df)._repr_html_()
    assert page.count("<img ") == 1 and "&lt;NA&gt;" not in page


def test_the_result_of_run_dataframe_pages(blog_flow_path) -> None:
    flow = flownb.load_flow(blog_flow_path)
    df = pd.DataFrame({"topic": [f"t{i}" for i in range(130)], "tone": ["dry"] * 130})
    out = flow.run_dataframe(df, progress=False)
    labels, cells, line = _table(display_frame(out, page_size=60).page(3)._repr_html_())
    assert labels == [str(i) for i in range(120, 130)]
    assert [c[0] for c in cells] == [f"t{i}" for i in range(120, 130)]
    assert line.startswith("rows 121–130 of 130 (page 3 of 3)")
