# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""A flow loaded for a provider that calls the network is ready to run when ``load_flow``
returns: its HTTP client, tenacity and the whole price table are imported (while loading, not
while its first run's calls wait). Checked in fresh interpreters, where what this test session
imported cannot hide what loading left undone; an offline flow warms nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow, write_flow
from tests.openai_fake import KEY, fake, fake_server  # noqa: F401 (fixtures)

WATCHED = ("aiohttp", "tenacity", "genai_prices", "genai_prices.data")


def _loaded_after(code: str, env: dict[str, str]) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, **env},
    )
    return [m for m in json.loads(out.stdout.splitlines()[-1]) if m in WATCHED]


def test_a_flow_loaded_for_openai_has_its_client_and_the_whole_price_table(
    fake: FakeOpenAI, blog_flow_path: object
) -> None:
    code = f"import flownb\nflownb.load_flow({str(blog_flow_path)!r}, provider='openai')"
    env = {"OPENAI_BASE_URL": fake.url, "OPENAI_API_KEY": KEY}
    assert _loaded_after(code, env) == sorted(WATCHED)
    assert fake.stats()["requests"] == 0  # loading sends nothing


@pytest.mark.parametrize(
    ("provider", "env"),
    [
        ("anthropic", {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "ANTHROPIC_API_KEY": "k"}),
        ("gemini", {"GEMINI_BASE_URL": "http://127.0.0.1:9", "GEMINI_API_KEY": "k"}),
    ],
)
def test_a_flow_loaded_for_another_vendor_has_tenacity_and_the_price_table(
    tmp_path: Path, provider: str, env: dict[str, str]
) -> None:
    """Their SDKs are imported as the provider is made; what their first answers would wait
    for (the table) and their first retry (tenacity) is warmed up too. Loading sends nothing
    (nothing listens at that address)."""
    path = write_flow(tmp_path / "text.json", make_flow({"a": "about {topic}"}, ["topic"]))
    code = f"import flownb\nflownb.load_flow({str(path)!r}, provider={provider!r})"
    assert {"genai_prices.data", "tenacity"} <= set(_loaded_after(code, env))


def test_an_offline_flow_warms_nothing(blog_flow_path: object) -> None:
    code = f"import flownb\nflownb.load_flow({str(blog_flow_path)!r}, provider='offline')"
    assert _loaded_after(code, {}) == []


def test_loading_the_price_table_loads_its_data() -> None:
    """The table's data is a module of its own, which ``import genai_prices`` leaves to the
    first price asked for: ``load_table`` must import it too."""
    code = "from flownb.config import pricing\npricing.load_table()"
    assert _loaded_after(code, {}) == ["genai_prices", "genai_prices.data"]


@pytest.mark.parametrize("rows", [1, 3])
def test_the_fake_says_when_the_first_request_since_a_reset_arrived(
    fake: FakeOpenAI, rows: int
) -> None:
    import flownb

    assert fake.stats()["first_request_at"] is None
    flow = flownb.load_flow(make_flow({"a": "about {topic}"}, ["topic"]), cache=False)
    before = time.time()
    flow.run_batch([{"topic": str(i)} for i in range(rows)])
    arrived = fake.stats()["first_request_at"]
    assert arrived is not None and before <= arrived <= time.time()
    fake.reset()
    assert fake.stats()["first_request_at"] is None


def test_a_module_that_fails_to_import_is_left_to_its_user() -> None:
    """A warm-up never raises: the module's own import, where it is used, says what is wrong."""
    from flownb.providers.warmup import wait_warm_up, warm_up

    thread = warm_up(["flownb_no_such_module_for_warm_up"], table=False)
    assert thread is not None
    assert wait_warm_up() is True
    assert not thread.is_alive()
    with pytest.raises(ModuleNotFoundError):
        __import__("flownb_no_such_module_for_warm_up")
