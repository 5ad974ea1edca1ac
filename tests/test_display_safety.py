"""What a model wrote is shown as the characters it wrote, in every view, and a text is never a
file: markup, math delimiters, an ``onerror`` image and terminal escapes through every display
path (result bundles, the terminal, the live view, DataFrame views, the evaluation's compare
table, saved report and review widgets, ``%flow info``), and ``file://`` texts never read."""

from __future__ import annotations

import base64
import html
import io
import os
import re
import threading
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

import flownb
from flownb.evaluation.html.report import compare_html, page_html
from flownb.infra.media import MAX_IMAGE_BYTES, MediaStore, read_media
from flownb.runtime.result import RunResult
from flownb.show.display import (
    display_frame,
    image_bytes,
    image_columns,
    output_bundles,
    result_bundle,
    result_text,
)
from flownb.show.escape import html_attr, html_block, html_text, md_text, no_math, term_text
from flownb.views.live import RowsBoard
from flownb.views.live_text import render
from tests.conftest import make_flow

HOSTILE = [
    "ANSWER<e for night owls in three bullet points.>",
    "Dear <Customer Name>, a < b",
    "<img src=x onerror=alert(document.domain)> hello",
    "costs $5 and $7, or $x$ and \\(y\\)",
    "**bold** `code` # not a heading",
    "red \x1b[31mALERT\x1b[0m and a title \x1b]0;owned\x07 done",
]


def _png(color: str = "red") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), color).save(out, format="PNG")
    return out.getvalue()


def _shown(markup: str) -> str:
    """The characters a browser shows for ``markup``: tags dropped, entities read."""
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def _safe_html(markup: str, text: str) -> None:
    """``markup`` shows ``text`` as written, runs nothing, and gives math no delimiter pair."""
    assert "<img src=x" not in markup and "<e " not in markup and "<Customer" not in markup
    assert re.search(r"(?<!<span>)\$", markup) is None, markup  # each $ in a span of its own
    assert "\x1b" not in markup and "\x07" not in markup
    assert term_text(text) in _shown(markup)


@pytest.mark.parametrize("text", HOSTILE)
def test_the_escape_helpers_keep_every_character(text: str) -> None:
    _safe_html(html_text(text), text)
    _safe_html(html_block(text), text)
    assert "mathjax_ignore" in html_block(text) and "tex2jax_ignore" in no_math("x")
    assert "<" not in html_attr(text) and "\x1b" not in html_attr(text)
    shown = term_text(text)
    assert "\x1b" not in shown and "\x07" not in shown
    assert shown.replace("␛", "\x1b").replace("␇", "\x07") == text  # nothing lost, only shown


def test_terminal_text_shows_controls_and_keeps_lines() -> None:
    assert term_text("a\x1b[2Jb\r\nc\td\x9be\x7f") == "a␛[2Jb\nc\td\\x9be␡"


def test_markdown_text_is_escaped_for_commonmark_and_jupyterlab_math() -> None:
    assert md_text("<b>*x*</b> & $5") == "&lt;b\\>\\*x\\*&lt;\\/b\\> &amp; \\\\$5"
    assert md_text("one\ntwo `c` [l](u)") == "one\\\ntwo \\`c\\` \\[l\\]\\(u\\)"


def _result(text: str) -> RunResult:
    return RunResult({"answer": text}, kinds={"answer": "text"}, provider="offline")


@pytest.mark.parametrize("text", HOSTILE)
def test_a_result_shows_the_model_text_as_written(text: str) -> None:
    result = _result(text)
    for data, _ in output_bundles(result):
        assert "text/markdown" not in data
        _safe_html(data["text/html"], text)
        assert "\x1b" not in data["text/plain"]
    bundle = result_bundle(result)
    _safe_html(bundle["text/html"], text)
    assert "\x1b" not in result_text(result) and term_text(text) in str(result)


def test_the_offline_run_in_the_issue_keeps_its_text(tmp_path: Path) -> None:
    flow = flownb.load_flow(make_flow({"answer": "{x}"}, ["x"]))
    result = flow.run(x=HOSTILE[0])
    (data, _), *_ = output_bundles(result)
    assert "for night owls in three bullet points." in _shown(data["text/html"])


@pytest.mark.parametrize("text", HOSTILE)
def test_live_views_show_the_text_as_written(text: str) -> None:
    _safe_html(render({"answer": text}, {}), text)
    board = RowsBoard([{"x": text}], ["answer"])
    board.add([(0, _result(text), None)])
    _safe_html(board.live_html(), text)
    table, plain = board.final()
    assert "\x1b" not in plain
    assert "<img src=x" not in table and term_text(text).split("<")[0] in _shown(table)


