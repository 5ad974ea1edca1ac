"""Say who judged, and let the user choose (issue 28.3): a judge or pick_best on an endpoint of
its own (an ``Endpoint``, or a ``flownb.toml`` name, given as ``endpoint=`` or ``provider=``),
named with its model in ``report.judges``, the summary, the HTML report and ``flownb eval``,
which also say when the judge shares a vendor with a variant it grades. Three vendors' loopback
fakes answer the variants; a fourth endpoint answers the judge."""
# ruff: noqa: F811

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

import flownb
from flownb import scorers as S
from flownb.errors import ConfigError
from flownb.testing.fake_anthropic import FakeAnthropic
from flownb.testing.fake_gemini import FakeGemini
from flownb.testing.fake_openai import FakeOpenAI
from tests.cli_inprocess import run_cli
from tests.conftest import make_flow, write_flow
from tests.vendor_fakes import (  # noqa: F401  (fixtures)
    anthropic_fake,
    anthropic_server,
    gemini_fake,
    gemini_server,
)

JUDGE_KEY = "sk-judge-0123456789"
ROWS = pd.DataFrame({"topic": ["owls", "bees", "moths"]})


@pytest.fixture(scope="module")
def openai_servers() -> Iterator[tuple[FakeOpenAI, FakeOpenAI]]:
    with FakeOpenAI() as variant, FakeOpenAI() as judge:
        yield variant, judge


