"""Display bundles: each output under its name, text as written (HTML), images embedded as bytes;
DataFrames with image columns as thumbnails; readable plain text for terminals."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from IPython.utils.capture import capture_output
from PIL import Image

import flownb
from flownb.infra.media import MediaStore
from flownb.runtime.result import RunResult
from flownb.show.display import (
    display_frame,
    frame_text,
    image_bytes,
    image_columns,
    image_label,
    is_image_url,
    output_bundles,
    result_bundle,
    result_text,
)


def _png(size: tuple[int, int] = (200, 120), color: str = "red") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture
def png_server(tmp_path: Path) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 serving ``pic.png``; yields its base URL."""
    (tmp_path / "pic.png").write_bytes(_png(color="blue"))

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(tmp_path), **kw)

        def log_message(self, *args):  # keep test output quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def _blog_result(blog_flow_path: Path) -> RunResult:
    return flownb.load_flow(blog_flow_path).run(topic="owls **at night**", tone="dry")


def test_each_output_under_its_name_text_as_written_image_as_png(blog_flow_path: Path) -> None:
    result = _blog_result(blog_flow_path)
    bundles = [data for data, _ in output_bundles(result)]
    assert all("text/markdown" not in b for b in bundles)  # a model's text is never Markdown
    assert '<h4 class="flownb-output-name">intro</h4>' in bundles[0]["text/html"]
    assert "owls **at night**" in bundles[0]["text/html"]  # the asterisks as written
    assert "mathjax_ignore" in bundles[0]["text/html"]
    assert '<h4 class="flownb-output-name">header_image</h4>' in bundles[1]["text/html"]
    image = bundles[2]
    assert "image/png" in image and "text/html" not in image
    path = Path(result["header_image"].removeprefix("file://"))
    assert base64.b64decode(image["image/png"]) == path.read_bytes()
    # The text fallback describes the image by its bytes, not by this machine's path.
    assert image["text/plain"] == f"[image header_image: 256x256 PNG, sha256 {_digest(path)}]"


def test_run_result_displays_one_bundle_per_output_in_ipython(blog_flow_path: Path) -> None:
    from IPython.display import display
    from IPython.testing.globalipapp import start_ipython

    start_ipython()  # a real InteractiveShell, so display() goes through its formatters

    result = _blog_result(blog_flow_path)
    with capture_output() as captured:
        display(result)
    kinds = [sorted(o.data) for o in captured.outputs]
    assert kinds == [
        ["text/html", "text/plain"],
        ["text/html", "text/plain"],
        ["image/png", "text/plain"],
    ]


def test_single_bundle_inlines_file_images_as_data_urls(blog_flow_path: Path) -> None:
    result = _blog_result(blog_flow_path)
    bundle = result_bundle(result)
    assert set(bundle) == {"text/plain", "text/html"}
    assert '<img src="data:image/png;base64,' in bundle["text/html"]
    assert "file://" not in bundle["text/html"]


def test_plain_text_is_readable_in_a_terminal(blog_flow_path: Path) -> None:
    result = _blog_result(blog_flow_path)
    text = result_text(result)
    assert text.splitlines()[0].startswith("── intro ")
    assert "Write a dry two-sentence intro for a blog post about owls **at night**." in text
    path = Path(result["header_image"].removeprefix("file://"))
    label = f"[image: 256x256 PNG, sha256 {_digest(path)}]"
    assert text.splitlines()[-1] == label  # what print(result) leaves in a saved notebook
    assert "file://" not in text and str(path.parent) not in text
    # A terminal's reader is on this machine: the CLI asks for the URL after the label.
    assert result_text(result, urls=True).splitlines()[-1] == f"{label} {result['header_image']}"
    assert str(RunResult({})) == "(no outputs)"


