"""Faults: the loopback OpenAI-compatible server fails a share of calls (429, 500, hangs past the
timeout, dropped connections), at random and, for marked rows, always.

Every batch row must end either correct (checked against what the fake answers for its exact
prompt) or with a clear per-row error of the right kind; no row may go missing — through the
Python API, the DataFrame path and ``flownb serve --provider openai``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

import httpx
import pandas as pd
import pytest

import flownb
from flownb.testing.fake_openai import FakeOpenAI, echo, image_bytes
from tests.conftest import FLOWS
from tests.reliability.exposure import Exposure, record
from tests.reliability.procs import create_key, serve

pytestmark = pytest.mark.timeout(120)

ROWS = 80
FAKE_KEY = "sk-fake-faults-" + "Q7x" * 12
# Random faults on every call: about a fifth of first attempts fail. (Each 429 also halves the
# run's concurrency for a while, and each hang costs a timeout: shares kept modest for time.)
RANDOM_FAULTS = {"429": 0.05, "500": 0.07, "hang": 0.02, "drop": 0.06}
# Rows whose topic holds a marker get that fault on every call, whatever the retries.
MARKERS = {"429": "ALWAYS429", "500": "ALWAYS500", "hang": "ALWAYSHANG", "drop": "ALWAYSDROP"}
MARKED = {3: "429", 5: "500", 7: "hang", 9: "drop"}  # row index % 10 -> fault
EXPECTED_ERROR = {
    "429": flownb.RateLimited,
    "500": flownb.ProviderError,
    "hang": flownb.ProviderTimeout,
    "drop": flownb.ProviderError,
}
EXPECTED_CODE = {
    "429": "upstream_rate_limited",
    "500": "provider_error",
    "hang": "provider_timeout",
    "drop": "provider_error",
}


def _fault_of(i: int) -> str | None:
    # Hangs cost a timeout per attempt and 429s cut concurrency: mark fewer rows with them.
    fault = MARKED.get(i % 10)
    return None if fault in ("hang", "429") and i % 40 not in (3, 7) else fault


def _rows() -> list[dict[str, str]]:
    rows = []
    for i in range(ROWS):
        fault = _fault_of(i)
        marker = f" {MARKERS[fault]}" if fault else ""
        rows.append({"topic": f"topic {i}{marker} ü{{tone}}", "tone": f"tone-{i % 7}"})
    return rows


def _expected(row: dict[str, str]) -> dict[str, str]:
    """What the blog-intro flow yields for ``row`` through the fake: the text echo, and the
    fake's image for the image prompt (kept in flownb's media: compared by its bytes)."""
    topic, tone = row["topic"], row["tone"]
    return {
        "intro": echo(f"Write a {tone} two-sentence intro for a blog post about {topic}."),
        "header_image": f"A {tone} watercolour illustration of {topic}",
    }


def _matches(got: dict[str, str], row: dict[str, str]) -> bool:
    want = _expected(row)
    url = got.get("header_image", "")
    if url.startswith("file://"):
        data = Path(url2pathname(urlsplit(url).path)).read_bytes()
    else:  # the server's /media/NAME: the file in the home it serves (it may have stopped)
        data = (Path(os.environ["FLOWNB_HOME"]) / "media" / url.rsplit("/", 1)[-1]).read_bytes()
    return got.get("intro") == want["intro"] and data == image_bytes(want["header_image"])


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The faulty fake, and the environment pointing the openai provider at it."""
    with FakeOpenAI(
        latency=0.005, faults=RANDOM_FAULTS, fail_markers=MARKERS, retry_after="0", seed=7
    ) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
        monkeypatch.setenv("FLOWNB_TIMEOUT", "1")  # a loaded machine can stall a 429 past 0.3 s
        monkeypatch.setenv("FLOWNB_RETRIES", "3")
        monkeypatch.setenv("FLOWNB_CACHE", "0")  # every run pays: faults hit every run
        yield server


def _check_rows(
    rows: list[dict[str, str]], outcome: dict[int, dict[str, str] | BaseException]
) -> None:
    """Each row: correct outputs, or an error of the kind its marker forces (random faults may
    also end as errors after the retries, but only as provider errors with a message)."""
    assert sorted(outcome) == list(range(len(rows))), "rows went missing"
    wrong = []
    succeeded = 0
    for i, row in enumerate(rows):
        got = outcome[i]
        fault = _fault_of(i)
        if isinstance(got, BaseException):
            kind = EXPECTED_ERROR[fault] if fault else flownb.ProviderError
            if not isinstance(got, kind) or not str(got).strip():
                wrong.append(f"row {i}: expected {kind.__name__}, got {got!r}")
        elif fault is not None:
            wrong.append(f"row {i} ({fault} on every call) did not fail: {got}")
        elif not _matches(got, row):
            wrong.append(f"row {i}: {got} does not match {_expected(row)}")
        else:
            succeeded += 1
    assert not wrong, "\n".join(wrong[:10])
    unmarked = sum(1 for i in range(len(rows)) if _fault_of(i) is None)
    # Three retries make a random-fault failure rare (about 1 % of calls): most rows succeed.
    assert succeeded >= 0.9 * unmarked, f"only {succeeded} of {unmarked} unmarked rows succeeded"


def _check_batch_error(rows: list[dict[str, str]], err: flownb.BatchError) -> None:
    """Every row of a failed batch is in exactly one of ``results`` and ``errors``, and checks."""
    assert len(err.results) == ROWS
    outcome: dict[int, Any] = {}
    for i, res in enumerate(err.results):
        if res is not None:
            outcome[i] = dict(res)
    for i, exc in err.errors.items():
        assert i not in outcome, f"row {i} has both a result and an error"
        outcome[i] = exc
    _check_rows(rows, outcome)


