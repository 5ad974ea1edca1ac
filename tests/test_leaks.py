"""The leak check of tests/conftest.py (tests/leaks.py): what a test leaves changed is named and
put back; what is process-wide by design is put back silently; and, in a pytest run of its own,
a leaking test fails its teardown while the test after it sees the state as it was."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests import leaks
from tests.conftest import ROOT


def test_what_a_test_leaves_changed_is_named_and_put_back(tmp_path: Path) -> None:
    before = leaks.snapshot()
    cwd, path = os.getcwd(), list(sys.path)
    handler = signal.getsignal(signal.SIGUSR1)
    os.environ["FLOWNB_LEAK_TEST_KEY"] = "sk-secret-value"
    os.chdir(tmp_path)
    sys.path.append(str(tmp_path))
    signal.signal(signal.SIGUSR1, lambda *_: None)

    problems = leaks.check(before)

    text = "\n".join(problems)
    assert "os.environ: set ['FLOWNB_LEAK_TEST_KEY']" in problems
    assert "sk-secret-value" not in text  # names only: a value may be a key
    assert any(p.startswith("the working directory") for p in problems)
    assert any(p.startswith("sys.path") for p in problems)
    assert any(p.startswith("signal handlers: SIGUSR1") for p in problems)
    assert "FLOWNB_LEAK_TEST_KEY" not in os.environ
    assert (os.getcwd(), sys.path, signal.getsignal(signal.SIGUSR1)) == (cwd, path, handler)
    assert leaks.check(leaks.snapshot()) == []


def test_a_global_tracer_provider_is_put_back_without_failing() -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    before = leaks.snapshot()
    was = trace._TRACER_PROVIDER  # type: ignore[attr-defined]
    trace.set_tracer_provider(TracerProvider())
    assert trace._TRACER_PROVIDER is not was  # type: ignore[attr-defined]

    assert leaks.check(before) == []
    assert trace._TRACER_PROVIDER is was  # type: ignore[attr-defined]
    # And a later test may set its own again (set_tracer_provider allows one per process).
    trace.set_tracer_provider(TracerProvider())
    assert trace._TRACER_PROVIDER is not was  # type: ignore[attr-defined]
    assert leaks.check(before) == []


def test_a_thread_left_running_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leaks, "THREAD_GRACE", 0.01)
    release = threading.Event()
    before = leaks.snapshot()
    thread = threading.Thread(target=release.wait, name="left-behind")
    thread.start()
    try:
        assert leaks.check(before) == ["non-daemon threads still running: ['left-behind']"]
    finally:
        release.set()
        thread.join()
    assert leaks.check(before) == []


LEAKY = """
import os

import pytest


@pytest.fixture(scope="module")
def module_setting():
    os.environ["LEAK_FROM_MODULE"] = "1"  # never restored: the module's leak
    yield


def test_a_leaves_a_variable():
    os.environ["LEAK_FROM_TEST"] = "1"


def test_b_sees_it_put_back():
    assert "LEAK_FROM_TEST" not in os.environ


def test_c_uses_the_module_fixture(module_setting):
    assert os.environ["LEAK_FROM_MODULE"] == "1"


def test_d_sees_the_module_fixture_still(module_setting):
    assert os.environ["LEAK_FROM_MODULE"] == "1"
"""

AFTER = """
import os


def test_e_sees_neither():
    assert "LEAK_FROM_MODULE" not in os.environ and "LEAK_FROM_TEST" not in os.environ
"""


def test_in_a_pytest_run_the_leaking_test_fails_and_the_next_sees_none(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import (pytest_fixture_setup, pytest_runtest_call,\n"
        "    pytest_runtest_setup, pytest_runtest_teardown)\n"
    )
    (tmp_path / "test_1_leaky.py").write_text(LEAKY)
    (tmp_path / "test_2_after.py").write_text(AFTER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("LEAK_FROM_TEST", None)
    # Without the plugins this run has no use for: outside the repository nothing turns off
    # nbval's entry point (pyproject.toml's addopts and the root conftest do that here), and
    # loading it builds jsonschema's IRI parsers: 2.3 of the run's 2.8 CPU-s.
    unused = ["-p", "no:cacheprovider", "-p", "no:nbval", "-p", "no:schemathesis"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *unused, "-q", "-rA", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout
    assert done.returncode == 1, out
    assert "5 passed, 2 errors" in out, out
    assert "ERROR test_1_leaky.py::test_a_leaves_a_variable" in out
    assert "test_1_leaky.py::test_a_leaves_a_variable (the test) left global" in out
    assert "os.environ: set ['LEAK_FROM_TEST']" in out
    # The module's fixture is charged to the module, at its last test, not to its first test.
    assert "test_1_leaky.py (with its fixtures) left global" in out
    assert "os.environ: set ['LEAK_FROM_MODULE']" in out
    assert "ERROR test_1_leaky.py::test_d_sees_the_module_fixture_still" in out
