"""A polars results frame shown in a real Jupyter kernel: what a saved notebook keeps of it
(polars' own text and HTML views) names no file of this machine; its image cells read as their
size, format and digest, as a pandas frame's do."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest

from tests.kernels import execute as run
from tests.kernels import kernel_env, outputs, printed, running_kernel

pytest.importorskip("polars")

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parent.parent


def _result(messages: list[dict[str, Any]]) -> dict[str, Any]:
    (shown,) = outputs(messages, "execute_result")
    data: dict[str, Any] = shown["data"]
    return data


def _label(url: str) -> str:
    data = Path(unquote(urlparse(url).path)).read_bytes()
    return f"[image: 256x256 PNG, sha256 {hashlib.sha256(data).hexdigest()[:12]}]"


def test_a_polars_results_frame_keeps_no_path_of_this_machine(tmp_path: Path) -> None:
    shutil.copy(ROOT / "notebooks" / "flows" / "blog-intro.json", tmp_path / "blog.json")
    env = kernel_env(tmp_path, FLOWNB_PROVIDER="offline")
    with running_kernel(tmp_path, env) as kc:
        # 12 rows: more than polars shows (its first 5 and last 5), so both ends are read.
        reply, messages = run(
            kc,
            "import json, flownb, polars as pl\n"
            "flow = flownb.load_flow('blog.json')\n"
            "rows = pl.DataFrame({'topic': [f'topic {i}' for i in range(12)], 'tone': 'dry'})\n"
            "out = flow.run_dataframe(rows, progress=False)\n"
            "print(json.dumps(out['header_image'].to_list()))",
        )
        assert reply["status"] == "ok", outputs(messages, "error")
        urls = json.loads(printed(messages))
        assert len(urls) == 12 and all(u.startswith("file://") for u in urls)
        shown_rows = [*range(5), *range(7, 12)]

        reply, messages = run(kc, "out")
        assert reply["status"] == "ok", outputs(messages, "error")
        bundle = _result(messages)
        assert set(bundle) == {"text/plain", "text/html"}
        for kind in ("text/plain", "text/html"):
            view = bundle[kind]
            assert "file:" not in view and str(tmp_path) not in view, kind
            # Each image polars shows reads as its size, format and digest: whole in the HTML
            # table; the text table may wrap a cell at a space, so there its digest is looked for.
            for i in shown_rows:
                label = _label(urls[i])
                assert (label if kind == "text/html" else label.split()[-1]) in view, (kind, i)
            assert view.count("256x256 PNG") == len(shown_rows), kind
        assert "shape: (12, 4)" in bundle["text/plain"]  # polars' own view, not pandas'
        assert "topic 11" in bundle["text/plain"]

        # The frame itself is untouched, and without flownb's views polars shows the paths.
        reply, messages = run(
            kc,
            "print(out['header_image'][0].startswith('file://'))\n"
            "%load_ext flownb\n%unload_ext flownb\nout",
        )
        assert reply["status"] == "ok", outputs(messages, "error")
        assert printed(messages).strip() == "True"
        bundle = _result(messages)
        assert "file://" in bundle["text/plain"] and "file://" in bundle["text/html"]
