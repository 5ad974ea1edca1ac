"""Fixtures shared by the OpenAI, cache and run-log tests: one loopback fake OpenAI server per test
module, reset before each test, with OPENAI_BASE_URL / OPENAI_API_KEY pointing at it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from flownb.providers.calls import retries_to
from flownb.testing.fake_config import FakeConfig
from flownb.testing.fake_openai import FakeOpenAI

KEY = "sk-test-SECRET-0123456789abcdef"


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeOpenAI]:
    """The fake server for the whole module."""
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def fake(fake_server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAI:
    """The module's fake server, reset to good behaviour, with the OpenAI env pointing at it."""
    # Every setting back to a new fake's first (one a test turned and did not turn back, such
    # as usage_details, would reach whichever test of the module runs next), then the ones
    # named here.
    fake_server.configure(**dataclasses.asdict(FakeConfig()))
    fake_server.configure(
        latency=0.0,
        faults={},
        fail_markers={},
        retry_after="0",
        seed=0,
        image_format="url",
        max_in_flight=None,
        rate_limit=None,
        rate_window=60.0,
        faults_first=False,
        replies={},
        answers={},
        stream_delay=0.0,
        stream_cut={},
        refuse_stream=False,
        cached_tokens=0,
        cache_write_tokens=0,
    )
    fake_server.reset()
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("FLOWNB_PROVIDER", "openai")
    return fake_server


class Retries:
    """How many provider calls were retried while a test ran (a dropped connection on a loaded
    machine is retried, as it should be, and reaches the fake twice)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


@pytest.fixture
def retried() -> Iterator[Retries]:
    """Count the retries of provider calls made during the test: a test that pins how many
    requests reached the fake adds these, so a legitimate retry is not read as a second call."""
    counter = Retries()
    with retries_to(counter):
        yield counter
