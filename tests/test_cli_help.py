"""``flownb --help`` answered from the text kept in :mod:`flownb.cli.entry`: the same characters
click prints, through the console script users run, without importing click or the commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from flownb.cli.entry import HELP

CLICK = "from flownb.cli.main import main; main()"  # the click application, help built by click
ENTRY = "from flownb.cli.entry import main; main()"


def _run(code: str, *args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_the_console_script_is_the_entry_module() -> None:
    (script,) = entry_points(group="console_scripts", name="flownb")
    assert script.value == "flownb.cli.entry:main"


@pytest.mark.parametrize("columns", [None, 80, 200])
def test_the_kept_help_is_what_click_prints(columns: int | None) -> None:
    # Not on a terminal (the test's pipe), click lays its help out at 80 columns, as it does on
    # any terminal that wide or wider.
    built = _run(CLICK, "--help", columns=columns)
    assert built.returncode == 0, built.stderr
    assert built.stdout == HELP, "paste click's text into flownb/cli/entry.py HELP"
    kept = _run(ENTRY, "--help", columns=columns)
    assert (kept.returncode, kept.stdout, kept.stderr) == (0, HELP, "")


def test_h_and_python_m_flownb_give_the_same_help() -> None:
    assert _run(ENTRY, "-h").stdout == HELP
    out = subprocess.run(
        [sys.executable, "-m", "flownb", "--help"], capture_output=True, text=True, timeout=120
    )
    assert (out.returncode, out.stdout) == (0, HELP)


def test_a_narrow_terminal_and_other_command_lines_go_to_click() -> None:
    narrow = _run(ENTRY, "--help", columns=60)
    assert narrow.returncode == 0 and narrow.stdout != HELP
    assert narrow.stdout == _run(CLICK, "--help", columns=60).stdout
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 58
    version = _run(ENTRY, "--version")
    assert version.returncode == 0 and version.stdout.startswith("flownb, version ")
    sub = _run(ENTRY, "run", "--help")
    assert sub.returncode == 0 and "--var" in sub.stdout and sub.stdout != HELP
    bad = _run(ENTRY, "--help", "--nope")
    assert bad.stdout != HELP


def test_the_help_imports_neither_click_nor_the_commands() -> None:
    probe = (
        "import json, sys\nfrom flownb.cli.entry import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = _run(probe, columns=100)
    modules = json.loads(out.stdout.splitlines()[-1])
    loaded = [m for m in modules if m.split(".")[0] == "click" or m.startswith("flownb.cli.")]
    assert loaded == ["flownb.cli.entry"]
    assert "flownb.config.settings" not in modules
