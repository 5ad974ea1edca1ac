"""The FlowForm widget, driven by clicking its Run button: inputs prefilled with defaults, the
work off the calling thread, the button disabled while running, outputs and errors in the form."""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from pathlib import Path
from typing import ClassVar

import ipywidgets as widgets
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.testing.globalipapp import start_ipython

import flownb
from flownb.errors import ProviderError
from flownb.providers.base import Call, Generation, Provider
from flownb.views.widgets import FlowForm, css_name
from tests.conftest import make_flow


@pytest.fixture(autouse=True)
def shell() -> InteractiveShell:
    """Output.append_display_data formats through the IPython shell: have a real one."""
    start_ipython()
    return InteractiveShell.instance()


class GateProvider(Provider):
    """Answers each call with its prompt once ``gate`` is set, so a test can hold a run open."""

    name: ClassVar[str] = "gate"
    cacheable: ClassVar[bool] = False

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.threads: set[str] = set()

    async def generate(self, call: Call) -> Generation:
        self.started.set()
        await asyncio.get_running_loop().run_in_executor(None, self.gate.wait, 60)
        return Generation(f"{call.kind}:{call.prompt}")


def _classes(w: widgets.DOMWidget) -> tuple[str, ...]:
    return tuple(w._dom_classes)


def test_a_labelled_input_per_variable_prefilled_with_defaults() -> None:
    long_default = "a default value that is certainly longer than sixty characters, yes"
    flow = flownb.load_flow(
        make_flow(
            {"out": "{short} {multi} {long} {c++ (lang)}"},
            ["short", "multi", "long", "c++ (lang)"],
            defaults={"short": "tide pools", "multi": "line one\nline two", "long": long_default},
        )
    )
    form = flow.form()
    assert isinstance(form, FlowForm) and "flownb-form" in _classes(form)
    assert list(form.inputs) == ["short", "multi", "long", "c++ (lang)"]
    kinds = {name: type(w).__name__ for name, w in form.inputs.items()}
    assert kinds == {"short": "Text", "multi": "Textarea", "long": "Textarea", "c++ (lang)": "Text"}
    assert [w.description for w in form.inputs.values()] == list(form.inputs)
    assert form.values == {
        "short": "tide pools",
        "multi": "line one\nline two",
        "long": long_default,
        "c++ (lang)": "",
    }
    assert "flownb-var-c-lang" in _classes(form.inputs["c++ (lang)"])
    assert css_name("topic") == "topic"
    assert all("flownb-input" in _classes(w) for w in form.inputs.values())
    assert "flownb-run" in _classes(form.button) and form.button.description == "Run"
    assert "flownb-status" in _classes(form.status) and "flownb-output" in _classes(form.output)
    assert "flownb-status-ready" in _classes(form.status)


def test_click_runs_with_typed_values_and_shows_text_and_image(blog_flow_path: Path) -> None:
    form = flownb.load_flow(blog_flow_path).form()
    form.inputs["topic"].value = "sea otters"
    form.button.click()
    assert form.wait(60)
    assert form.error is None
    assert (
        form.result["intro"]
        == "Write a playful two-sentence intro for a blog post about sea otters."
    )
    outputs = form.output.outputs
    assert [o["output_type"] for o in outputs] == ["display_data"] * 3
    assert outputs[0]["data"]["text/plain"].startswith("intro:\nWrite a playful")
    assert "<h4" in outputs[0]["data"]["text/html"] and "text/markdown" not in outputs[0]["data"]
    png = base64.b64decode(outputs[2]["data"]["image/png"])
    assert png.startswith(b"\x89PNG")
    assert png == Path(form.result["header_image"].removeprefix("file://")).read_bytes()
    assert "flownb-status-done" in _classes(form.status) and "Done in" in form.status.value
    assert not form.button.disabled


