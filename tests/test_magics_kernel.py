"""The magics, display bundles and form in a real Jupyter kernel (ipykernel via jupyter_client):
what a notebook front end receives on the wire, and that failures reach it as errors."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_flow
from tests.kernels import execute, kernel_env, outputs, printed, running_kernel

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real kernel for this module, in a folder holding the sample flow and its own
    FLOWNB_HOME; yields a started, ready client."""
    work = tmp_path_factory.mktemp("kernel")
    flows = Path(__file__).resolve().parent.parent / "notebooks" / "flows"
    shutil.copy(flows / "blog-intro.json", work / "blog.json")
    with running_kernel(work, kernel_env(work)) as kc:
        yield kc


def test_load_ext_and_run_sends_markdown_and_png_bundles(kernel: Any) -> None:
    reply, _ = execute(kernel, "%load_ext flownb")
    assert reply["status"] == "ok"
    reply, messages = execute(kernel, "%flow run blog.json topic='sea glass' tone=$tone_var")
    assert reply["status"] == "error"  # $tone_var is not defined: a usage error
    [error] = outputs(messages, "error")
    assert error["traceback"] == ["UsageError: %flow: tone=: no Python variable named 'tone_var'"]
    reply, messages = execute(
        kernel, "tone_var = 'quietly amazed'\n%flow run blog.json topic='sea glass' tone=$tone_var"
    )
    assert reply["status"] == "ok"
    shown = [sorted(m["data"]) for m in outputs(messages, "display_data")]
    assert shown == [
        ["text/html", "text/plain"],
        ["text/html", "text/plain"],
        ["image/png", "text/plain"],
    ]
    intro = outputs(messages, "display_data")[0]["data"]["text/plain"]
    assert intro == (
        "intro:\nWrite a quietly amazed two-sentence intro for a blog post about sea glass."
    )


def test_failed_run_reaches_the_front_end_as_an_error(kernel: Any) -> None:
    execute(kernel, "%load_ext flownb")
    reply, messages = execute(kernel, "%flow run blog.json topic=alone")
    assert reply["status"] == "error"
    errors = outputs(messages, "error")
    assert errors and errors[0]["ename"] == "InputError"
    assert "missing variable 'tone'" in errors[0]["evalue"]


# A provider that fails every call, defined in the kernel: a run that fails at the provider.
_FAILING = """\
from flownb.errors import ProviderError
from flownb.providers.base import Provider
class Failing(Provider):
    name = 'failing'
    inline = True
    cacheable = False
    def generate_inline(self, call):
        raise ProviderError('the model is down (503)', status=503, provider='failing')
    async def generate(self, call):
        return self.generate_inline(call)
broken = flownb.load_flow('blog.json', provider=Failing())
"""


@pytest.mark.parametrize(
    ("line", "ename", "text"),
    [
        ("%flow run blog.json topic=alone", "InputError", "missing variable 'tone'"),
        ("%flow run missing.json topic=a", "FlowFileError", "missing.json: no such flow file"),
        ("%flow info broken.json", "FlowFileError", "broken.json: the flow file is not JSON"),
        ("%flow run blog.json topic=a tone=b --bogus", "FlowUsageError", "--bogus"),
        ("%flow batch blog.json --df nope.csv", "FlowUsageError", "no such file: nope.csv"),
        ("%flow run $broken topic=a tone=b", "ProviderError", "the model is down (503)"),
    ],
)
def test_magic_errors_are_one_line_and_fail_the_cell(
    kernel: Any, line: str, ename: str, text: str
) -> None:
    execute(kernel, "%load_ext flownb")
    reply, _ = execute(kernel, "import flownb\n" + _FAILING)
    assert reply["status"] == "ok"
    reply, messages = execute(kernel, "open('broken.json', 'w').write('{not json')\n" + line)
    # The cell fails as nbval sees it: an error reply and an `error` output.
    assert reply["status"] == "error"
    errors = outputs(messages, "error")
    assert len(errors) == 1 and errors[0]["ename"] == ename
    shown = "\n".join(errors[0]["traceback"]).strip().splitlines()
    assert len(shown) == 1, shown
    assert text in shown[0]
    streams = "".join(m["text"] for m in outputs(messages, "stream"))
    assert "Traceback" not in streams and "File " not in streams


def test_eval_help_in_the_kernel(kernel: Any) -> None:
    execute(kernel, "%load_ext flownb")
    reply, messages = execute(kernel, "%flow eval --help")
    assert reply["status"] == "ok"
    text = "".join(m["text"] for m in outputs(messages, "stream"))
    assert text.startswith("usage: %flow eval")
    for option in ("--df DF", "--scorers $S", "--min-pass X", "--concurrency N", "-o VAR"):
        assert option in text
    reply, messages = execute(kernel, "%flow?")
    assert reply["status"] == "ok"
    shown = json.dumps(reply.get("payload", []))
    assert "%flow eval FLOW..." in shown


