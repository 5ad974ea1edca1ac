# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""Every scorer through flownb.evaluate: pass/fail and float kinds, thresholds, reasons, missing
scores for failed rows, and model-graded scorers (judge, pick_best) against the loopback fake,
including answers that do not parse (NaN with the raw answer as the reason, never an error)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

import flownb
from flownb import scorers as S
from flownb.errors import ConfigError
from flownb.testing.fake_openai import FakeOpenAI, judge_reply, judge_score, scripted_reply
from tests.cli_inprocess import run_cli
from tests.conftest import make_flow, write_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)
from tests.serving import ScriptedProvider

ECHO = make_flow({"say": "{text}"}, ["text"])  # offline: the output is the text itself
DATA = pd.DataFrame(
    {
        "text": ['{"a": 1}', "hello world", "  42 ", "Hello"],
        "want": ["x", "hello world", "42", "hello"],
    },
    index=["r0", "r1", "r2", "r3"],
)


def scores(*scorers: S.Scorer, flow: dict = ECHO, data: pd.DataFrame = DATA) -> pd.DataFrame:
    offline = flownb.load_flow(flow, provider="offline")
    report = flownb.evaluate(offline, data, list(scorers), progress=False, log=False)
    assert isinstance(report, flownb.EvalReport)
    return report.results


def test_bool_scorers_each_have_a_stable_column_and_pass() -> None:
    res = scores(
        S.equals("say", S.col("want")),
        S.contains("say", "l"),
        S.contains("say", S.col("want"), case=False, name="has_want"),
        S.regex("say", r"^\s*\d+\s*$"),
        S.is_json("say"),
        S.length("say", min=5, max=11),
    )
    assert res["equals_say"].tolist() == [False, True, True, False]  # whitespace stripped
    assert res["contains_say"].tolist() == [False, True, False, True]
    assert res["has_want"].tolist() == [False, True, True, True]
    assert res["regex_say"].tolist() == [False, False, True, False]
    assert res["is_json_say"].tolist() == [True, False, True, False]  # "  42 " is JSON too
    assert res["length_say"].tolist() == [True, True, True, True]
    assert res["passed"].tolist() == [False, False, False, False]
    assert res["index"].tolist() == ["r0", "r1", "r2", "r3"]
    assert str(res["equals_say"].dtype) == "boolean"


def test_equals_strict_and_literal() -> None:
    res = scores(S.equals("say", "  42 ", strip=False))
    assert res["equals_say"].tolist() == [False, False, True, False]
    assert res["passed"].tolist() == [False, False, True, False]


def test_float_scorers_and_threshold() -> None:
    def shout(row: dict) -> float:
        return sum(c.isupper() for c in row["say"]) / max(len(row["say"]), 1)

    res = scores(S.length("say"), S.python(shout, threshold=0.15))
    assert res["length_say"].tolist() == [8.0, 11.0, 5.0, 5.0]
    assert res["shout"].tolist() == pytest.approx([0.0, 0.0, 0.0, 0.2])
    # Length has no threshold (no pass/fail); shout passes at 0.15 and above.
    assert res["passed"].tolist() == [False, False, False, True]
    summary = flownb.evaluate(
        flownb.load_flow(ECHO), DATA, [S.length("say")], progress=False, log=False
    ).summary
    assert summary.loc["flow", "length_say"] == pytest.approx(7.25)
    low, high = summary.loc["flow", ["length_say_low", "length_say_high"]]
    assert low < 7.25 < high


def test_python_scorer_reasons_and_bools() -> None:
    def long_enough(row: dict) -> tuple[bool, str]:
        n = len(row["say"])
        return n > 6, f"{n} characters"

    res = scores(S.python(long_enough), S.python(lambda r: r["text"] == r["want"], name="same"))
    assert res["long_enough"].tolist() == [True, True, False, False]
    assert res["long_enough_reason"].tolist() == [
        "8 characters",
        "11 characters",
        "5 characters",
        "5 characters",
    ]
    assert res["same"].tolist() == [False, True, False, False]
    assert "same_reason" not in res.columns
    assert res["passed"].tolist() == [False, True, False, False]