def test_data_and_loopback_http_images_are_embedded(png_server: str) -> None:
    png = _png()
    data_url = "data:image/png;base64," + base64.b64encode(png).decode()
    local = f"{png_server}/pic.png"
    result = RunResult(
        {
            "a": data_url,
            "b": local,
            "c": "https://cdn.example.invalid/x.png",
            "d": f"{png_server}/gone.png",
        },
        kinds=dict.fromkeys("abcd", "image"),
    )
    bundles = [data for data, _ in output_bundles(result)][1::2]  # the image bundles
    assert base64.b64decode(bundles[0]["image/png"]) == png
    assert Image.open(io.BytesIO(base64.b64decode(bundles[1]["image/png"]))).getpixel((0, 0)) == (
        0,
        0,
        255,
    )
    # A remote http image is left for the browser to load; a missing local one too.
    assert bundles[2] == {
        "text/plain": "[image c] https://cdn.example.invalid/x.png",
        "text/html": (
            '<div class="tex2jax_ignore mathjax_ignore">'
            '<img src="https://cdn.example.invalid/x.png" alt="c" style="max-width:480px"/></div>'
        ),
    }
    assert "text/html" in bundles[3] and "image/png" not in bundles[3]


def test_image_bytes_never_raises_on_unreadable_urls(tmp_path: Path) -> None:
    assert image_bytes((tmp_path / "missing.png").as_uri()) is None
    assert image_bytes("data:image/png,notbase64") is None
    assert image_bytes("http://127.0.0.1:9/x.png") is None  # nothing listens on port 9


def test_is_image_url() -> None:
    assert is_image_url("http://h/media/ab.png")
    assert is_image_url("file:///tmp/x.JPG")
    assert is_image_url("data:image/webp;base64,AAAA")
    assert not is_image_url("http://h/page.html")
    assert not is_image_url("a png file.png")
    assert not is_image_url(3)


def test_results_frame_shows_image_columns_as_thumbnails(blog_flow_path: Path) -> None:
    flow = flownb.load_flow(blog_flow_path)
    df = pd.DataFrame({"topic": ["owls", "<b>bold</b>"], "tone": ["dry", "warm"]})
    out = flow.run_dataframe(df, progress=False)
    assert image_columns(out) == ["header_image"]
    view = display_frame(out, size=48)
    page = view._repr_html_()
    assert page.count('<img src="data:image/png;base64,') == 2
    assert 'src="file://' not in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold</b>" not in page
    src = page.split('<img src="data:image/png;base64,', 1)[1].split('"', 1)[0]
    thumb = Image.open(io.BytesIO(base64.b64decode(src)))
    assert max(thumb.size) <= 48
    text = repr(view)
    assert "header_image" in text and "owls" in text and "<img" not in text
    digests = [_digest(Path(u.removeprefix("file://"))) for u in out["header_image"]]
    for shown in (page, text, frame_text(out)):  # the HTML tooltips and both text views
        assert "file://" not in shown
        assert all(f"256x256 PNG, sha256 {d}" in shown for d in digests)
    assert out["header_image"].str.startswith("file://").all()  # the frame itself is untouched


def test_image_labels_name_no_path_of_this_machine(tmp_path: Path) -> None:
    store = MediaStore(tmp_path / "media")
    png = _png((30, 20))
    pic = store.file_url(store.save("c" * 40 + ".png", png))
    digest = hashlib.sha256(png).hexdigest()[:12]
    assert image_label(pic, "cover") == f"[image cover: 30x20 PNG, sha256 {digest}]"
    data_url = "data:image/png;base64," + base64.b64encode(png).decode()
    assert image_label(data_url) == f"[image: 30x20 PNG, sha256 {digest}]"
    gone = store.file_url("d" * 40 + ".png")
    assert image_label(gone) == f"[image: {'d' * 40}.png, not readable here]"
    assert image_label("https://example.com/a.png") == "[image] https://example.com/a.png"
    broken = store.file_url(store.save("e" * 40 + ".png", b"not a png"))
    assert image_label(broken) == (
        f"[image: 9 bytes image/png, sha256 {hashlib.sha256(b'not a png').hexdigest()[:12]}]"
    )


def test_frame_with_missing_cells_and_no_image_columns() -> None:
    df = pd.DataFrame({"a": ["x", None], "b": [1, 2]})
    assert image_columns(df) == []
    page = display_frame(df)._repr_html_()
    assert "<img" not in page and "<td>x</td>" in page
    with pytest.raises(TypeError, match="DataFrame"):
        display_frame([1, 2])  # type: ignore[arg-type]


