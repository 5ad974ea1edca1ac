# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""report.to_mlflow against a local MLflow file store, read back with MLflow's own API."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import flownb
from flownb import scorers as S
from flownb.errors import ConfigError
from flownb.evaluation.html.page import page_html
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(180)

FLOW = make_flow({"intro": "Intro about {topic}."}, ["topic"])

# MLflow, imported when this module's first test starts rather than at collection: every xdist
# worker collects this module, and importing MLflow costs about a second of CPU, paid then by the
# one worker that runs it.
mlflow: Any = None


@pytest.fixture(scope="module", autouse=True)
def _mlflow_module() -> None:
    """Import MLflow for this module's tests (skipping them when it is not installed)."""
    global mlflow
    mlflow = pytest.importorskip("mlflow")


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A file store in tmp_path as MLflow's tracking URI (MLflow 3 asks for the opt-in)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    previous = mlflow.get_tracking_uri()
    # set_tracking_uri also writes MLFLOW_TRACKING_URI (for subprocesses), and setting the
    # previous URI back leaves it written: monkeypatch takes the variable back off.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    try:
        yield uri
    finally:
        mlflow.set_tracking_uri(previous)


def test_each_variant_is_an_mlflow_run_with_params_metrics_and_artifacts(
    fake: FakeOpenAI, store: str, tmp_path: Path
) -> None:
    base = flownb.load_flow(FLOW).with_params(model="gpt-small")
    variants = {"base": base, "warm": base.with_params(temperature=0.9)}
    data = pd.DataFrame({"topic": ["a", "b", "c"]})
    report = flownb.evaluate(
        variants, data, [S.contains("intro", "a"), S.length("intro")], progress=False
    )
    assert isinstance(report, flownb.EvalReport)
    runs = report.to_mlflow("flownb-test")
    assert set(runs) == {"base", "warm"}
    found = mlflow.search_runs(experiment_names=["flownb-test"])
    assert sorted(found["tags.mlflow.runName"]) == ["base", "warm"]
    warm = found[found["tags.mlflow.runName"] == "warm"].iloc[0]
    assert warm["params.flownb.evaluation"] == report.id
    assert warm["params.provider"] == "openai" and warm["params.model"] == "gpt-small"
    assert warm["params.intro.temperature"] == "0.9"
    assert warm["params.prompt.intro"] == "Intro about {topic}."
    assert warm["params.endpoint"].startswith("http://127.0.0.1:")
    summary = report.summary.loc["warm"]
    assert warm["metrics.contains_intro"] == pytest.approx(summary["contains_intro"])
    assert warm["metrics.pass_rate"] == pytest.approx(summary["pass_rate"])
    assert warm["metrics.length_intro"] == pytest.approx(summary["length_intro"])
    assert warm["metrics.total_tokens"] == pytest.approx(summary["total_tokens"])
    client = mlflow.MlflowClient()
    names = {a.path for a in client.list_artifacts(runs["warm"])}
    assert names == {"results.csv", "prompts.json", "report.html"}
    csv = Path(client.download_artifacts(runs["warm"], "results.csv", str(tmp_path)))
    logged = pd.read_csv(csv)
    assert logged["variant"].unique().tolist() == ["warm"] and len(logged) == 3
    # A report read back from the run log knows its set-up too, and logs the same parameters.
    again = flownb.load_report(report.id)
    assert again.variant_params == report.variant_params
    rerun = again.to_mlflow("flownb-again")
    back = client.get_run(rerun["warm"]).data.params
    assert back["model"] == "gpt-small" and back["intro.temperature"] == "0.9"
    html = Path(client.download_artifacts(runs["base"], "report.html", str(tmp_path)))
    # The whole report, one file (the embedded plot aside: matplotlib's SVG ids differ per draw).
    plot = re.compile(r"data:image/svg\+xml;base64,[A-Za-z0-9+/=]+")
    assert plot.sub("PLOT", html.read_text(encoding="utf-8")) == plot.sub("PLOT", page_html(report))


def test_without_mlflow_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    flow = flownb.load_flow(FLOW, provider="offline")
    report = flownb.evaluate(flow, pd.DataFrame({"topic": ["a"]}), progress=False, log=False)
    assert isinstance(report, flownb.EvalReport)
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(ConfigError, match=r"pip install flownb\[mlflow\]"):
        report.to_mlflow()


def test_a_store_mlflow_refuses_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    flow = flownb.load_flow(FLOW, provider="offline")
    report = flownb.evaluate(flow, pd.DataFrame({"topic": ["a"]}), progress=False, log=False)
    assert isinstance(report, flownb.EvalReport)
    previous = mlflow.get_tracking_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "refused").as_uri())  # as in store()
    mlflow.set_tracking_uri((tmp_path / "refused").as_uri())
    try:
        with pytest.raises(ConfigError, match="MLflow could not log") as info:
            report.to_mlflow("x")
    finally:
        mlflow.set_tracking_uri(previous)
    assert "\n" not in str(info.value)


_DEFAULT_STORE = """
import json
import mlflow
import pandas as pd
import flownb

flow = flownb.load_flow(json.loads(open("flow.json").read()), provider="offline")
report = flownb.evaluate(flow, pd.DataFrame({"topic": ["a", "b"]}), progress=False)
runs = report.to_mlflow("flownb-default")
found = mlflow.search_runs(experiment_names=["flownb-default"])
print(json.dumps({"uri": mlflow.get_tracking_uri(), "runs": sorted(runs.values()),
                  "found": sorted(found["run_id"])}))
"""


def test_to_mlflow_works_with_mlflows_default_store_and_no_setting(tmp_path: Path) -> None:
    """What ``pip install flownb[mlflow]`` gives a user who sets nothing: MLflow 3's default
    store (sqlite:///mlflow.db in the working folder) opens, and the runs are read back."""
    import json
    import os
    import subprocess

    (tmp_path / "flow.json").write_text(json.dumps(FLOW), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["FLOWNB_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        [sys.executable, "-c", _DEFAULT_STORE],
        capture_output=True,
        text=True,
        timeout=170,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["uri"].startswith("sqlite:") and said["uri"].endswith("mlflow.db")
    assert (tmp_path / "mlflow.db").is_file()
    assert said["runs"] == said["found"] and len(said["runs"]) == 1