def test_failed_rows_score_missing_and_do_not_pass() -> None:
    scripted = flownb.load_flow(ECHO, provider=ScriptedProvider(), retries=0)
    data = pd.DataFrame({"text": ["fine", "FAIL502 here"], "want": ["fine", "x"]})
    report = flownb.evaluate(
        scripted,
        data,
        [S.equals("say", S.col("want")), S.length("say"), S.python(lambda r: 1.0, name="one")],
        progress=False,
        log=False,
    )
    res = report.results
    assert res["equals_say"].tolist()[0] is True and res["equals_say"].isna().tolist() == [
        False,
        True,
    ]
    assert math.isnan(res["length_say"][1]) and math.isnan(res["one"][1])
    assert res["passed"].tolist() == [True, False]
    assert res["error"][1].startswith("provider_error")
    assert report.summary.loc["flow", "errors"] == 1


def test_bad_scorers_are_refused_before_running() -> None:
    flow = flownb.load_flow(ECHO)
    with pytest.raises(ConfigError, match="'nope'"):
        flownb.evaluate(flow, DATA, [S.equals("nope", "x")], progress=False)
    with pytest.raises(ConfigError, match="two scorers are named"):
        flownb.evaluate(flow, DATA, [S.is_json("say"), S.is_json("say")], progress=False)
    with pytest.raises(ConfigError, match="bad pattern"):
        S.regex("say", "(")
    with pytest.raises(ConfigError, match="needs name="):
        S.python(lambda r: True)


JUDGE_OK = '{"score": {score}, "reason": "fake grade"}'


def test_judge_scores_with_reason_through_cache_and_log(fake: FakeOpenAI) -> None:
    fake.configure(replies={S.JUDGE_MARKER: JUDGE_OK})
    data = pd.DataFrame({"text": ["owls", "bees"], "want": ["owls", "x"]})
    judge = S.judge("say", "Is it about {want}? Output: {output}", provider="openai", threshold=0)
    res = scores(judge, data=data)  # the flow runs offline; the judge on the openai fake
    prompts = [b["messages"][-1]["content"] for b in fake.requests]
    assert len(prompts) == 2
    # The two rows' judge calls run at once: they reach the server in either order.
    assert sum("Is it about owls? Output: owls" in p for p in prompts) == 1
    assert sum("Is it about x? Output: bees" in p for p in prompts) == 1
    expected = [float(scripted_reply(p, {S.JUDGE_MARKER: "{score}"}) or "nan") for p in prompts]
    assert sorted(res["judge_say"].tolist()) == sorted(expected)
    assert res["judge_say_reason"].tolist() == ["fake grade", "fake grade"]
    assert res["passed"].all()
    fake.reset()
    again = scores(judge, data=data)
    assert fake.requests == []  # cached
    assert again["judge_say"].tolist() == res["judge_say"].tolist()
    logged = flownb.runs("judge:judge_say")
    assert len(logged) == 4 and logged["error"].isna().all()


@pytest.mark.parametrize(
    "reply",
    ["I think it is fine.", '{"score": "high"}', '{"score": 7, "reason": "out of range"}', "{"],
)
def test_judge_answer_that_does_not_parse_is_nan_with_raw_reason(
    fake: FakeOpenAI, reply: str
) -> None:
    fake.configure(replies={S.JUDGE_MARKER: reply})
    res = scores(S.judge("say", "Good?", provider="openai", threshold=0.5), data=DATA.iloc[:2])
    assert res["judge_say"].isna().all()
    assert res["judge_say_reason"].tolist() == [reply, reply]
    assert not res["passed"].any()


