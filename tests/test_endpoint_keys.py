# ruff: noqa: F811  (pytest fixtures imported from test_endpoints are parameters here)
"""Keys that go where the user did not expect (issue 30): a vendor's default key variable goes
only to that vendor's hosts (or the base URL the environment pairs with it) unless an endpoint
names it; a ``flownb.toml`` that hides another's endpoint of the same name says so, once; and
``flownb endpoints`` / ``flownb.endpoints()`` list what is declared where. Calls go to loopback
fakes that record every request's headers."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

import flownb
from flownb.config.endpoints import Endpoint
from tests.cli_inprocess import run_cli
from tests.test_endpoints import KEY_A, KEY_B, auth, fakes, servers, text_flow  # noqa: F401

OPENAI_KEY = "sk-openai-default-555555"


def test_an_endpoint_naming_no_key_variable_gets_no_openai_key_on_another_host(
    fakes: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = fakes
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flow = flownb.load_flow(text_flow(), endpoint=Endpoint("proxy", "openai", base_url=a.url))
        flow.run(topic="owls")
        flownb.load_flow(text_flow(), endpoint=Endpoint("proxy", "openai", base_url=a.url))
    assert auth(a.received[-1]) != f"Bearer {OPENAI_KEY}"
    assert all(OPENAI_KEY not in str(r["headers"]) for r in a.received)
    said = [str(w.message) for w in caught if "OPENAI_API_KEY is not sent" in str(w.message)]
    assert len(said) == 1 and "'proxy'" in said[0] and 'api_key_env = "OPENAI_API_KEY"' in said[0]
    # Named, it is sent.
    named = Endpoint("proxy", "openai", base_url=a.url, api_key_env="OPENAI_API_KEY")
    flownb.load_flow(text_flow(), endpoint=named, cache=False).run(topic="owls")
    assert auth(a.received[-1]) == f"Bearer {OPENAI_KEY}"


def test_the_default_key_goes_to_the_vendors_hosts_and_the_environments_pair(
    fakes: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = fakes
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    assert Endpoint("o", "openai").key_env == "OPENAI_API_KEY"
    assert Endpoint("o", "openai", base_url="https://api.openai.com/v1").key() == OPENAI_KEY
    assert Endpoint("o", "openai", base_url="https://api.openai.com.evil.io/v1").key() is None
    assert Endpoint("o", "openai", base_url="https://evil.io/v1").key_env is None
    azure = Endpoint("az", "azure", base_url="https://mine.openai.azure.com")
    assert azure.key_env == "AZURE_OPENAI_API_KEY"
    assert Endpoint("c", "anthropic", base_url="https://api.anthropic.com").key_env
    # OPENAI_BASE_URL and OPENAI_API_KEY are a pair the user set together: the key goes there,
    # in copies and pickles too, but not to another base URL swapped in.
    monkeypatch.setenv("OPENAI_BASE_URL", a.url)
    flow = flownb.load_flow(text_flow(), provider="openai", cache=False)
    flow.run(topic="x")
    assert auth(a.received[-1]) == f"Bearer {OPENAI_KEY}"
    import pickle

    paired = flow.endpoint
    assert paired is not None and pickle.loads(pickle.dumps(paired)).key_env == "OPENAI_API_KEY"
    assert paired.replace(base_url="https://evil.io/v1").key_env is None


def _toml(folder: Path, name: str, url: str, key_env: str | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    key = f'api_key_env = "{key_env}"\n' if key_env else ""
    path = folder / "flownb.toml"
    path.write_text(f'[endpoints.{name}]\nprovider = "openai"\nbase_url = "{url}"\n{key}')
    return path


def test_a_working_folder_file_hiding_a_home_endpoint_warns_once_and_is_listed(
    fakes: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = fakes
    home = Path(os.environ["FLOWNB_HOME"])
    far = _toml(home, "team", b.url, "KEY_B")
    near = _toml(tmp_path, "team", a.url, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flownb.load_flow(text_flow(), endpoint="team", cache=False).run(topic="x")
        flownb.load_flow(text_flow(), endpoint="team", cache=False)
    said = [str(w.message) for w in caught if "hides the one of the same name" in str(w.message)]
    assert len(said) == 1 and str(near) in said[0] and str(far) in said[0]
    assert a.received and not b.received
    assert all(KEY_B not in str(r["headers"]) for r in a.received)

    table = flownb.endpoints()
    assert "endpoints" in flownb.__all__
    assert list(table.columns) == ["name", "provider", "host", "key_env", "file", "status"]
    rows = table.to_dict("records")
    assert rows == [
        {
            "name": "team",
            "provider": "openai",
            "host": a.url.split("//")[1].split("/")[0],
            "key_env": "-",
            "file": str(near),
            "status": "used",
        },
        {
            "name": "team",
            "provider": "openai",
            "host": b.url.split("//")[1].split("/")[0],
            "key_env": "KEY_B",
            "file": str(far),
            "status": f"hidden by {near}",
        },
    ]
    shown = run_cli("endpoints", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "key variable" in lines[0] and len(lines) == 3
    assert "KEY_B" in lines[2] and f"hidden by {near}" in lines[2]
