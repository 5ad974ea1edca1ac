"""The magics, display bundles and form in a real Jupyter kernel (ipykernel via jupyter_client):
what a notebook front end receives on the wire, and that failures reach it as errors."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import KernelManager

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real kernel for this module, in a folder holding the sample flow and its own
    FLOWNB_HOME; yields a started, ready client."""
    work = tmp_path_factory.mktemp("kernel")
    flows = Path(__file__).resolve().parent.parent / "notebooks" / "flows"
    shutil.copy(flows / "blog-intro.json", work / "blog.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWNB_", "OPENAI_"))}
    env["FLOWNB_HOME"] = str(work / "home")
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(work), env=env)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def execute(kc: Any, code: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run ``code``; return the execute reply's content and the iopub messages it caused."""
    messages: list[dict[str, Any]] = []
    reply = kc.execute_interactive(code, output_hook=messages.append, timeout=120)
    return reply["content"], messages


def outputs(messages: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m["content"] for m in messages if m["msg_type"] == kind]


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
        ["text/markdown", "text/plain"],
        ["text/markdown", "text/plain"],
        ["image/png", "text/plain"],
    ]
    intro = outputs(messages, "display_data")[0]["data"]["text/markdown"]
    assert intro == (
        "#### intro\n\nWrite a quietly amazed two-sentence intro for a blog post about sea glass."
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
    assert outputs(messages, "stream")[0]["text"] == (
        "Write a dry two-sentence intro for a blog post about moss.\n"
    )
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
    reply, messages = execute(kernel, "form")
    assert reply["status"] == "ok"
    result = outputs(messages, "execute_result")[0]["data"]
    assert "application/vnd.jupyter.widget-view+json" in result
    code = (
        "form.inputs['topic'].value = 'kelp'\n"
        "form.button.click()\n"
        "assert form.wait(30)\n"
        "print([sorted(o['data']) for o in form.output.outputs], form.status.value)"
    )
    reply, messages = execute(kernel, code)
    assert reply["status"] == "ok", messages
    text = outputs(messages, "stream")[0]["text"]
    assert "['image/png', 'text/plain']" in text and "Done in" in text