def test_judge_call_failure_is_nan_not_an_exception(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWNB_RETRIES", "0")
    fake.configure(fail_markers={"500": S.JUDGE_MARKER})
    res = scores(S.judge("say", "Good?", provider="openai"), data=DATA.iloc[:1])
    assert math.isnan(res["judge_say"][0])
    assert "judge call failed" in res["judge_say_reason"][0]


def test_pick_best_sees_every_variant_once_per_row(fake: FakeOpenAI) -> None:
    fake.configure(replies={S.PICK_MARKER: '{"best": 2, "reason": "second reads better"}'})
    base = flownb.load_flow(ECHO, provider="offline")
    variants = {"plain": base, "loud": base.with_prompts({"say": "{text}!"})}
    report = flownb.evaluate(
        variants, DATA, [S.pick_best("say", "Which is better?", provider="openai")], progress=False
    )
    prompts = [b["messages"][-1]["content"] for b in fake.requests]
    assert len(prompts) == len(DATA)  # one call per input row
    # The rows' calls run at once and reach the server in any order: the "hello world" row's.
    (hello,) = [p for p in prompts if "Candidate 1:\n<<<\nhello world\n>>>" in p]
    assert "Candidate 2:\n<<<\nhello world!\n>>>" in hello
    res = report.results
    assert res.loc[res["variant"] == "plain", "pick_best_say"].tolist() == [0.0] * 4
    assert res.loc[res["variant"] == "loud", "pick_best_say"].tolist() == [1.0] * 4
    assert report.summary.loc["loud", "pick_best_say"] == 1.0
    fake.configure(replies={S.PICK_MARKER: '{"best": 9}'})
    other = flownb.evaluate(
        variants,
        DATA.iloc[:1],
        [S.pick_best("say", "Which? v2", provider="openai")],
        progress=False,
    )
    assert other.results["pick_best_say"].isna().all()
    assert other.results["pick_best_say_reason"].tolist() == ['{"best": 9}'] * 2


# -- which model judges ---------------------------------------------------------------------------


def test_judge_without_provider_uses_the_graded_flows_provider_and_model(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The flows run on an OpenAI-compatible server while FLOWNB_PROVIDER is unset: the judge
    # must grade there too (it used to run offline and score NaN).
    monkeypatch.delenv("FLOWNB_PROVIDER")
    flow = flownb.load_flow(ECHO, provider="openai").with_params(model="flow-model")
    variants = {"plain": flow, "loud": flow.with_prompts({"say": "{text}!"})}
    report = flownb.evaluate(
        variants,
        DATA,
        [S.judge("say", "Good?", threshold=0.5), S.pick_best("say", "Which is better?")],
        progress=False,
    )
    assert isinstance(report, flownb.EvalReport)
    res = report.results
    # The fake's documented verdict: judge_score of the graded text, for every row.
    assert res["judge_say"].tolist() == [judge_score(t) for t in res["say"]]
    assert res["judge_say_reason"].str.startswith("fake verdict").all()
    assert res["pick_best_say"].notna().all()
    per_row = res.pivot(index="index", columns="variant", values="pick_best_say")
    assert (per_row.sum(axis=1) == 1.0).all()  # one winner per row
    judged = [b for b in fake.requests if S.JUDGE_MARKER in b["messages"][-1]["content"]]
    assert len(judged) == 8 and {b["model"] for b in judged} == {"flow-model"}


def test_judges_own_provider_and_model_come_first(fake: FakeOpenAI) -> None:
    from flownb.infra.media import MediaStore
    from flownb.providers.openai.provider import OpenAIProvider

    flow = flownb.load_flow(ECHO, provider="openai")
    with FakeOpenAI() as other:
        provider = OpenAIProvider(
            media=MediaStore(flownb.config.settings.get_settings().media_dir), base_url=other.url
        )
        judge = S.judge("say", "Good?", model="judge-model", provider=provider)
        flownb.evaluate(flow, DATA.iloc[:2], [judge], progress=False)
        assert len(other.requests) == 2
        assert {b["model"] for b in other.requests} == {"judge-model"}
    assert not any(S.JUDGE_MARKER in b["messages"][-1]["content"] for b in fake.requests)


@pytest.mark.parametrize(
    "scorer",
    [
        S.judge("say", "Good?"),
        S.pick_best("say", "Which?"),
        S.judge("say", "ok", provider="offline"),
    ],
    ids=["judge", "pick_best", "explicit-offline"],
)
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_judge_that_would_run_offline_is_refused_before_any_call(
    scorer: S.Scorer, dry_run: bool
) -> None:
    flow = flownb.load_flow(ECHO, provider="offline")
    variants = {"a": flow, "b": flow.with_prompts({"say": "{text}?"})}
    with pytest.raises(ConfigError) as info:
        flownb.evaluate(variants, DATA, [scorer], progress=False, dry_run=dry_run)
    message = str(info.value)
    assert "\n" not in message and scorer.name in message
    assert "provider=" in message and "model=" in message
    assert flownb.runs().empty  # nothing ran, not even the offline flows


def test_the_fake_answers_judge_prompts_with_a_verdict_from_the_graded_text() -> None:
    judge = S.judge("say", "Is it {want}?")
    row = {"say": "hello", "want": "nice"}
    verdict = json.loads(judge_reply(judge.prompt(row) or "") or "{}")
    assert verdict["score"] == judge_score("hello") and 0 <= verdict["score"] <= 1
    assert judge.parse(judge_reply(judge.prompt(row) or ""))[0] == judge_score("hello")
    assert judge_score("hello") != judge_score("hello!")  # derived from the text
    picker = S.pick_best("say", "Which?")
    outputs = ["alpha", "beta", "gamma", "delta"]
    best = max(range(4), key=lambda i: (judge_score(outputs[i]), -i)) + 1
    answer = judge_reply(picker.prompt_all(row, outputs) or "")
    assert json.loads(answer or "{}")["best"] == best
    assert judge_reply("Write an intro about owls.") is None  # other prompts: echoed as before


def test_scorers_module_lists_only_its_api() -> None:
    names = dir(S)
    assert not {"Any", "json", "re", "math", "annotations", "Template"} & set(names)
    assert set(S.__all__) <= set(names)
    assert all(hasattr(S, n) for n in S.__all__)
    assert {"judge", "pick_best", "col", "JUDGE_MARKER"} <= set(names)


def test_regex_that_backtracks_forever_scores_that_row_an_error_with_a_reason() -> None:
    # (a+)+$ over a long run of "a" then "b" backtracks catastrophically: without a bound the
    # evaluation never ends. The row times out; the others are graded as usual.
    data = pd.DataFrame({"text": ["a" * 100_000 + "b", "aaa", "xyz"]})
    res = scores(S.regex("say", r"(a+)+$"), data=data)
    assert res["regex_say"].isna().tolist() == [True, False, False]
    assert res["regex_say"].tolist()[1:] == [True, False]
    reason = res["regex_say_reason"][0]
    assert reason.startswith("error:") and "100,001 characters" in reason
    assert "within 1 s" in reason
    assert res["regex_say_reason"].isna().tolist() == [False, True, True]
    assert res["passed"].tolist() == [False, True, False]


def test_eval_toml_regex_is_bounded_too(tmp_path: Path) -> None:
    flow = write_flow(tmp_path / "echo.json", ECHO)
    pd.DataFrame({"text": ["a" * 100_000 + "b", "aaa"]}).to_csv(tmp_path / "rows.csv", index=False)
    (tmp_path / "eval.toml").write_text(
        '[[scorers]]\ntype = "regex"\noutput = "say"\npattern = "(a+)+$"\n', encoding="utf-8"
    )
    args = ["--data", "rows.csv", "--scorers", "eval.toml", "--no-progress", "--out", "r.json"]
    res = run_cli("eval", str(flow), *args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    results = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["results"]
    assert [r["regex_say"] for r in results] == [None, True]
    assert "did not finish matching" in results[0]["regex_say_reason"]
