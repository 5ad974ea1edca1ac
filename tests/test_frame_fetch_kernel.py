"""A results frame shown in a real Jupyter kernel after ``%load_ext flownb`` fetches nothing.

A frame written with ``--out x.csv`` and read back has lost flownb's mark of which columns are
images; a URL a model wrote into one of its cells (here one on this machine's loopback
interface, which the kernel could reach) must stay text: a loopback server counting requests
gets none while such frames are displayed, and the outputs hold the URL as text. The files of
flownb's own media store, in such a frame, are still shown as images, and every view of them a
saved notebook keeps (text and tooltips) describes them instead of naming their files.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from flownb.testing.fake_replies import image_bytes
from tests.kernels import execute as run
from tests.kernels import kernel_env, outputs, running_kernel

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parent.parent


class _Counting(ThreadingHTTPServer):
    """A loopback server answering every GET with a PNG, counting the requests."""

    def __init__(self) -> None:
        self.requests = 0
        self.lock = threading.Lock()
        png = image_bytes("secret")

        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with server.lock:
                    server.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(png)))
                self.end_headers()
                self.wfile.write(png)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def secret_server() -> Iterator[_Counting]:
    server = _Counting()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _shown(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The bundles the cell displayed (display_data and the cell's result)."""
    shown = outputs(messages, "display_data") + outputs(messages, "execute_result")
    return [m["data"] for m in shown]


def test_a_frame_read_back_from_csv_is_shown_without_fetching_its_urls(
    tmp_path: Path, secret_server: _Counting
) -> None:
    url = f"http://127.0.0.1:{secret_server.server_address[1]}/secret.png"
    shutil.copy(ROOT / "notebooks" / "flows" / "blog-intro.json", tmp_path / "blog.json")
    env = kernel_env(tmp_path, FLOWNB_PROVIDER="offline")
    with running_kernel(tmp_path, env) as kc:
        # A real results frame (text and image outputs; offline images are media-store files),
        # its text output overwritten with what a model could write, then written as --out
        # x.csv does and read back: the mark of its image columns is gone.
        reply, messages = run(
            kc,
            "%load_ext flownb\n"
            "import flownb, pandas as pd\n"
            "flow = flownb.load_flow('blog.json')\n"
            "rows = pd.DataFrame({'topic': ['owls', 'bats'], 'tone': ['dry', 'warm']})\n"
            "df = flow.run_dataframe(rows, progress=False)\n"
            "images = df.attrs['flownb_images']\n"
            "text = [c for c in df.columns if c not in [*images, 'topic', 'tone']][0]\n"
            f"df[text] = {url!r}\n"
            "df.to_csv('x.csv', index=False)\n"
            "back = pd.read_csv('x.csv', dtype=str)\n"
            "print(sorted(back.columns), images, text)",
        )
        assert reply["status"] == "ok", outputs(messages, "error")
        reply, messages = run(
            kc,
            "display(back)\n"
            "display(flownb.display_frame(back))\n"
            # A frame that never was flownb's: a column of nothing but image URLs.
            f"display(pd.DataFrame({{'picture': [{url!r}] * 3}}))\n"
            "back",
        )
        assert reply["status"] == "ok", outputs(messages, "error")
        shown = _shown(messages)
        assert len(shown) == 4
        assert secret_server.requests == 0
        for bundle in shown:
            html = bundle["text/html"]
            assert url in html  # the URL as text...
            assert f'src="{url}"' not in html  # ...never an image's source
        # The media-store images of the frame read back are still images, read from the store.
        for bundle in shown[:2] + shown[3:]:
            assert bundle["text/html"].count('src="data:image/png;base64,') == 2
        assert "<img" not in shown[2]["text/html"]
        # What a saved notebook keeps of them names no file of this machine: the media-store
        # images read as their size and digest in the text views and the HTML tooltips alike.
        for bundle in shown[:2] + shown[3:]:
            for kind in ("text/plain", "text/html"):
                assert "file://" not in bundle[kind] and str(tmp_path) not in bundle[kind]
            assert bundle["text/plain"].count("[image: 256x256 PNG, sha256 ") == 2
            assert url in bundle["text/plain"]  # the model's text, as written
        assert shown[2]["text/plain"].count(url) == 3  # not an image column: text as written

        # A frame flownb marked shows its image column as images, still fetching nothing: a
        # loopback URL there is left for the browser, as any other URL.
        reply, messages = run(
            kc,
            f"marked = pd.DataFrame({{'picture': [{url!r}]}})\n"
            "marked.attrs['flownb_images'] = ['picture']\n"
            "marked",
        )
        assert reply["status"] == "ok", outputs(messages, "error")
        (bundle,) = _shown(messages)
        assert f'src="{url}"' in bundle["text/html"]
        assert secret_server.requests == 0
