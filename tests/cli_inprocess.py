"""The ``flownb`` command run inside the test process: what the console script runs
(:func:`flownb.cli.main.main`, with its one-line errors and exit statuses) under click's
``CliRunner`` isolation (stdin, stdout and stderr swapped for buffers, the environment
overridden), so a test pays no interpreter start-up and no ``import flownb`` per command.

What only a separate process proves (the installed console script, ``python -m flownb``,
signals such as Ctrl-C) stays in subprocess tests.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from flownb.cli.main import main


@dataclass(frozen=True)
class CliResult:
    """What a command left: its exit status and its two output streams, as text (the names of
    :class:`subprocess.CompletedProcess`, so a test reads either alike)."""

    returncode: int
    stdout: str
    stderr: str


@contextmanager
def _cwd(path: Path | None) -> Iterator[None]:
    if path is None:
        yield
        return
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def run_cli(
    *args: str, cwd: Path | None = None, env: Mapping[str, str | None] | None = None
) -> CliResult:
    """Return the result of ``flownb ARGS`` run in this process, in folder ``cwd``, with
    ``env`` overriding the environment (``None`` unsets a variable) for its duration."""
    runner = CliRunner()
    shown = warnings.showwarning  # main() installs its one-line warning printer
    code = 0
    with runner.isolation(env=dict(env or {})) as (out, err, _), _cwd(cwd):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            warnings.showwarning = shown
            sys.stdout.flush()
            sys.stderr.flush()
        stdout = out.getvalue().decode("utf-8")
        stderr = err.getvalue().decode("utf-8", "backslashreplace")
    return CliResult(code, stdout, stderr)
