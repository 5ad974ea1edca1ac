"""Per-run channels (issue 39.4): a form's run on its worker thread and a cell's run at the same
time in one process each announce their slow retries, and count their retries, only into their
own bar or form, never into the other's."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.testing.globalipapp import start_ipython

import flownb
from flownb.providers import calls
from flownb.providers.calls import notices_to, retries_to
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow

pytestmark = pytest.mark.timeout(120)

FLOW = make_flow({"out": "Say {text}"}, ["text"])


@pytest.fixture(autouse=True)
def shell() -> InteractiveShell:
    """The form's outputs format through the IPython shell: have a real one."""
    start_ipython()
    return InteractiveShell.instance()


@pytest.fixture
def fakes() -> Iterator[tuple[FakeOpenAI, FakeOpenAI]]:
    # The form's endpoint refuses every call with a 429 and Retry-After 1 (whole seconds, as
    # OpenAI sends it); the cell's endpoint answers, once the test lets it.
    with (
        FakeOpenAI(fail_markers={"429": "loud"}, retry_after="1") as loud,
        FakeOpenAI(held="quiet") as quiet,
    ):
        yield loud, quiet


def _wait_for(condition: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_a_forms_run_and_a_cells_run_at_once_each_hear_only_their_own_retries(
    fakes: tuple[FakeOpenAI, FakeOpenAI],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    loud, quiet = fakes
    monkeypatch.setattr(calls, "NOTICE_AFTER", 0.5)  # a 1 s Retry-After is announced
    form_flow = flownb.load_flow(
        FLOW, provider="openai", base_url=loud.url, api_key="sk-form", retries=2, cache=False
    )
    cell_flow = flownb.load_flow(
        FLOW, provider="openai", base_url=quiet.url, api_key="sk-cell", retries=2, cache=False
    )
    form = form_flow.form()
    form.inputs["text"].value = "loud"
    statuses: list[str] = []
    form.status.observe(lambda change: statuses.append(str(change["new"])), names="value")

    def form_meanwhile() -> None:
        # Once the cell's call is at its endpoint (held there), the form runs to its end, then
        # the cell's call is answered: the form's whole run happens inside the cell's.
        _wait_for(lambda: len(quiet.requests) == 1, "the cell's request")
        form.button.click()
        assert form.wait(60)
        quiet.configure(held="")

    cell_notices: list[str] = []
    cell_retries: list[int] = []
    helper = threading.Thread(target=form_meanwhile)
    helper.start()
    with notices_to(cell_notices.append), retries_to(lambda: cell_retries.append(1)):
        result = cell_flow.run_batch([{"text": "quiet"}], progress=True)
    helper.join(60)
    assert result[0]["out"]

    # The form's run: three attempts, two retries, its slow retry said in the form.
    assert len(loud.requests) == 3
    assert form.error is not None and "429" in str(form.error)
    said = [s for s in statuses if "retrying in" in s]
    assert said and all("Running" in s for s in said), statuses
    # The cell's run heard none of it: no retry counted, no notice on its sink or its bar.
    assert cell_retries == [] and cell_notices == []
    assert "retrying" not in capfd.readouterr().err


def test_a_retry_counter_of_one_thread_does_not_count_another_threads_run(
    fakes: tuple[FakeOpenAI, FakeOpenAI],
) -> None:
    loud, quiet = fakes
    quiet.configure(held="")
    flow = flownb.load_flow(
        FLOW, provider="openai", base_url=loud.url, api_key="sk-a", retries=1, cache=False
    )
    other: list[int] = []
    own: list[int] = []
    failed: list[BaseException] = []

    def elsewhere() -> None:
        with retries_to(lambda: own.append(1)):
            try:
                flow.run(text="loud")
            except flownb.FlownbError as exc:
                failed.append(exc)

    with retries_to(lambda: other.append(1)):
        worker = threading.Thread(target=elsewhere)
        worker.start()
        worker.join(60)
    assert len(failed) == 1 and len(loud.requests) == 2
    assert own == [1] and other == []
