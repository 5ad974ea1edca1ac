"""``%flow connect`` and flow ids: the magics against a real ``flownb serve`` app (uvicorn on
127.0.0.1), the key coming from the environment or a ``.env`` file, never from the magic line."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.testing.globalipapp import start_ipython
from IPython.utils.capture import capture_output

from flownb.errors import AuthError, FlowNotFound, InputError
from flownb.show.display import output_bundles
from flownb.views.widgets import FlowForm
from tests.serving import Running, run_server


@pytest.fixture
def server(flow_dir: Path, tmp_path: Path) -> Iterator[Running]:
    with run_server(flow_dir, tmp_path / "server-home") as running:
        yield running


@pytest.fixture
def ip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    start_ipython()
    shell = InteractiveShell.instance()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    shell.run_line_magic("load_ext", "flownb")
    try:
        yield shell
    finally:
        shell.run_line_magic("unload_ext", "flownb")


def test_connect_with_env_key_then_info_run_batch_form(
    ip: Any, server: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWNB_API_KEY", server.key)
    with capture_output() as captured:
        ip.run_line_magic("flow", f"connect {server.url}")
    assert f"flow ids now run on {server.url} (API key from FLOWNB_API_KEY)" in captured.stdout
    assert server.key not in captured.stdout

    info = ip.run_line_magic("flow", "info blog-intro")
    assert info.flow.variables == ["topic", "tone"] and "server http://127.0.0.1" in info.source

    ip.run_line_magic("flow", "run blog-intro topic='kelp forests' tone=calm -o res -q")
    result = ip.user_ns["res"]
    assert result["intro"] == "Write a calm two-sentence intro for a blog post about kelp forests."
    assert result["header_image"].startswith(server.url + "/media/")
    # The server's image is on the kernel's loopback: embedded as bytes for the browser.
    image = [data for data, _ in output_bundles(result)][2]
    assert base64.b64decode(image["image/png"]).startswith(b"\x89PNG")

    ip.user_ns["df"] = pd.DataFrame({"topic": ["owls", "moss"], "tone": ["dry", "warm"]})
    out = ip.run_line_magic("flow", "batch blog-intro --df df --no-progress")
    assert out["intro"].tolist()[1] == "Write a warm two-sentence intro for a blog post about moss."

    form = ip.run_line_magic("flow", "form blog-intro")
    assert isinstance(form, FlowForm)
    form.inputs["topic"].value, form.inputs["tone"].value = "sea glass", "wry"
    form.button.click()
    assert form.wait(30)
    assert form.error is None
    assert [sorted(o["data"]) for o in form.output.outputs][-1] == ["image/png", "text/plain"]

    with pytest.raises(InputError, match="missing variable 'tone'"):
        ip.run_line_magic("flow", "run blog-intro topic=x")
    with pytest.raises(FlowNotFound):
        ip.run_line_magic("flow", "info no-such-flow")


def test_connect_reads_the_key_from_a_dotenv_file(ip: Any, server: Running) -> None:
    Path(".env").write_text(f"FLOWNB_API_KEY={server.key}\n")
    with capture_output() as captured:
        ip.run_line_magic("flow", f"connect {server.url}")
    assert f"(API key from {Path('.env').resolve()})" in captured.stdout
    assert ip.run_line_magic("flow", "run product-copy product=kites audience=kids")["tagline"]


def test_a_wrong_key_fails_the_run_and_never_shows_the_key(
    ip: Any, server: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWNB_API_KEY", "fnb_wrong_key_for_this_test")
    ip.run_line_magic("flow", f"connect {server.url}")
    with pytest.raises(AuthError) as info:
        ip.run_line_magic("flow", "run blog-intro topic=a tone=b")
    assert "fnb_wrong_key_for_this_test" not in str(info.value)


def test_without_any_key_connect_is_a_usage_error(
    ip: Any, server: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.core.error import StdinNotImplementedError

    def no_stdin(prompt: str = "") -> str:  # what ipykernel does when the front end has no stdin
        raise StdinNotImplementedError("getpass was called, but this frontend does not support it")

    monkeypatch.setattr("getpass.getpass", no_stdin)
    with pytest.raises(UsageError, match="no API key"):
        ip.run_line_magic("flow", f"connect {server.url}")


def test_flow_ids_use_flownb_base_url_without_connect(
    ip: Any, server: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWNB_BASE_URL", server.url)
    monkeypatch.setenv("FLOWNB_API_KEY", server.key)
    res = ip.run_line_magic("flow", "run blog-intro topic=a tone=b")
    assert res["intro"] == "Write a b two-sentence intro for a blog post about a."
