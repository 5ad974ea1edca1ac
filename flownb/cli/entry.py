"""The ``flownb`` console script's front door: ``flownb --help`` answered from the help text
kept here, everything else handed to the click application (:func:`flownb.cli.main.main`).

``flownb --help`` is the first thing a new user types, and a command-line tool's help should
come at once. Building it takes click, the settings and every command's module (about as long
again as ``import flownb``); the text itself is fixed, so it is kept here, as click lays it out
at 80 columns or more, and printed without importing any of that. ``tests/test_cli_help.py``
holds it equal to click's own rendering, so a changed command cannot leave it stale. A narrower
terminal (click wraps to fit it), and every other command line, go to click.
"""

from __future__ import annotations

import sys

__all__ = ["HELP", "main"]

# click's rendering of `flownb --help` for a terminal of 80 columns or more (it caps the width
# at 80). Regenerate by pasting what click prints (tests/test_cli_help.py shows the difference
# when they part):  COLUMNS=80 python -c "from flownb.cli.main import main; main()" --help
HELP = """\
Usage: flownb [OPTIONS] COMMAND [ARGS]...

  Run LLM flows exported from the web tool: once, over CSV/JSON batches, or
  over HTTP.

Options:
  --version   Show the version and exit.
  -h, --help  Show this message and exit.

Commands:
  batches    List the provider batches flownb remembers (newest first),
             refresh or cancel one.
  check      Check flow files for mistakes a valid graph can hold.
  diff       Say in words what differs between two flow files: variables,
             prompts, models, parameters, system messages, outputs, how nodes
             are joined, nodes added or removed, and the endpoint a saved flow
             names.
  endpoints  List the endpoints the flownb.toml files declare (this folder,
             its parents, then FLOWNB_HOME): name, provider, host, the key
             variable sent there, the file, and which declarations a nearer
             file hides.
  eval       Evaluate FLOWS (files or ids; NAME=FLOW names a variant) over
             --data with --scorers.
  gc         Prune what flownb keeps in FLOWNB_HOME (images, call cache, run
             log).
  graph      Draw a flow file's graph: Mermaid text on stdout, or an SVG file
             with --svg.
  info       Show a flow's variables and outputs (FLOW: a .json file or a flow
             id).
  keys       Create, list and revoke the API keys `flownb serve` accepts
             (stored in FLOWNB_HOME).
  run        Run FLOW once (--var) or over a batch (--csv / --json).
  serve      Serve the flows of a folder over HTTP, as the flow execution
             service does.
"""

# How wide click lays its help out at most (click.formatting.HelpFormatter's max_width).
_CLICK_MAX_WIDTH = 80


def _wide_enough() -> bool:
    """Whether click would lay the help out at its full width: the terminal's width read as
    click reads it (:func:`shutil.get_terminal_size`: ``COLUMNS``, else the terminal, else 80)."""
    import shutil

    return shutil.get_terminal_size().columns >= _CLICK_MAX_WIDTH


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``flownb`` console script; exits with the command's status.

    ``flownb --help`` (or ``-h``) alone, on a terminal at least as wide as click's help, prints
    :data:`HELP` and exits 0; anything else runs :func:`flownb.cli.main.main`.
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 1 and args[0] in ("-h", "--help") and _wide_enough():
        sys.stdout.write(HELP)
        sys.stdout.flush()
        sys.exit(0)
    from .main import main as run_command

    run_command(argv)