def test_python_batch_rows_end_correct_or_with_their_error(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(FLOWS / "blog-intro.json", provider="openai", concurrency=8)
    rows = _rows()
    with pytest.raises(flownb.BatchError) as info:
        flow.run_batch(rows)
    _check_batch_error(rows, info.value)
    stats = fake.stats()
    assert all(stats["faults"][f] > 0 for f in RANDOM_FAULTS), stats  # every fault was served
    # The marked error messages say what happened, and never carry the key.
    for exc in info.value.errors.values():
        assert FAKE_KEY not in str(exc) and FAKE_KEY not in repr(exc)


def test_dataframe_rows_end_correct_or_with_an_error_cell(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(FLOWS / "blog-intro.json", provider="openai", concurrency=8)
    rows = _rows()
    df = pd.DataFrame(rows, index=[f"r{i}" for i in range(ROWS)])
    out = flow.run_dataframe(df, progress=False)
    assert list(out.index) == list(df.index), "rows lost or reordered"
    assert "error" in out.columns
    outcome: dict[int, Any] = {}
    for i, (_, line) in enumerate(out.iterrows()):
        error = line["error"]
        if isinstance(error, str) and error:
            # The error cell names the failure; map it back to the kind for the check.
            outcome[i] = _error_from_cell(error)
        else:
            outcome[i] = {"intro": line["intro"], "header_image": line["header_image"]}
    _check_rows(rows, outcome)


def _error_from_cell(text: str) -> BaseException:
    """Rebuild an exception of the kind an error cell describes (its error code, else its
    words), so the same per-row check applies; a cell that says nothing fails the check."""
    lowered = text.lower()
    if lowered.startswith("provider_timeout") or ("time" in lowered and "out" in lowered):
        return flownb.ProviderTimeout(text)
    if lowered.startswith("upstream_rate_limited") or "rate limit" in lowered:
        return flownb.RateLimited(text)
    if lowered.strip():
        return flownb.ProviderError(text)
    return RuntimeError("empty error cell")


def test_server_batch_names_every_failed_row_and_keeps_the_rest(
    fake: FakeOpenAI, tmp_path: Path, flownb_env: Path
) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "blog-intro.json").write_bytes((FLOWS / "blog-intro.json").read_bytes())
    env = dict(os.environ)
    key = create_key(env, "faults")
    rows = _rows()
    logs = tmp_path / "logs"
    bodies: list[str] = []
    with serve(flows, env, logs, provider="openai") as server:
        r = httpx.post(
            f"{server.url}/api/flows/run/blog-intro",
            json={"variables": rows},
            headers={"x-api-key": key},
            timeout=90,
        )
        bodies.append(r.text)
        # A single run that always fails is a plain error with its status.
        single = httpx.post(
            f"{server.url}/api/flows/run/blog-intro",
            json={"variables": rows[5]},  # ALWAYS500
            headers={"x-api-key": key},
            timeout=30,
        )
        bodies.append(single.text)
    record(Exposure("faults", {key, FAKE_KEY}, [flownb_env, logs], bodies))

    assert single.status_code == 502, single.text
    assert single.json()["code"] == "provider_error"

    assert r.status_code in (429, 502, 504), r.text[:500]
    data = r.json()
    assert data["code"] in EXPECTED_CODE.values()
    assert isinstance(data.get("results"), list) and len(data["results"]) == ROWS, r.text[:500]
    failed: dict[int, dict[str, Any]] = {}
    for item in data["errors"]:
        assert isinstance(item.get("index"), int), f"error item without an index: {item}"
        assert item.get("code") in EXPECTED_CODE.values() and item.get("message"), item
        failed[item["index"]] = item
    outcome: dict[int, Any] = {}
    kinds = {
        "upstream_rate_limited": flownb.RateLimited,
        "provider_timeout": flownb.ProviderTimeout,
    }
    for i, res in enumerate(data["results"]):
        if res is None or i in failed:
            assert i in failed, f"row {i} is null in results but named in no error"
            if res is not None:
                # A row where some nodes failed keeps the outputs of the others (issue 17): its
                # error names the failed nodes, its result holds what they did not feed.
                assert "failed:" in failed[i]["message"] and res, (i, failed[i], res)
                assert all(item["type"] == "output" for item in res)
            kind = kinds.get(failed[i]["code"], flownb.ProviderError)
            outcome[i] = kind(failed[i]["message"])
        else:
            assert all(item["type"] == "output" for item in res)
            outcome[i] = {item["name"]: item["output"] for item in res}
    _check_rows(rows, outcome)
    for i, item in failed.items():
        fault = _fault_of(i)
        if fault is not None:
            assert item["code"] == EXPECTED_CODE[fault], (i, item)


def test_remote_batch_through_the_client_ends_every_row(
    fake: FakeOpenAI, tmp_path: Path, flownb_env: Path
) -> None:
    """The Python client sends the batch in parallel chunks to a server whose provider fails;
    it retries what failed for a retryable reason and must still account for every row."""
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "blog-intro.json").write_bytes((FLOWS / "blog-intro.json").read_bytes())
    env = dict(os.environ)
    key = create_key(env, "faults-client")
    rows = _rows()
    logs = tmp_path / "logs"
    with serve(flows, env, logs, provider="openai") as server:
        client = flownb.Client(server.url, api_key=key, batch_size=16, max_retries=1, backoff=0.05)
        remote = client.flow("blog-intro")
        with pytest.raises(flownb.BatchError) as info:
            remote.run_batch(rows)
        client.close()
    record(Exposure("faults-client", {key, FAKE_KEY}, [flownb_env, logs], []))
    _check_batch_error(rows, info.value)