def test_button_disabled_while_running_and_work_runs_off_the_calling_thread() -> None:
    provider = GateProvider()
    form = flownb.load_flow(make_flow({"echo": "said {text}"}, ["text"]), provider=provider).form()
    form.inputs["text"].value = "hello"
    form.button.click()  # returns at once: the run waits on the gate in a worker thread
    assert provider.started.wait(60)
    assert form.running and form.button.disabled
    assert "flownb-status-running" in _classes(form.status)
    form.button.click()  # ignored while running
    provider.gate.set()
    assert form.wait(60)
    assert not form.button.disabled
    assert [o["data"]["text/plain"] for o in form.output.outputs] == ["echo:\ntext:said hello"]
    # Run again: the previous outputs are replaced, not appended to.
    form.button.click()
    assert form.wait(60)
    assert len(form.output.outputs) == 1


class RefusingProvider(Provider):
    """Refuses prompts containing "boom" with a 400 (not worth retrying); echoes the others."""

    name: ClassVar[str] = "refusing"
    cacheable: ClassVar[bool] = False

    async def generate(self, call: Call) -> Generation:
        if "boom" in call.prompt:
            raise ProviderError(f"model refused {call.prompt!r}", status=400)
        return Generation(f"{call.kind}:{call.prompt}")


def test_errors_are_shown_in_the_form(blog_flow_path: Path) -> None:
    flow = flownb.load_flow(blog_flow_path, provider=RefusingProvider())
    form = flow.form()
    form.inputs["topic"].value = "boom"
    form.button.click()
    assert form.wait(60)
    assert form.result is None and form.error is not None
    streams = [o for o in form.output.outputs if o["output_type"] == "stream"]
    assert streams and streams[0]["name"] == "stderr"
    assert "model refused" in streams[0]["text"]
    assert "flownb-status-error" in _classes(form.status) and "Failed" in form.status.value
    assert not form.button.disabled
    # The next good run clears the error.
    form.inputs["topic"].value = "calm"
    form.button.click()
    assert form.wait(60)
    assert form.error is None and "flownb-status-done" in _classes(form.status)
    assert "flownb-status-error" not in _classes(form.status)


class HeldProvider(Provider):
    """Answers at once, except prompts with HOLD: those wait until ``release`` is set."""

    name: ClassVar[str] = "held"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.prompts: list[str] = []

    async def generate(self, call: Call) -> Generation:
        self.prompts.append(call.prompt)
        while "HOLD" in call.prompt and not self.release.is_set():
            await asyncio.sleep(0.01)
        return Generation(f"said {call.prompt}")


def test_stop_button_stops_the_run_and_keeps_what_finished() -> None:
    provider = HeldProvider()
    flow = flownb.load_flow(
        make_flow({"first": "first {text}", "second": "second {text} HOLD"}, ["text"]),
        provider=provider,
    )
    form = flow.form()
    assert "flownb-stop" in _classes(form.stop_button) and form.stop_button.disabled
    form.inputs["text"].value = "kelp"
    form.button.click()
    deadline = time.monotonic() + 30
    while len(provider.prompts) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert form.running and not form.stop_button.disabled and form.button.disabled
    form.stop_button.click()
    assert form.wait(30)
    assert "flownb-status-stopped" in _classes(form.status) and "Stopped" in form.status.value
    assert form.result is None and form.error is None
    assert not form.button.disabled and form.stop_button.disabled
    # Run again: the call that finished comes from the cache, and the one in flight when Stop
    # was pressed (sent, so paid for) was let go on: it is not bought a second time.
    provider.release.set()
    form.button.click()
    assert form.wait(30)
    assert form.result is not None and form.result.cached == {"first", "second"}
    assert sorted(provider.prompts) == ["first kelp", "second kelp HOLD"]
    assert "flownb-status-done" in _classes(form.status)
    assert "flownb-status-stopped" not in _classes(form.status)
    form.stop()  # nothing running: nothing happens
    assert not form.running
