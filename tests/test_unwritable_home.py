"""A FLOWNB_HOME that cannot be written: every command says so in one line, naming the folder
and what to do, never with a traceback, and never advising to delete a file (which cannot help).

The home is put under a regular file (``<tmp>/a-file/home``): no one can make a folder there,
root included. (The tests run as root, for whom ``chmod a-w`` stops nothing.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_inprocess import CliResult, run_cli
from tests.conftest import FLOWS


@pytest.fixture
def home(tmp_path: Path) -> Path:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    return blocker / "home"


def flownb(home: Path, *args: str, **env: str) -> CliResult:
    return run_cli(*args, env={"FLOWNB_HOME": str(home), **env})


def one_line_error(res: CliResult, home: Path) -> str:
    assert res.returncode != 0
    assert "Traceback" not in res.stderr, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("flownb: error:")]
    assert len(errors) == 1, res.stderr
    line = errors[0]
    assert str(home) in line and "is a file, not a folder" in line
    assert "set FLOWNB_HOME to a folder you can write" in line
    assert "delete" not in line
    return line


def test_keys_create_says_which_folder_cannot_be_written(home: Path) -> None:
    line = one_line_error(flownb(home, "keys", "create", "--name", "ci"), home)
    assert "the API key file" in line
    listed = flownb(home, "keys", "list")  # reading finds no keys; nothing to write
    assert listed.returncode == 0 and "Traceback" not in listed.stderr


def test_run_without_the_run_log_names_the_media_folder(home: Path) -> None:
    blog = str(FLOWS / "blog-intro.json")
    res = flownb(home, "run", blog, "--var", "topic=owls", "--var", "tone=dry", FLOWNB_RUNLOG="0")
    assert "the media key" in one_line_error(res, home)


def test_run_with_the_run_log_does_not_advise_deleting_it(home: Path) -> None:
    blog = str(FLOWS / "blog-intro.json")
    res = flownb(home, "run", blog, "--var", "topic=owls", "--var", "tone=dry")
    line = one_line_error(res, home)
    assert "the run log" in line and "FLOWNB_RUNLOG=0" in line