@pytest.fixture
def vendors(
    openai_servers: tuple[FakeOpenAI, FakeOpenAI],
    anthropic_fake: FakeAnthropic,
    gemini_fake: FakeGemini,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> tuple[FakeOpenAI, FakeOpenAI, FakeAnthropic, FakeGemini]:
    """The OpenAI fake the variant calls, the OpenAI fake only the judge's endpoint calls, and
    the Anthropic and Gemini fakes; the working folder a fresh one (no flownb.toml)."""
    for server in openai_servers:
        server.configure(latency=0.0, faults={}, fail_markers={}, replies={})
        server.reset()
    variant, judge = openai_servers
    monkeypatch.setenv("OPENAI_BASE_URL", variant.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-variant-0123456789")
    monkeypatch.setenv("JUDGE_KEY", JUDGE_KEY)
    monkeypatch.chdir(tmp_path)
    return variant, judge, anthropic_fake, gemini_fake


def _three_vendors() -> dict[str, flownb.LocalFlow]:
    """Three variants, one per vendor, each with a prompt of its own: the fakes echo, and a judge
    asked twice the same question is paid once."""

    def on(provider: str, model: str, prompt: str) -> flownb.LocalFlow:
        data = make_flow({"Intro": prompt}, ["topic"])
        return flownb.load_flow(data, provider=provider).with_model(model)

    return {
        "gpt": on("openai", "gpt-4o-mini", "About {topic}."),
        "claude": on("anthropic", "claude-haiku-4-5", "Tell me about {topic}."),
        "gemini": on("gemini", "gemini-2.5-flash", "Describe {topic}."),
    }


def _judge_endpoint(fake: FakeOpenAI) -> flownb.Endpoint:
    return flownb.Endpoint("referee", "openai", base_url=fake.url, api_key_env="JUDGE_KEY")


def test_a_judge_on_its_own_endpoint_is_named_everywhere_with_its_vendor_overlap(
    vendors: tuple[FakeOpenAI, FakeOpenAI, FakeAnthropic, FakeGemini], tmp_path: Path
) -> None:
    variant, judge, claude, gemini = vendors
    grader = S.judge(
        "Intro", "Is it about {topic}?", endpoint=_judge_endpoint(judge), model="gpt-4.1-mini"
    )
    report = flownb.evaluate(_three_vendors(), ROWS, [grader], progress=False)

    # Every judge call went to the judge's endpoint, with its model; the variants' fakes
    # answered only the variants.
    assert len(judge.requests) == 3 * len(ROWS)
    assert {b["model"] for b in judge.requests} == {"gpt-4.1-mini"}
    assert all(b["messages"][-1]["content"].startswith(S.JUDGE_MARKER) for b in judge.requests)
    assert len(variant.requests) == len(claude.requests) == len(gemini.requests) == len(ROWS)
    assert report.results["judge_Intro"].notna().all()

    judges = report.judges
    assert judges.loc["judge_Intro"].to_dict() == {
        "endpoint": "referee",
        "model": "gpt-4.1-mini",
        "vendor": "OpenAI",
        "same_vendor": "gpt",
    }
    summary = report.summary
    assert set(summary["judge_Intro_judged_by"]) == {"referee · gpt-4.1-mini"}
    assert summary["judge_Intro_same_vendor"].to_dict() == {
        "gpt": True,
        "claude": False,
        "gemini": False,
    }
    page = report.save(tmp_path / "report.html").read_text(encoding="utf-8")
    assert "referee" in page and "gpt-4.1-mini" in page
    assert "self-preference" in page and "the same vendor as variant gpt" in page
    # Kept in the run log: a report read back names its judges alike.
    again = flownb.load_report(report.id)
    assert again.judges.equals(judges)
    assert again.summary["judge_Intro_judged_by"].tolist() == ["referee · gpt-4.1-mini"] * 3


def test_a_judge_given_an_endpoint_as_provider_is_not_refused_as_offline(
    vendors: tuple[FakeOpenAI, FakeOpenAI, FakeAnthropic, FakeGemini],
) -> None:
    _, judge, _, _ = vendors
    # The variant runs offline: a judge borrowing its provider would be refused.
    offline = flownb.load_flow(
        make_flow({"Intro": "About {topic}."}, ["topic"]), provider="offline"
    )
    grader = S.judge("Intro", "Good?", provider=_judge_endpoint(judge), model="gpt-4.1-mini")
    report = flownb.evaluate({"plain": offline}, ROWS, [grader], progress=False)
    assert len(judge.requests) == len(ROWS)
    assert report.judges.loc["judge_Intro", "endpoint"] == "referee"
    assert report.judges.loc["judge_Intro", "same_vendor"] == ""  # offline is no vendor


def test_an_endpoint_name_from_flownb_toml_as_endpoint_or_provider(
    vendors: tuple[FakeOpenAI, FakeOpenAI, FakeAnthropic, FakeGemini], tmp_path: Path
) -> None:
    _, _, _, gemini = vendors
    (tmp_path / "flownb.toml").write_text(
        f'[endpoints.ge]\nprovider = "gemini"\nbase_url = "{gemini.url}"\n'
        'api_key_env = "GEMINI_API_KEY"\n',
        encoding="utf-8",
    )
    flows = _three_vendors()
    by_name = S.judge("Intro", "Good?", provider="ge", name="by_provider")
    by_endpoint = S.pick_best("Intro", "Which is best?", endpoint="ge", model="gemini-2.5-pro")
    report = flownb.evaluate(flows, ROWS, [by_name, by_endpoint], progress=False)
    judges = report.judges
    assert judges.loc["by_provider"].to_dict() == {
        "endpoint": "ge",
        "model": "gemini-2.5-flash",  # the provider's default: not the first variant's model
        "vendor": "Google",
        "same_vendor": "gemini",
    }
    assert judges.loc["pick_best_Intro", ["endpoint", "model"]].tolist() == ["ge", "gemini-2.5-pro"]
    texts = [b["contents"][0]["parts"][0]["text"] for b in gemini.requests]
    assert len([t for t in texts if t.startswith(S.JUDGE_MARKER)]) == 3 * len(ROWS)
    assert len([t for t in texts if t.startswith(S.PICK_MARKER)]) == len(ROWS)


def test_who_judges_is_checked_before_any_call(
    vendors: tuple[FakeOpenAI, FakeOpenAI, FakeAnthropic, FakeGemini],
) -> None:
    _, judge, _, _ = vendors
    with pytest.raises(ConfigError, match="both say where its calls go"):
        S.judge("Intro", "Good?", provider="openai", endpoint=_judge_endpoint(judge))
    nowhere = S.judge("Intro", "Good?", provider="nowhere")
    with pytest.raises(ConfigError, match=r"'nowhere' is neither a provider \(offline, openai"):
        flownb.evaluate(_three_vendors(), ROWS, [nowhere], progress=False)
    assert judge.requests == []


def test_flownb_eval_takes_a_judge_endpoint_from_the_scorers_file_and_names_it(
    vendors: tuple[FakeOpenAI, FakeOpenAI, FakeAnthropic, FakeGemini], tmp_path: Path
) -> None:
    _, judge, claude, _ = vendors
    (tmp_path / "flownb.toml").write_text(
        f'[endpoints.referee]\nprovider = "openai"\nbase_url = "{judge.url}"\n'
        'api_key_env = "JUDGE_KEY"\n',
        encoding="utf-8",
    )
    data = make_flow({"Intro": "About {topic}."}, ["topic"])
    data["nodes"][1]["data"]["modelParams"] = {"model": "gpt-4o-mini"}
    write_flow(tmp_path / "flow.json", data)
    ROWS.to_csv(tmp_path / "rows.csv", index=False)
    (tmp_path / "eval.toml").write_text(
        '[[scorers]]\ntype = "judge"\noutput = "Intro"\nrubric = "Good?"\n'
        'endpoint = "referee"\nmodel = "gpt-4.1-mini"\n'
        '[variants.claude]\nendpoint = "claude-ep"\nmodel = "claude-haiku-4-5"\n'
        'prompts = { Intro = "Tell me about {topic}." }\n',
        encoding="utf-8",
    )
    with (tmp_path / "flownb.toml").open("a", encoding="utf-8") as toml:
        toml.write(
            f'[endpoints.claude-ep]\nprovider = "anthropic"\nbase_url = "{claude.url}"\n'
            'api_key_env = "ANTHROPIC_API_KEY"\n'
        )
    args = ["flow.json", "--data", "rows.csv", "--scorers", "eval.toml", "--no-progress"]
    done = run_cli(
        "eval",
        *args,
        "--provider",
        "openai",
        cwd=tmp_path,
        env={"FLOWNB_HOME": str(tmp_path / "home")},
    )
    assert done.returncode == 0, done.stderr
    said = "judge 'judge_Intro': endpoint referee, model gpt-4.1-mini"
    assert f"flownb: {said}; the same vendor (OpenAI) as variant 'flow'" in done.stderr
    assert said in done.stdout and "self-preference" in done.stdout
    assert len(judge.requests) == 2 * len(ROWS)


def test_flow_eval_magic_takes_a_judge_endpoint_and_shows_who_judged(
    vendors: tuple[FakeOpenAI, FakeOpenAI, FakeAnthropic, FakeGemini], tmp_path: Path
) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.testing.globalipapp import start_ipython

    _, judge, _, _ = vendors
    (tmp_path / "flownb.toml").write_text(
        f'[endpoints.referee]\nprovider = "openai"\nbase_url = "{judge.url}"\n'
        'api_key_env = "JUDGE_KEY"\n',
        encoding="utf-8",
    )
    (tmp_path / "judges.toml").write_text(
        '[[scorers]]\ntype = "pick_best"\noutput = "Intro"\nrubric = "Which?"\n'
        'endpoint = "referee"\nmodel = "gpt-4.1-mini"\n',
        encoding="utf-8",
    )
    start_ipython()
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "flownb")
    try:
        ip.user_ns.update(variants=_three_vendors(), rows=ROWS)
        report = ip.run_line_magic(
            "flow", "eval $variants --df $rows --scorers judges.toml --no-progress"
        )
    finally:
        ip.run_line_magic("unload_ext", "flownb")
        for name in ("variants", "rows"):
            ip.user_ns.pop(name, None)
    assert len(judge.requests) == len(ROWS)  # one pick per row, on the judge's endpoint
    shown = report._repr_html_()
    assert "referee" in shown and "gpt-4.1-mini" in shown
    assert "the same vendor as variant gpt" in shown
