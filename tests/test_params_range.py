# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""Model parameters that cannot be sent (issue 30): NaN, infinity, n=1000000, max_tokens=-5, a
temperature over the vendor's range. Each is refused when the flow is loaded or the variant
made, through every surface (flow file, with_params, eval TOML, the CLI), with one line naming
the node, the parameter and what it may be, and nothing reaches the provider."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import flownb
from flownb.errors import ConfigError, FlowFileError, FlownbError
from flownb.flowfile.params import param_problem
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)


def _flownb(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flownb", *args],
        capture_output=True, text=True, timeout=120, cwd=cwd, env=os.environ.copy(),
    )  # fmt: skip


NAN = float("nan")
INF = float("inf")

BAD: list[tuple[dict[str, Any], str]] = [
    ({"temperature": NAN}, "temperature must be a finite number from 0 to 2, got nan"),
    ({"temperature": INF}, "temperature must be a finite number from 0 to 2, got inf"),
    ({"temperature": -INF}, "temperature must be a finite number from 0 to 2"),
    ({"temperature": 2.5}, "temperature must be a finite number from 0 to 2, got 2.5"),
    ({"top_p": 1.5}, "top_p must be a finite number from 0 to 1"),
    ({"presence_penalty": -3}, "presence_penalty must be a finite number from -2 to 2"),
    ({"n": 1_000_000}, "n must be a whole number from 1 to 128, got 1000000"),
    ({"n": 0}, "n must be a whole number from 1 to 128, got 0"),
    ({"n": True}, "n must be a whole number from 1 to 128, got True"),
    ({"max_tokens": -5}, "max_tokens must be a whole number from 1 to 1,000,000, got -5"),
    ({"max_tokens": 2.5}, "max_tokens must be a whole number"),
    ({"seed": NAN}, "seed must be a whole number, got nan"),
    ({"logit_bias": {"50256": -INF}}, "logit_bias must be finite"),
]


def _flow(params: dict[str, Any]) -> dict[str, Any]:
    data = make_flow({"intro": "Intro about {topic}."}, ["topic"])
    data["nodes"][1]["data"]["modelParams"].update(params)
    return data


@pytest.mark.parametrize(("params", "message"), BAD)
def test_a_flow_file_with_a_parameter_that_cannot_be_sent_is_refused_at_load(
    fake: FakeOpenAI, tmp_path: Path, params: dict[str, Any], message: str
) -> None:
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(_flow(params)), encoding="utf-8")  # NaN/Infinity as Python writes
    with pytest.raises(FlowFileError) as caught:
        flownb.load_flow(path)
    text = str(caught.value)
    assert "\n" not in text and "node-intro" in text and message in text
    assert fake.requests == []


@pytest.mark.parametrize(("params", "message"), BAD)
def test_with_params_refuses_the_same_values_naming_the_node(
    fake: FakeOpenAI, params: dict[str, Any], message: str
) -> None:
    flow = flownb.load_flow(_flow({}))
    with pytest.raises(ConfigError) as caught:
        flow.with_params(**params)
    assert "\n" not in str(caught.value) and "node 'intro'" in str(caught.value)
    assert message in str(caught.value)
    with pytest.raises(ConfigError, match="node 'intro'"):
        flow.with_params({"intro": params})
    assert fake.requests == []


def test_good_parameters_pass_and_are_sent_as_given(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(_flow({"temperature": 0, "top_p": 1, "n": 1, "max_tokens": 50}))
    flow.with_params(temperature=2, seed=7, stop=["\n"], logit_bias={"1": -100}).run(topic="x")
    sent = fake.requests[-1]
    assert sent["temperature"] == 2 and sent["seed"] == 7 and sent["max_tokens"] == 50
    assert param_problem("temperature", None) is None and param_problem("custom", 1e9) is None


def test_an_eval_toml_with_nan_is_refused_in_one_line_before_anything_runs(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(_flow({})), encoding="utf-8")
    (tmp_path / "rows.csv").write_text("topic\nowls\n", encoding="utf-8")
    (tmp_path / "eval.toml").write_text(
        '[[scorers]]\ntype = "contains"\noutput = "intro"\ntext = "owls"\n'
        "[variants.hot]\nparams = { temperature = nan }\n",
        encoding="utf-8",
    )
    args = [str(flow), "--data", "rows.csv", "--scorers", "eval.toml", "--no-progress"]
    result = _flownb("eval", *args, cwd=tmp_path)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if "temperature" in line]
    assert len(lines) == 1 and "node 'intro'" in lines[0] and "from 0 to 2, got nan" in lines[0]
    assert fake.requests == []


def test_the_cli_run_refuses_a_flow_file_with_a_huge_n_in_one_line(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(_flow({"n": 1_000_000})), encoding="utf-8")
    result = _flownb("run", str(flow), "--var", "topic=x", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if "n must be" in line]
    assert len(lines) == 1 and "node-intro" in lines[0] and "from 1 to 128" in lines[0]
    assert fake.requests == []


def test_anthropic_narrows_temperature_to_its_own_range_at_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with pytest.raises(FlownbError, match=r"temperature 1.5 is outside Anthropic's 0 to 1"):
        flownb.load_flow(
            _flow({"temperature": 1.5, "model": "claude-haiku-4-5"}), provider="anthropic"
        )
