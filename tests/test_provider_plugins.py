"""A provider from a separate package, found through the ``flownb.providers`` entry point group:
a tiny distribution (a module and its ``.dist-info`` with ``entry_points.txt``) written to a
temporary folder and put on ``PYTHONPATH``, exactly what ``pip install`` leaves in
site-packages. Every check runs in a fresh interpreter, so the registry reads real metadata.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from tests.conftest import make_flow, write_flow
from tests.reliability.procs import create_key, flownb_cli, serve

PLUGIN = '''
from typing import ClassVar

from flownb.providers.base import Call, Generation, Provider


class ShoutProvider(Provider):
    """Text only: the rendered prompt, upper-cased."""

    name: ClassVar[str] = "shout"
    cacheable: ClassVar[bool] = False
    supports_images: ClassVar[bool] = False

    async def generate(self, call: Call) -> Generation:
        return Generation(call.prompt.upper(), model="shout-1")
'''


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("site")
    (root / "flownb_shout.py").write_text(PLUGIN, encoding="utf-8")
    info = root / "flownb_shout-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: flownb-shout\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[flownb.providers]\nshout = flownb_shout:ShoutProvider\n", encoding="utf-8"
    )
    return root


@pytest.fixture
def env(plugin_path: Path, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWNB_", "OPENAI_"))}
    paths = [str(plugin_path), str(Path(__file__).parent.parent), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["FLOWNB_HOME"] = str(tmp_path / "home")
    return env


@pytest.fixture
def text_flow(tmp_path: Path) -> Path:
    path = tmp_path / "flows" / "hello.json"
    path.parent.mkdir(exist_ok=True)
    write_flow(path, make_flow({"out": "hello {who}"}, ["who"]))
    return path


@pytest.fixture
def image_flow(tmp_path: Path) -> Path:
    path = tmp_path / "flows" / "picture.json"
    path.parent.mkdir(exist_ok=True)
    write_flow(path, make_flow({"pic": "a picture of {who}"}, ["who"], images=("pic",)))
    return path


def python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_load_flow_takes_a_plugin_provider_by_name(env: dict[str, str], text_flow: Path) -> None:
    done = python(
        f"""
        import flownb
        from flownb.providers.registry import provider_names
        flow = flownb.load_flow({str(text_flow)!r}, provider="shout")
        print(provider_names())
        print(flow.run(who="owls")["out"])
        """,
        env,
    )
    assert done.returncode == 0, done.stderr
    names, out = done.stdout.splitlines()
    assert names == "['offline', 'openai', 'azure', 'anthropic', 'gemini', 'shout']"
    assert out == "HELLO OWLS"


def test_the_cli_offers_and_runs_a_plugin_provider(env: dict[str, str], text_flow: Path) -> None:
    helped = flownb_cli(["run", "--help"], env)
    assert "shout" in helped.stdout
    done = flownb_cli(["run", str(text_flow), "--provider", "shout", "--var", "who=owls"], env)
    assert done.returncode == 0, done.stderr
    assert "HELLO OWLS" in done.stdout


def test_without_the_package_the_name_is_refused_with_the_choices(
    env: dict[str, str], text_flow: Path, plugin_path: Path
) -> None:
    env["PYTHONPATH"] = env["PYTHONPATH"].replace(str(plugin_path), "")
    done = python(
        f"""
        import flownb
        flownb.load_flow({str(text_flow)!r}, provider="shout")
        """,
        env,
    )
    assert done.returncode != 0
    assert "unknown provider 'shout'; choose one of offline, openai" in done.stderr


def test_an_image_flow_on_a_provider_without_images_fails_the_same_locally_and_served(
    env: dict[str, str], image_flow: Path, tmp_path: Path
) -> None:
    local = python(
        f"""
        import flownb
        try:
            flownb.load_flow({str(image_flow)!r}, provider="shout")
        except flownb.ConfigError as exc:
            print(exc)
        """,
        env,
    )
    assert local.returncode == 0, local.stderr
    message = local.stdout.strip()
    assert message.startswith("provider 'shout' cannot generate images")
    assert "'pic'" in message

    key = create_key(env, "t")
    with serve(image_flow.parent, env, tmp_path / "logs", provider="shout") as served:
        resp = httpx.post(
            f"{served.url}/api/flows/run/picture",
            headers={"x-api-key": key},
            json={"variables": {"who": "owls"}},
            timeout=30,
        )
        logs = served.logs()
    body = resp.json()
    assert resp.status_code >= 400, body
    # Served, the answer names the flow only (the reason quotes the file's node names); the
    # server's log has the same reason as the local error.
    assert body["message"] == "flow 'picture' cannot be loaded; see the server log", body
    assert message in logs
