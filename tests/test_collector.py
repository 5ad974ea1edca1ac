"""While a run's provider calls are made, the youngest generation of Python's cycle collector is
collected every YOUNG_RUN allocations (a call's objects die with it); once the last run open in
the process ends, the thresholds are what they were, unless someone changed them meanwhile."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

import flownb
from flownb.infra.collector import YOUNG_RUN, young
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow

USUAL = (650, 9, 11)  # thresholds no run sets, so that the test sees its own put back


@pytest.fixture
def thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(*USUAL)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def test_a_run_spaces_young_collections_and_puts_them_back(
    thresholds: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, int, int]] = []
    with FakeOpenAI(latency=0.01) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-collector")
        monkeypatch.setenv("FLOWNB_CACHE", "0")
        flow = flownb.load_flow(make_flow({"out": "{topic}"}, ["topic"]), provider="openai")
        flow.run_each(
            [{"topic": f"t{i}"} for i in range(20)],
            lambda i, result, exc: seen.append(gc.get_threshold()),
        )
    assert len(seen) == 20
    assert all(s == (YOUNG_RUN, *USUAL[1:]) for s in seen)  # as each element was reported
    assert gc.get_threshold() == USUAL


def test_overlapping_runs_put_the_thresholds_back_once_the_last_ends(thresholds: None) -> None:
    first_open, second_open, first_closed = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, tuple[int, int, int]] = {}

    def first() -> None:
        with young():
            first_open.set()
            second_open.wait(10)
        first_closed.set()

    thread = threading.Thread(target=first)
    thread.start()
    first_open.wait(10)
    with young():
        second_open.set()
        first_closed.wait(10)
        seen["after the first ended"] = gc.get_threshold()
    thread.join(10)
    assert seen["after the first ended"] == (YOUNG_RUN, *USUAL[1:])
    assert gc.get_threshold() == USUAL


def test_thresholds_set_by_someone_else_are_kept(thresholds: None) -> None:
    gc.set_threshold(YOUNG_RUN * 3, 9, 11)
    with young():
        assert gc.get_threshold() == (YOUNG_RUN * 3, 9, 11)  # rarer already: not made busier
    assert gc.get_threshold() == (YOUNG_RUN * 3, 9, 11)
    gc.set_threshold(*USUAL)
    with young():
        gc.set_threshold(1234, 5, 6)  # changed during the run: the change stands
    assert gc.get_threshold() == (1234, 5, 6)