def test_cell_magic_and_batch_in_the_kernel(kernel: Any) -> None:
    execute(kernel, "%load_ext flownb")
    reply, messages = execute(kernel, "%%flow run blog.json --var topic tone=dry -o r\nmoss\n")
    assert reply["status"] == "ok"
    reply, messages = execute(kernel, "print(r['intro'])")
    assert printed(messages) == ("Write a dry two-sentence intro for a blog post about moss.\n")
    code = (
        "import pandas as pd\n"
        "df = pd.DataFrame({'topic': ['owls', 'moss'], 'tone': ['dry', 'warm']})\n"
        "%flow batch blog.json --df df --no-progress -o out"
    )
    reply, messages = execute(kernel, code)
    assert reply["status"] == "ok"
    # -o: shown by the magic itself (display_data), not as the cell's value.
    assert not outputs(messages, "execute_result")
    result = outputs(messages, "display_data")[0]["data"]
    assert result["text/html"].count('<img src="data:image/png;base64,') == 2
    assert "owls" in result["text/plain"]


def test_form_in_the_kernel_sends_a_widget_and_runs_on_click(kernel: Any) -> None:
    execute(kernel, "import flownb\nform = flownb.load_flow('blog.json').form()")
    # No front end (as under nbconvert --execute): only the static copy, which a saved
    # notebook shows anywhere.
    reply, messages = execute(kernel, "form")
    assert reply["status"] == "ok"
    result = outputs(messages, "execute_result")[0]["data"]
    assert sorted(result) == ["text/html", "text/plain"]
    assert "tide pools" in result["text/html"] and "topic = 'tide pools'" in result["text/plain"]
    # A front end (JupyterLab's kernels have __session__): the widget, with the copy beside it.
    reply, messages = execute(kernel, "__session__ = 'forms.ipynb'\nform")
    assert reply["status"] == "ok"
    result = outputs(messages, "execute_result")[0]["data"]
    assert "application/vnd.jupyter.widget-view+json" in result and "text/html" in result
    execute(kernel, "del __session__")
    code = (
        "form.inputs['topic'].value = 'kelp'\n"
        "form.button.click()\n"
        "assert form.wait(30)\n"
        "print([sorted(o['data']) for o in form.output.outputs], form.status.value)"
    )
    reply, messages = execute(kernel, code)
    assert reply["status"] == "ok", messages
    text = printed(messages)
    assert "['image/png', 'text/plain']" in text and "Done in" in text


HELD = '''
import asyncio, json, threading
import flownb
from flownb.providers.base import Generation, Provider

class Held(Provider):
    """Answers at once, except prompts with HOLD: those wait until ``release`` is set."""
    name = "held"

    def __init__(self):
        self.release = threading.Event()
        self.prompts = []

    async def generate(self, call):
        self.prompts.append(call.prompt)
        while "HOLD" in call.prompt and not self.release.is_set():
            await asyncio.sleep(0.01)
        return Generation("said " + call.prompt)

held = Held()
flow = flownb.load_flow(json.loads(FLOW), provider=held)
form = flow.form()
form.inputs["text"].value = "kelp"
form.button.click()
'''


def _poll(kc: Any, expression: str, timeout: float = 60) -> None:
    """Evaluate ``expression`` in the kernel until it is true (or fail after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply, messages = execute(kc, f"print(bool({expression}))")
        assert reply["status"] == "ok", messages
        if printed(messages).strip() == "True":
            return
        time.sleep(0.1)
    pytest.fail(f"still false after {timeout:.0f} s in the kernel: {expression}")


def test_interrupt_kernel_stops_a_form_run_keeping_what_finished(kernel: Any) -> None:
    flow = make_flow({"first": "first {text}", "second": "second {text} HOLD"}, ["text"])
    reply, messages = execute(kernel, f"FLOW = {json.dumps(json.dumps(flow))}\n{HELD}")
    assert reply["status"] == "ok", messages
    # The first node answered (and is cached); the second is held. No cell runs now.
    _poll(kernel, "form.running and len(held.prompts) == 2")
    kernel.parent.interrupt_kernel()  # Jupyter's "Interrupt kernel": a SIGINT to the kernel
    _poll(kernel, "not form.running")
    code = "print(sorted(form.status._dom_classes), form.result, form.error, form.button.disabled)"
    reply, messages = execute(kernel, code)
    assert reply["status"] == "ok", messages
    # One print may reach the front end as several stream messages: joined, it is one line.
    shown = "".join(m["text"] for m in outputs(messages, "stream"))
    assert "'flownb-status-stopped'" in shown and shown.endswith("None None False\n"), shown
    # Run again: the finished call comes from the cache; only the stopped one is asked again.
    code = (
        "held.release.set()\nform.button.click()\nassert form.wait(30)\n"
        "print(sorted(form.result.cached), sorted(held.prompts))"
    )
    reply, messages = execute(kernel, code)
    assert reply["status"] == "ok", messages
    assert printed(messages) == (
        "['first'] ['first kelp', 'second kelp HOLD', 'second kelp HOLD']\n"
    )
    # With no form running, an idle kernel ignores the interrupt as before.
    kernel.parent.interrupt_kernel()
    reply, _ = execute(kernel, "print('still here')")
    assert reply["status"] == "ok"
