"""Model names checked, warnings true (issue 28.5): flownb warns about the model actually sent,
once, at the user's line; a model the price table lacks is named with the closest known names;
``flownb eval`` prints each warning with one ``flownb:`` prefix."""
# ruff: noqa: F811

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import pandas as pd
import pytest

import flownb
from flownb.runtime.notes import closest_models, price_note
from flownb.testing.fake_anthropic import FakeAnthropic
from flownb.testing.fake_openai import FakeOpenAI
from tests.cli_inprocess import run_cli
from tests.conftest import make_flow, write_flow
from tests.vendor_fakes import (  # noqa: F401  (fixtures)
    anthropic_fake,
    anthropic_server,
    flow_with,
)


def _said(caught: list[warnings.WarningMessage], text: str) -> list[warnings.WarningMessage]:
    return [w for w in caught if text in str(w.message)]


def test_with_model_is_what_the_warning_talks_about(anthropic_fake: FakeAnthropic) -> None:
    flow = flow_with({"A": {"model": "gpt-4o-mini"}})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        base = flownb.load_flow(flow, provider="anthropic", cache=False)
        here = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        claude = base.with_model("claude-haiku-45")  # said here, where the model is chosen
        claude.run(topic="owls")
        claude.run(topic="bats")  # and not again
    assert anthropic_fake.requests[0]["model"] == "claude-haiku-45"
    assert _said(caught, "gpt-4o-mini") == []  # the loaded model is not what was sent
    (w,) = _said(caught, "claude-haiku-45")
    message = str(w.message)
    assert message.startswith("anthropic: node 'A': 'claude-haiku-45' is not in the price table")
    assert "'claude-haiku-4-5'" in message  # the closest known name
    assert (w.filename, w.lineno) == (__file__, here)  # the user's line, not flownb's


def test_the_replacement_is_said_when_the_loaded_model_is_sent(
    anthropic_fake: FakeAnthropic,
) -> None:
    flow = flownb.load_flow(flow_with({"A": {"model": "gpt-4o-mini"}}), provider="anthropic")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flow.run(topic="x")
    (w,) = _said(caught, "OpenAI model")
    assert "sending 'claude-sonnet-4-6'" in str(w.message)
    assert anthropic_fake.requests[0]["model"] == "claude-sonnet-4-6"


@pytest.fixture
def openai_fake(monkeypatch: pytest.MonkeyPatch) -> FakeOpenAI:
    with FakeOpenAI() as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-notes-0123456789")
        yield fake  # type: ignore[misc]


def test_a_misspelt_model_warns_once_naming_the_closest_names(openai_fake: FakeOpenAI) -> None:
    """Said where the model is chosen, and not again when it runs (or a variant of it does)."""
    flow = flownb.load_flow(make_flow({"A": "About {topic}."}, ["topic"]), provider="openai")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mimi = flow.with_model("gpt-4o-mimi")
        mimi.run_dataframe(pd.DataFrame({"topic": ["a", "b"]}), progress=False)
        mimi.with_system("Be brief.").run(topic="c")  # a variant on the same provider
        flow.with_model("gpt-4o-mini").run(topic="d")  # a known model: nothing to say
    (w,) = _said(caught, "gpt-4o-mimi")
    assert "not in the price table" in str(w.message) and "'gpt-4o-mini'" in str(w.message)
    assert [str(x.message) for x in caught if "price table" in str(x.message)] == [str(w.message)]


def test_price_note_and_closest_models() -> None:
    assert price_note("openai", "gpt-4o-mini", None) is None
    assert price_note("offline", "anything", None) is None  # no table: nothing to say
    assert price_note("openai", "mine", {"*": {"input": 0, "output": 0}}) is None
    assert price_note("openai", "my-model", {"my-model": {"input": 1, "output": 2}}) is None
    note = price_note("anthropic", "claude-haiku-45", None)
    assert note is not None and "claude-haiku-4-5" in note
    assert closest_models("gemini", "gemini-2.5-flahs")[0] == "gemini-2.5-flash"
    assert closest_models("plugin", "x") == []
    unknown = price_note("openai", "zzzzzzzz", None)
    assert unknown is not None and "did you mean" not in unknown


def test_flownb_eval_prints_the_warning_with_one_prefix(
    tmp_path: Path, anthropic_fake: FakeAnthropic
) -> None:
    data = flow_with({"A": {"model": "gpt-4o-mini"}})
    path = write_flow(tmp_path / "flow.json", data)
    pd.DataFrame({"topic": ["owls"]}).to_csv(tmp_path / "data.csv", index=False)
    (tmp_path / "scorers.toml").write_text(
        '[[scorers]]\ntype = "length"\noutput = "A"\n', encoding="utf-8"
    )
    done = run_cli(
        "eval", str(path), "--data", str(tmp_path / "data.csv"),
        "--scorers", str(tmp_path / "scorers.toml"), "--provider", "anthropic", "--no-progress",
        cwd=tmp_path, env={"FLOWNB_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if "OpenAI model" in x]
    assert line.startswith("flownb: anthropic: node 'A': 'gpt-4o-mini' is an OpenAI model")
    assert "flownb: flownb" not in done.stderr


def test_the_report_lists_only_the_parameters_sent(
    anthropic_fake: FakeAnthropic, tmp_path: Path
) -> None:
    lacking = {"model": "claude-haiku-4-5", "frequency_penalty": 0.5, "seed": 3, "top_p": 0.9}
    flow = flownb.load_flow(flow_with({"A": lacking}), provider="anthropic")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the drops are said; here only the report matters
        report = flownb.evaluate(
            {"claude": flow},
            pd.DataFrame({"topic": ["owls"]}),
            [flownb.scorers.length("A")],
            progress=False,
        )
    (node,) = report.context["variants"][0]["nodes"]
    assert node["params"] == {"model": "claude-haiku-4-5", "max_tokens": 1024, "top_p": 0.9}
    page = report.save(tmp_path / "r.html").read_text(encoding="utf-8")
    assert "frequency_penalty" not in page and "seed=" not in page
    assert "max_tokens=1024" in page