def test_a_text_output_that_names_a_file_is_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.png"
    secret.write_bytes(_png("blue"))
    passwd = tmp_path / "passwd.png"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n")
    url = secret.as_uri()
    # A text output, however image-like: shown as text, never embedded.
    result = _result(url)
    markup = "".join(d.get("text/html", "") for d, _ in output_bundles(result))
    assert "data:image" not in markup and url in _shown(markup)
    # Even an image node's output is read only from flownb's media store.
    image = RunResult({"pic": url}, kinds={"pic": "image"})
    shown = output_bundles(image)[1][0]
    assert "image/png" not in shown and "data:image" not in shown.get("text/html", "")
    assert 'src="file:' not in shown.get("text/html", "")  # a page is never pointed at a file
    assert image_bytes(url) is None and image_bytes(passwd.as_uri()) is None
    # A results frame knows its image columns: a text column of file URLs is text.
    flow = flownb.load_flow(make_flow({"answer": "{x}"}, ["x"]))
    out = flow.run_dataframe(pd.DataFrame({"x": [url, passwd.as_uri()]}), progress=False)
    assert image_columns(out) == []
    page = display_frame(out)._repr_html_()
    assert "data:image" not in page and "<img" not in page
    assert base64.b64encode(_png("blue")).decode()[:40] not in page


def test_the_media_store_reads_only_its_regular_files_up_to_the_cap(tmp_path: Path) -> None:
    store = MediaStore(tmp_path / "media")
    good = store.save("a" * 40 + ".png", _png())
    assert read_media(store.path_for(good)) == _png()
    # A FIFO named like a media file: refused at once, never waited on.
    fifo = store.path_for("b" * 40 + ".png")
    os.mkfifo(fifo)
    done = threading.Event()
    found: list[object] = []
    threading.Thread(target=lambda: (found.append(read_media(fifo)), done.set())).start()
    assert done.wait(10) and found == [None]
    # A symbolic link out of the store, a device, a file over the cap: refused.
    outside = tmp_path / "outside.png"
    outside.write_bytes(_png())
    link = store.path_for("c" * 40 + ".png")
    link.symlink_to(outside)
    assert read_media(link) is None
    zero = store.path_for("d" * 40 + ".png")
    zero.symlink_to("/dev/zero")
    # A device is refused before it is read (a read of /dev/zero would never end).
    assert read_media(zero) is None
    assert image_bytes(zero.as_uri()) is None
    big = store.path_for("e" * 40 + ".png")
    with big.open("wb") as fh:
        fh.truncate(MAX_IMAGE_BYTES + 1)
    assert read_media(big) is None
    # A name that is not a media name, even in the store's folder: refused.
    other = store.directory / "notes.png"
    other.write_bytes(_png())
    assert read_media(other) is None


def _report(tmp_path: Path, texts: list[str]) -> flownb.EvalReport:
    flow = flownb.load_flow(make_flow({"answer": "{x}"}, ["x"]))
    data = pd.DataFrame({"x": texts})
    return flownb.evaluate({"a": flow, "b": flow}, data, [], progress=False)


def test_compare_report_and_review_show_text_as_written(tmp_path: Path) -> None:
    secret = tmp_path / "secret.png"
    secret.write_bytes(_png("green"))
    texts = [*HOSTILE, secret.as_uri()]
    report = _report(tmp_path, texts)
    table = compare_html(report)
    page = page_html(report)
    for markup in (table, page, report._repr_html_()):
        assert "<img src=x" not in markup and "<Customer" not in markup
        assert "\x1b" not in markup
        assert "data:image/png" not in markup  # the file:// text was not read
        assert "mathjax_ignore" in markup
    for text in texts:
        assert term_text(text) in _shown(table)
    review = report.review()
    static = review._repr_mimebundle_()
    assert set(static) == {"text/html", "text/plain"}  # no front end here: the static copy
    assert "<img src=x" not in static["text/html"] and "row 1 of" in static["text/plain"]
    pairwise = report.review(pairwise=("a", "b"))._repr_mimebundle_()
    assert set(pairwise) == {"text/html", "text/plain"}
    assert "<img src=x" not in pairwise["text/html"] and "compared" in pairwise["text/plain"]


def test_a_form_saved_without_a_front_end_is_its_static_copy() -> None:
    flow = flownb.load_flow(make_flow({"answer": "{x}"}, ["x"]))
    form = flow.form()
    form.inputs["x"].value = HOSTILE[2]
    bundle = form._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"}
    _safe_html(bundle["text/html"], HOSTILE[2])
    assert "x = '<img src=x onerror" in bundle["text/plain"]