def test_frame_with_duplicate_names_and_unreadable_images(tmp_path: Path) -> None:
    store = MediaStore(tmp_path / "media")
    pic = store.file_url(store.save("a" * 40 + ".png", _png()))
    gone = store.file_url("b" * 40 + ".png")
    elsewhere = tmp_path / "pic.png"  # an image, but not in flownb's media store: never read
    elsewhere.write_bytes(_png())
    df = pd.DataFrame([[pic, gone, elsewhere.as_uri(), "t"]], columns=["img", "img", "x", "t"])
    page = display_frame(df)._repr_html_()
    assert page.count("<img ") == 1  # the readable one; the others stay as text
    # a media file gone from here is named by its file name, never its folder
    assert f"<td>[image: {'b' * 40}.png, not readable here]</td>" in page
    assert str(tmp_path / "media") not in page
    assert f"<td>{elsewhere.as_uri()}</td>" in page  # not an image column: text as written


def test_extension_entry_points_are_not_public_api() -> None:
    assert callable(flownb.load_ipython_extension)
    assert callable(flownb.unload_ipython_extension)
    assert "load_ipython_extension" not in flownb.__all__
    assert "display_frame" in flownb.__all__


def test_the_display_names_media_files_as_the_media_store_does() -> None:
    from flownb.infra.media import MEDIA_NAME
    from flownb.show.display import MEDIA_FILE_NAME

    assert MEDIA_FILE_NAME.pattern == MEDIA_NAME.pattern


@pytest.fixture
def kernel_like_shell(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """IPython's process-wide shell with HTML on (as a notebook's kernel has it), flownb's
    views not loaded; what the test registers is removed again."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.testing.globalipapp import start_ipython

    from flownb.show import frame_views

    start_ipython()
    shell = InteractiveShell.instance()
    monkeypatch.setattr(shell.display_formatter.formatters["text/html"], "enabled", True)
    frame_views.unregister(shell)  # whatever an earlier test left: start from pandas' views
    frame_views._declined.discard(id(shell))
    try:
        yield shell
    finally:
        frame_views.unregister(shell)
        frame_views._declined.discard(id(shell))


def test_a_frame_flownb_hands_back_in_a_notebook_is_shown_as_written_without_load_ext(
    kernel_like_shell: Any, blog_flow_path: Path
) -> None:
    shell = kernel_like_shell
    df = pd.DataFrame({"topic": ["costs $5 and $10", "<b>x</b> at https://example.com/a_b"]})
    before, _ = shell.display_formatter.format(df)  # pandas' own: "$5 and $10" becomes math
    assert "flownb-frame" not in before["text/html"]
    out = flownb.load_flow(blog_flow_path).run_dataframe(df.assign(tone="dry"), progress=False)
    shown, _ = shell.display_formatter.format(out)
    assert (
        "tex2jax_ignore" in shown["text/html"]
        and '<img src="data:image/png;base64,' in shown["text/html"]
    )
    assert "<b>x</b>" not in shown["text/html"] and "&lt;b&gt;x&lt;/b&gt;" in shown["text/html"]
    assert "file://" not in shown["text/plain"] and "256x256 PNG" in shown["text/plain"]
    # Unloading the extension puts pandas' views back, and a later frame does not bring ours.
    shell.run_line_magic("load_ext", "flownb")
    shell.run_line_magic("unload_ext", "flownb")
    again = flownb.load_flow(blog_flow_path).run_dataframe(df.assign(tone="dry"), progress=False)
    plain, _ = shell.display_formatter.format(again)
    assert "flownb-frame" not in plain["text/html"] and "file://" in plain["text/plain"]


def test_a_terminal_shell_keeps_pandas_views(blog_flow_path: Path) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.testing.globalipapp import start_ipython

    from flownb.show import frame_views

    start_ipython()
    shell = InteractiveShell.instance()
    assert not shell.display_formatter.formatters["text/html"].enabled
    frame_views.unregister(shell)
    frame_views._declined.discard(id(shell))
    df = pd.DataFrame({"topic": ["owls"], "tone": ["dry"]})
    out = flownb.load_flow(blog_flow_path).run_dataframe(df, progress=False)
    assert id(shell) not in frame_views._registered
    plain, _ = shell.display_formatter.format(out)
    assert "file://" in plain["text/plain"]  # a terminal: the machine's own path is useful
