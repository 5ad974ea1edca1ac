"""The ``%flow`` magics in a real IPython shell (``InteractiveShell``): parsing, ``$name``
values, cell bodies, DataFrame batches, flow caching, one-line usage errors, failures raising."""

from __future__ import annotations

import json
import os
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import flownb
from flownb.errors import FlowFileError, InputError
from flownb.notebook.magics import find_api_key
from flownb.show.display import output_bundles
from flownb.views.widgets import FlowForm
from tests.conftest import make_flow, write_flow


@pytest.fixture
def ip(tmp_path: Path, blog_flow_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A real IPython shell with ``%load_ext flownb``, working in a folder holding the flows."""
    # Imported here, not at collection: every xdist worker collects this module (and the ones
    # importing this fixture), and IPython's test application costs about 0.4 CPU-s to import,
    # paid then only by a worker that runs a test asking for the shell.
    from IPython.testing.globalipapp import start_ipython

    start_ipython()  # once per process; later calls return None
    shell = InteractiveShell.instance()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "blog.json").write_text(blog_flow_path.read_text(encoding="utf-8"))
    write_flow(tmp_path / "one.json", make_flow({"echo": "said: {text}"}, ["text"]))
    shell.run_line_magic("load_ext", "flownb")
    try:
        yield shell
    finally:
        shell.run_line_magic("unload_ext", "flownb")
        for name in ("res", "out", "t", "df", "f", "n", "lst"):
            shell.user_ns.pop(name, None)


def cell(ip: Any, source: str) -> Any:
    """Run ``source`` as a cell; return its value, re-raising what the cell raised."""
    result = ip.run_cell(source, store_history=False)
    if result.error_before_exec is not None:
        raise result.error_before_exec
    if result.error_in_exec is not None:
        raise result.error_in_exec
    return result.result


def magic(ip: Any, line: str, body: str | None = None) -> Any:
    """Call the flow magic directly (raises its exceptions, unlike run_cell)."""
    if body is None:
        return ip.run_line_magic("flow", line)
    return ip.run_cell_magic("flow", line, body)


def test_load_ext_flownb_registers_both_magics(ip: Any) -> None:
    assert "flow" in ip.magics_manager.magics["line"]
    assert "flow" in ip.magics_manager.magics["cell"]
    ip.run_line_magic("unload_ext", "flownb")
    assert "flow" not in ip.magics_manager.magics["line"]
    ip.run_line_magic("load_ext", "flownb")


def test_run_with_quoted_values_and_out_variable(ip: Any) -> None:
    with capture_output() as captured:
        assert magic(ip, "run blog.json topic='tide pools' tone=\"very dry\" -o res") is None
    res = ip.user_ns["res"]
    assert len(captured.outputs) == len(list(output_bundles(res)))  # shown once, by the magic
    assert res["intro"] == "Write a very dry two-sentence intro for a blog post about tide pools."
    assert res["header_image"].startswith("file://")


def test_dollar_name_passes_the_python_value_verbatim(ip: Any) -> None:
    ip.user_ns["t"] = 'rock "pools" with spaces & $dollars'
    ip.user_ns["n"] = 3
    res = cell(ip, "%flow run blog.json topic=$t tone=$n")
    assert res["intro"] == (
        'Write a 3 two-sentence intro for a blog post about rock "pools" with spaces & $dollars.'
    )
    res = cell(ip, "%flow run blog.json topic=$$t 'tone=x $n y'")
    assert res["intro"] == "Write a x 3 y two-sentence intro for a blog post about $t."


def test_cli_style_var_pairs_work_too(ip: Any) -> None:
    res = magic(ip, "run blog.json --var topic=owls --var 'tone=very dry'")
    assert res["intro"] == "Write a very dry two-sentence intro for a blog post about owls."
    res = magic(ip, "run blog.json --var topic --var tone=wry", "moss")
    assert res["intro"] == "Write a wry two-sentence intro for a blog post about moss."
    with pytest.raises(UsageError, match="give --var once"):
        magic(ip, "run blog.json --var topic --var tone", "moss")


def test_dollar_name_of_a_flow_object(ip: Any, blog_flow_path: Path) -> None:
    ip.user_ns["f"] = flownb.load_flow(blog_flow_path)
    res = cell(ip, "%flow run $f topic=a tone=b")
    assert res["intro"].endswith("about a.")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("run blog.json topic=a tone", "expected name=value, got 'tone'"),
        ("run blog.json topic=$nothing tone=b", "no Python variable named 'nothing'"),
        ("run blog.json topic=$lst tone=b", "got a list"),
        ("run blog.json topic='unclosed", "cannot split the line"),
        ("walk blog.json", "unknown command 'walk'"),
        ("run blog.json topic=a tone=b -o 1x", "Python variable name"),
        ("run blog.json topic=a topic=b", "given twice"),
        ("batch blog.json", "the following arguments are required: --df"),
        ("batch blog.json --df lst", "is a list, not a DataFrame"),
        ("batch blog.json --df nope.csv", "no such file: nope.csv"),
        ("batch blog.json --df df --map topic", "--map: expected var=column, got 'topic'"),
        ("info abc123", "%flow connect URL first"),
        ("connect", "give the server URL"),
        ("connect http://127.0.0.1:1 sk-secret", "never goes on the magic line"),
        ("run blog.json --var topic tone=a", "--var NAME names the variable a %%flow run cell"),
    ],
)
def test_bad_arguments_raise_one_line_usage_errors(ip: Any, line: str, message: str) -> None:
    ip.user_ns["lst"] = [1, 2]
    ip.user_ns["df"] = pd.DataFrame({"topic": ["a"], "tone": ["b"]})
    with pytest.raises(UsageError) as info:
        magic(ip, line)
    text = str(info.value)
    assert message in text
    assert "\n" not in text.strip()


@pytest.mark.parametrize(
    ("source", "error", "shown"),
    [
        ("%flow run blog.json topic=a tone", UsageError, "UsageError: %flow run: expected"),
        ("%flow run blog.json --nope", UsageError, "UsageError: %flow run: unrecognized"),
        ("%flow run blog.json topic=a", InputError, "InputError: missing variable 'tone'"),
        ("%flow info missing.json", FlowFileError, "FlowFileError: missing.json: no such"),
        (
            "%flow info broken.json",
            FlowFileError,
            "FlowFileError: broken.json: node 'x' has unknown",
        ),
    ],
)
def test_errors_in_a_cell_show_one_line_without_traceback(
    ip: Any, tmp_path: Path, source: str, error: type[Exception], shown: str
) -> None:
    (tmp_path / "broken.json").write_text('{"nodes": [{"id": "x", "type": "nope"}]}')
    with capture_output() as captured:
        result = ip.run_cell(source)
    assert isinstance(result.error_in_exec, error)  # the cell failed, with the error's class
    printed = (captured.stdout + captured.stderr).strip()
    name, _, text = shown.partition(": ")
    assert printed.startswith(f"{name}: ") and text in printed
    assert len(printed.splitlines()) == 1, printed


def test_failed_runs_raise_flownb_errors(ip: Any, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="missing variable 'tone'"):
        magic(ip, "run blog.json topic=a")
    with pytest.raises(InputError, match="unknown variable 'colour'"):
        magic(ip, "run blog.json topic=a tone=b colour=c")
    with pytest.raises(FlowFileError):
        magic(ip, "run missing.json topic=a")
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(FlowFileError):
        magic(ip, "info broken.json")


def test_cell_magic_body_fills_the_only_variable(ip: Any) -> None:
    res = magic(ip, "run one.json", "\nfirst line\n  second, indented\n\n")
    assert res["echo"] == "said: first line\n  second, indented"
    assert cell(ip, "%%flow run blog.json --var topic tone=wry -o out -q\nsea glass\n") is None
    res = ip.user_ns["out"]
    assert res["intro"] == "Write a wry two-sentence intro for a blog post about sea glass."


def test_cell_magic_needs_var_when_the_flow_has_several(ip: Any) -> None:
    with pytest.raises(UsageError, match=r"has 2 variables .*--var NAME"):
        magic(ip, "run blog.json tone=a", "body")
    with pytest.raises(UsageError, match="--var 'colour' is not a variable"):
        magic(ip, "run blog.json --var colour", "body")
    with pytest.raises(UsageError, match="only %%flow run takes a cell body"):
        magic(ip, "info blog.json", "body")
    with pytest.raises(UsageError, match="set by the cell body and topic="):
        magic(ip, "run blog.json --var topic topic=x tone=y", "body")


def test_info_shows_variables_with_defaults_and_outputs(ip: Any) -> None:
    info = magic(ip, "info blog.json")
    shown = info._repr_html_()
    assert "<td><code>topic</code></td><td>tide pools</td>" in shown
    assert "<td><code>tone</code></td><td>playful</td>" in shown
    assert "<code>intro</code>, <code>header_image</code>" in shown
    assert "topic  (default: 'tide pools')" in repr(info)


def test_batch_over_a_dataframe_with_map_and_out(ip: Any) -> None:
    ip.user_ns["df"] = pd.DataFrame({"subject": ["owls", "moss"], "tone": ["dry", 7]})
    cell(ip, "%flow batch blog.json --df df --map topic=subject --no-progress -o out -q")
    out = ip.user_ns["out"]
    assert list(out.columns) == ["subject", "tone", "intro", "header_image"]
    assert out["intro"].tolist() == [
        "Write a dry two-sentence intro for a blog post about owls.",
        "Write a 7 two-sentence intro for a blog post about moss.",
    ]


def test_batch_keeps_finished_rows_and_reports_failed_ones(ip: Any) -> None:
    from tests.test_widgets import RefusingProvider

    flow = make_flow({"echo": "said: {text}"}, ["text"])
    ip.user_ns["f"] = flownb.load_flow(flow, provider=RefusingProvider())
    ip.user_ns["df"] = pd.DataFrame({"text": ["fine", "boom", "also fine"]})
    with capture_output() as captured:
        out = magic(ip, "batch $f --df df --no-progress")
    assert out["echo"].tolist() == ["text:said: fine", pd.NA, "text:said: also fine"]
    assert out["error"].notna().tolist() == [False, True, False]
    assert "1 of 3 rows did not finish; see the 'error' column" in captured.stderr


def test_batch_reads_a_csv_path_and_fill(ip: Any, tmp_path: Path) -> None:
    (tmp_path / "rows.csv").write_text("topic,tone\nowls,\nmoss,warm\n")
    with pytest.raises(InputError, match="give --fill '' "):
        magic(ip, "batch blog.json --df rows.csv --no-progress")
    out = magic(ip, "batch blog.json --df rows.csv --fill 'quite plain' --no-progress")
    assert out["intro"][0] == "Write a quite plain two-sentence intro for a blog post about owls."
    assert out["tone"].tolist() == ["quite plain", "warm"]
    out = magic(ip, "batch blog.json --df rows.csv --fill '' --no-progress")
    assert out["tone"].tolist() == ["", "warm"]  # filled with empty text, not NaN
    assert out["intro"][0] == "Write a  two-sentence intro for a blog post about owls."


def test_results_dataframe_html_has_thumbnails_after_load_ext(
    ip: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A terminal shell renders plain text only; a kernel's shell has HTML on, as here.
    monkeypatch.setattr(ip.display_formatter.formatters["text/html"], "enabled", True)
    ip.user_ns["df"] = pd.DataFrame({"topic": ["owls"], "tone": ["dry"]})
    out = magic(ip, "batch blog.json --df df --no-progress")
    data, _ = ip.display_formatter.format(out)
    assert '<div class="flownb-frame tex2jax_ignore mathjax_ignore">' in data["text/html"]
    assert '<img src="data:image/png;base64,' in data["text/html"]
    plain, _ = ip.display_formatter.format(pd.DataFrame({"a": [1]}))
    assert "flownb-frame" not in plain["text/html"] and "<table" in plain["text/html"]
    ip.run_line_magic("unload_ext", "flownb")
    data, _ = ip.display_formatter.format(out)
    assert "flownb-frame" not in data["text/html"]
    ip.run_line_magic("load_ext", "flownb")


def test_accessor_runs_a_flow_over_rows(ip: Any, blog_flow_path: Path) -> None:
    df = pd.DataFrame({"topic": ["owls"], "tone": ["dry"]})
    out = df.flownb.run(str(blog_flow_path), progress=False)
    assert out.flownb.image_columns() == ["header_image"]
    assert "<img" in out.flownb.show()._repr_html_()


def test_local_flows_are_cached_until_the_file_changes(ip: Any, tmp_path: Path) -> None:
    magics = ip.magics_manager.registry["FlowMagics"]
    first, _ = magics._resolve("one.json", None)
    again, _ = magics._resolve("one.json", None)
    assert first is again
    flow = make_flow({"echo": "heard: {text}"}, ["text"])
    path = tmp_path / "one.json"
    path.write_text(json.dumps(flow, indent=4))  # a different size, so a new stat
    os.utime(path, ns=(path.stat().st_mtime_ns + 10**9,) * 2)
    res = magic(ip, "run one.json text=hi")
    assert res["echo"] == "heard: hi"
    reloaded, _ = magics._resolve("one.json", None)
    assert reloaded is not first


def test_form_magic_returns_a_form(ip: Any) -> None:
    form = magic(ip, "form blog.json")
    assert isinstance(form, FlowForm)
    assert form.values == {"topic": "tide pools", "tone": "playful"}


def test_help(ip: Any) -> None:
    with capture_output() as captured:
        magic(ip, "")
    assert "%flow run FLOW" in captured.stdout and "%flow connect" in captured.stdout
    doc = ip.magics_manager.magics["line"]["flow"].__doc__
    assert "%%flow run FLOW [--var NAME]" in doc and "FLOWNB_API_KEY" in doc


def test_api_key_from_env_then_dotenv_never_prompting_without_stdin(
    ip: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(UsageError, match="no API key"):
        find_api_key()
    (tmp_path / ".env").write_text("FLOWNB_API_KEY=from-dotenv\n")
    assert find_api_key() == ("from-dotenv", str(tmp_path / ".env"))  # the path, once
    assert "FLOWNB_API_KEY" not in os.environ  # read, not exported
    monkeypatch.setenv("FLOWNB_API_KEY", "from-env")
    assert find_api_key() == ("from-env", "FLOWNB_API_KEY")


def test_api_key_prompt_uses_getpass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    asked: list[str] = []

    def fake_getpass(prompt: str) -> str:
        asked.append(prompt)
        return " typed-key \n"

    monkeypatch.setattr("getpass.getpass", fake_getpass)
    assert find_api_key(prompt_for="http://127.0.0.1:8000") == ("typed-key", "prompt")
    assert asked == ["flownb API key for http://127.0.0.1:8000: "]


def test_trailing_semicolon_hides_output_and_is_not_data(ip: Any) -> None:
    with capture_output() as captured:
        result = ip.run_cell("r = %flow run blog.json topic=owls tone=dry;", store_history=False)
    assert result.success, result.error_in_exec
    assert ip.user_ns["r"]["intro"] == "Write a dry two-sentence intro for a blog post about owls."
    assert captured.outputs == []
    with capture_output() as captured:
        result = ip.run_cell("%flow run blog.json topic=owls tone=dry -o r ;", store_history=False)
    assert result.success and ip.user_ns["r"]["intro"].endswith("about owls.")
    assert captured.outputs == [] and result.result is None
    # A ';' that is part of a value is quoted, and stays.
    res = magic(ip, "run blog.json topic='owls;' tone=dry")
    assert res["intro"].endswith("about owls;.")


def test_out_variable_result_is_shown_even_when_other_lines_follow(ip: Any) -> None:
    with capture_output() as captured:
        result = ip.run_cell("%flow run blog.json topic=owls tone=dry -o r\nx = 1")
    assert result.success, result.error_in_exec
    shown = [o.data.get("text/html", "") for o in captured.outputs]
    assert any("about owls." in text for text in shown), shown
    with capture_output() as captured:
        ip.run_cell("%flow run blog.json topic=owls tone=dry -o r -q\nx = 1", store_history=False)
    assert captured.outputs == []
    assert ip.user_ns["r"]["intro"].endswith("about owls.")
    with capture_output() as captured:
        result = ip.run_cell("%flow run blog.json topic=owls tone=dry -q", store_history=False)
    assert result.success and result.result is None and captured.outputs == []
    ip.user_ns["df"] = pd.DataFrame({"topic": ["owls"], "tone": ["dry"]})
    with capture_output() as captured:
        ip.run_cell("%flow batch blog.json --df df --no-progress -o out\nx = 1")
    assert len(captured.outputs) == 1 and "header_image" in captured.outputs[0].data["text/plain"]


def test_numbers_become_the_same_text_as_in_a_dataframe(ip: Any) -> None:
    ip.user_ns["n"] = 3.0
    res = magic(ip, "run one.json text=$n")
    ip.user_ns["df"] = pd.DataFrame({"text": [3.0]})
    out = magic(ip, "batch one.json --df df --no-progress")
    assert res["echo"] == out["echo"][0] == "said: 3"


def test_input_errors_name_every_problem_and_speak_magic(ip: Any, tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        magic(ip, "run blog.json topic=ramen tonee=vegan")
    assert str(info.value) == (
        "missing variable 'tone'; unknown variable 'tonee' (did you mean 'tone'?)"
    )
    (tmp_path / "rows.csv").write_text("subject,tone\nowls,\nmoss,\n")
    with pytest.raises(InputError) as info:
        magic(ip, "batch blog.json --df rows.csv --no-progress")
    assert "--map topic=COLUMN" in str(info.value) and "columns=" not in str(info.value)
    with pytest.raises(InputError) as info:
        magic(ip, "batch blog.json --df rows.csv --map topic=subject --no-progress")
    assert "--fill ''" in str(info.value) and "fill=''" not in str(info.value)
    with pytest.raises(InputError, match=r"--map maps unknown variable 'topc' \(did you mean"):
        magic(ip, "batch blog.json --df rows.csv --map topc=subject --no-progress")


def test_a_directory_or_backslash_flow_is_a_path(ip: Any, tmp_path: Path) -> None:
    (tmp_path / "flows").mkdir()
    with pytest.raises(FlowFileError, match="flows is a directory"):
        magic(ip, "info flows")
    with pytest.raises(FlowFileError):
        magic(ip, "info flows\\\\missing")


def test_usage_lines_match_the_arguments(ip: Any) -> None:
    with pytest.raises(UsageError) as info:
        magic(ip, "run")
    assert "required: FLOW." in str(info.value) and "[name=value ...]" in str(info.value)
    with pytest.raises(UsageError) as info:
        magic(ip, "connect --nope")
    assert "extra" not in str(info.value) and "%flow connect [URL]" in str(info.value)


def test_interrupted_batch_prints_a_plain_notice(ip: Any) -> None:
    from tests.providers_for_tests import InlineEcho
    from tests.test_frame import text_flow

    ip.user_ns["f"] = text_flow(InlineEcho(raise_at=(3, KeyboardInterrupt())))
    ip.user_ns["df"] = pd.DataFrame({"a": list("abcd"), "b": list("1234")})
    with capture_output() as captured:
        out = magic(ip, "batch $f --df df --no-progress")
    assert out["error"].notna().sum() == 2
    lines = [line for line in captured.stderr.splitlines() if "interrupted" in line]
    assert lines and lines[0].startswith("flownb: interrupted: 2 of 4 rows finished")
    assert "Warning" not in captured.stderr and ".py:" not in captured.stderr


def test_a_flow_files_lint_is_one_plain_line_each_once(ip: Any, tmp_path: Path) -> None:
    write_flow(tmp_path / "typo.json", make_flow({"o": "About {topc}, {tone}."}, ["topic", "tone"]))
    with capture_output() as captured:
        magic(ip, "info typo.json")
    lines = captured.stderr.splitlines()
    assert len(lines) == 2, captured.stderr
    assert lines[0].startswith("flownb: ") and lines[0].endswith(
        "typo.json: node 'o': {topc} names no variable and is left as written; "
        "did you mean {topic}?"
    )
    assert "variable 'topic' is used by no prompt" in lines[1]
    assert "Warning" not in captured.stderr and ".py:" not in captured.stderr
    with capture_output() as captured:
        magic(ip, "run typo.json topic=a tone=b")
    assert captured.stderr == ""  # once per file


def test_plain_notices_are_for_the_magics_own_thread_only(ip: Any) -> None:
    from tests.providers_for_tests import InlineEcho
    from tests.test_frame import text_flow

    class WarnsElsewhere(InlineEcho):
        """On its first call, has another thread (a form's run, say) warn, and waits for it."""

        def generate_inline(self, call: Any) -> Any:
            if not self.calls:
                other = threading.Thread(target=warnings.warn, args=("from another thread",))
                other.start()
                other.join(30)
            return super().generate_inline(call)

    ip.user_ns["f"] = text_flow(WarnsElsewhere(raise_at=(3, KeyboardInterrupt())))
    ip.user_ns["df"] = pd.DataFrame({"a": list("abcd"), "b": list("1234")})
    with warnings.catch_warnings(), capture_output() as captured:
        warnings.simplefilter("always")
        shown: list[str] = []
        warnings.showwarning = lambda message, *_, **__: shown.append(str(message))
        magic(ip, "batch $f --df df --no-progress")
    # The magic's own notice is a plain line; the other thread's warning went where warnings
    # went before (here: the list), not reworded as flownb's.
    assert "flownb: interrupted: 2 of 4 rows finished" in captured.stderr
    assert "from another thread" not in captured.stderr
    assert shown == ["from another thread"]
