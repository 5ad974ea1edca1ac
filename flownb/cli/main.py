"""The ``flownb`` command line (click).

``flownb info FLOW`` and ``flownb run FLOW ...``: FLOW is a path to an exported flow JSON file
(local engine) or a flow id (remote, through ``--base-url`` or FLOWNB_BASE_URL, and
FLOWNB_API_KEY). Results go to stdout (or ``--out``), banners, notices and progress to stderr, so
``flownb run ... > out.txt`` keeps only results. Every bad input, usage error included, exits 2
with one line ``flownb: error: ...``, before the provider banner; a failed run exits 1; Ctrl-C
exits 130 after saving what finished.

What FLOW means, how values, pairs and batch files are read: :mod:`flownb.flowfile.inputs`, shared
with
the ``%flow`` magics.

Ctrl-C stops a run from sending more calls and waits, at most :data:`IN_FLIGHT_GRACE` seconds
and saying so, for the calls in flight (sent, so paid for): their rows are kept, counted in the
cost line and cached; a second Ctrl-C ends the command at once.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import click

from ..errors import (
    ConfigError,
    FlowFileError,
    FlownbError,
    FlowNotFound,
    ImageNotFetched,
    InputError,
    one_line,
)
from ..show.escape import term_text
from ..show.meter import CostMeter
from .clickhelp import FullHelpGroup, ProviderChoice
from .inputs import (
    CLI,
    INPUT_FILE_HELP,
    parse_map,
    parse_values,
    read_csv,
    read_json_batch,
)
from .opening import MAX_SPEND_OPTION, banner, open_flow, usage_error

if TYPE_CHECKING:
    import pandas as pd

    from ..flows.base import BaseFlow

# What a command needs beyond click (the flow classes, pandas, the HTTP client) is imported
# inside the command: `flownb --help` and a one-row offline run import no more than they use.

__all__ = ["cli", "main"]

# Errors that mean "what you asked for cannot work": exit 2, like a usage error.
_BAD_INPUT = (InputError, ConfigError, FlowFileError, FlowNotFound)


def _fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"flownb: error: {_flat(message)}", err=True)
    sys.exit(code)


def _flat(text: str) -> str:
    """Return ``text`` on one line (the docs promise one line per error), with no
    terminal control in it (an error may quote a model's answer)."""
    return term_text(" ".join(text.split()))


def _dry_run(preview: Any, details: bool) -> None:
    """Print a dry run: the summary (calls per node, one prompt each), or with ``details``
    every call's rendered prompt; control characters shown, never sent to the terminal."""
    text = str(preview) if details else preview.brief("add --details")
    click.echo(term_text(text))


_usage = usage_error
_banner = banner


_BASE_URL = click.option(
    "--base-url",
    default=None,
    metavar="URL",
    help="The flow server for a flow id (default: FLOWNB_BASE_URL); the key: FLOWNB_API_KEY.",
)


# --endpoint NAME: an endpoint declared in flownb.toml (run, eval, serve).
ENDPOINT_OPTION = click.option(
    "--endpoint",
    metavar="NAME",
    default=None,
    help="Endpoint declared as [endpoints.NAME] in flownb.toml (default: FLOWNB_ENDPOINT).",
)


@click.group(cls=FullHelpGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="flownb")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Run LLM flows exported from the web tool: once, over CSV/JSON batches, or over HTTP."""
    # Ctrl-C lets the calls already sent end (bounded, announced) before the command exits.
    # Entered here rather than in main(): `flownb --help` never gets here, so it does not load
    # the event loop's module.
    from ..infra.aio import Patience, patience

    wait = Patience(grace=IN_FLIGHT_GRACE, waiting=_in_flight_line, say=_say)
    ctx.with_resource(patience(wait))


@cli.command()
@click.argument("flow")
@_BASE_URL
def info(flow: str, base_url: str | None) -> None:
    """Show a flow's variables and outputs (FLOW: a .json file or a flow id)."""
    f = open_flow(flow, base_url=base_url, ready=False)
    click.echo(f"flow: {f.name}")
    defaults = f.defaults
    click.echo("variables:")
    for name in f.variables:
        default = defaults.get(name, "")
        click.echo(f"  - {name}" + (f"  (default: {default!r})" if default else ""))
    click.echo("outputs:")
    for name in f.outputs:
        click.echo(f"  - {name}")


@cli.command()
@click.argument("flow")
@click.option(
    "--svg",
    "svg_path",
    metavar="FILE",
    help="Write the picture as SVG to FILE instead of printing Mermaid.",
)
def graph(flow: str, svg_path: str | None) -> None:
    """Draw a flow file's graph: Mermaid text on stdout, or an SVG file with --svg."""
    from ..core.local import local_of

    f = local_of(open_flow(flow, base_url=None, ready=False))
    if f is None:
        _fail(
            f"flownb graph: {flow!r} is not a flow file (a served flow's graph stays on the server)"
        )
    if svg_path is None:
        click.echo(f.to_mermaid(), nl=False)
        return
    try:
        Path(svg_path).write_text(f.to_svg(), encoding="utf-8")
    except OSError as exc:
        _fail(f"cannot write {svg_path}: {exc.strerror or exc}")
    click.echo(f"wrote {svg_path}", err=True)


@cli.command()
@click.argument("flow")
@click.option(
    "--var",
    "var_pairs",
    multiple=True,
    metavar="NAME=VALUE",
    help="A variable value (repeat for each).",
)
@click.option(
    "--use-defaults",
    is_flag=True,
    help="Take each variable not given from the flow's defaults (as `flownb info` shows them).",
)
@click.option(
    "--csv",
    "csv_path",
    metavar="FILE",
    help=f"Run once per row of this CSV file ({INPUT_FILE_HELP}).",
)
@click.option(
    "--json",
    "json_path",
    metavar="FILE",
    help=f"Run once per object of this JSON array ({INPUT_FILE_HELP}).",
)
@click.option(
    "--map",
    "map_pairs",
    multiple=True,
    metavar="VAR=COLUMN",
    help="Take a variable from a differently named CSV column.",
)
@click.option("--fill", default=None, help="Use this for empty CSV cells instead of refusing them.")
@click.option(
    "--out",
    "out_path",
    metavar="FILE",
    help="Write results to a .csv or .json file, or to stdout with '-' (JSON unless --format).",
)
@click.option(
    "--format",
    "out_format",
    type=click.Choice(["csv", "json"]),
    default=None,
    help="Format of --out (default: from its suffix; JSON for '-').",
)
@click.option(
    "--raw-csv",
    is_flag=True,
    help="Write CSV cells exactly as they are (by default a cell that would run as a "
    "spreadsheet formula gets a leading ').",
)
@click.option(
    "--provider",
    type=ProviderChoice(),
    default=None,
    help="Model provider for local flow files (default: FLOWNB_PROVIDER or offline).",
)
@_BASE_URL
@ENDPOINT_OPTION
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Provider calls in flight at once.",
)
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--no-cache", is_flag=True, help="Call the provider even for cached calls.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the calls a run would pay for (a summary per node; --details: every call's "
    "rendered prompt); call nothing.",
)
@click.option(
    "--details", is_flag=True, help="With --dry-run: every call's rendered prompt, one a line."
)
@click.option(
    "--batch-api",
    is_flag=True,
    help="Send the uncached text calls of a --csv/--json batch through the provider's batch API "
    "(half price, results within 24 hours); a later run picks up batches still running.",
)
@MAX_SPEND_OPTION
def run(
    flow: str,
    var_pairs: tuple[str, ...],
    use_defaults: bool,
    csv_path: str | None,
    json_path: str | None,
    map_pairs: tuple[str, ...],
    fill: str | None,
    out_path: str | None,
    out_format: str | None,
    raw_csv: bool,
    provider: str | None,
    base_url: str | None,
    endpoint: str | None,
    concurrency: int | None,
    no_progress: bool,
    no_cache: bool,
    dry_run: bool,
    details: bool,
    batch_api: bool,
    max_spend: float | None,
) -> None:
    """Run FLOW once (--var) or over a batch (--csv / --json).

    A run never falls back to the flow's defaults on its own: every variable must be given,
    unless --use-defaults says to take the missing ones from the flow.
    """
    # Everything the user typed is checked before the flow is loaded or the banner printed.
    _check_run_options(var_pairs, csv_path, json_path, map_pairs, fill, batch_api)
    target = _out_target(out_path, out_format)
    values, mapping, df, batch = _read_run_inputs(var_pairs, map_pairs, csv_path, json_path)
    f = open_flow(
        flow,
        provider=provider,
        concurrency=concurrency,
        cache=False if no_cache else None,
        base_url=base_url,
        endpoint=endpoint,
    )
    defaults = f.defaults if use_defaults else {}
    if df is None and batch is None:
        _run_once(
            f,
            {**defaults, **values},
            target,
            dry_run=dry_run,
            details=details,
            safe=not raw_csv,
            max_spend=max_spend,
        )
        return
    rows = _batch_rows(f, batch, df, mapping, fill, defaults)
    _banner(f)
    if dry_run:
        _dry_run(f.preview(rows, mapping or None, fill=fill), details)
        return
    _run_rows(
        f,
        rows,
        mapping,
        fill,
        target,
        progress=not no_progress,
        batch_api=batch_api,
        safe=not raw_csv,
        max_spend=max_spend,
    )


def _check_run_options(
    var_pairs: tuple[str, ...],
    csv_path: str | None,
    json_path: str | None,
    map_pairs: tuple[str, ...],
    fill: str | None,
    batch_api: bool,
) -> None:
    """Refuse options of ``flownb run`` that do not go together.

    Raises:
        click.UsageError: naming the options.
    """
    if csv_path and json_path:
        raise click.UsageError("give --csv or --json, not both")
    if (csv_path or json_path) and var_pairs:
        raise click.UsageError("--var sets a single run; it cannot be combined with --csv/--json")
    if map_pairs and not csv_path:
        raise click.UsageError("--map applies to --csv columns")
    if fill is not None and not csv_path:
        raise click.UsageError("--fill applies to --csv cells")
    if batch_api and not (csv_path or json_path):
        raise click.UsageError("--batch-api runs a --csv or --json batch")


def _read_run_inputs(
    var_pairs: tuple[str, ...],
    map_pairs: tuple[str, ...],
    csv_path: str | None,
    json_path: str | None,
) -> tuple[dict[str, str], dict[str, str], pd.DataFrame | None, list[Any] | None]:
    """Return the ``--var`` values, the ``--map`` mapping, and the ``--csv`` rows or the
    ``--json`` batch (``None`` when not given).

    Raises:
        click.UsageError: a bad pair or an unreadable file, naming its option.
    """
    try:
        values = parse_values(var_pairs)
    except ConfigError as exc:
        raise _usage("--var", exc) from None
    try:
        mapping = parse_map(map_pairs)
    except ConfigError as exc:
        raise _usage("--map", exc) from None
    try:
        if csv_path:
            return values, mapping, read_csv(csv_path), None
        if json_path:
            return values, mapping, None, read_json_batch(json_path)
    except ConfigError as exc:
        raise _usage("--csv" if csv_path else "--json", exc) from None
    return values, mapping, None, None


def _run_once(
    f: BaseFlow,
    values: dict[str, str],
    target: tuple[str, str] | None,
    *,
    dry_run: bool,
    details: bool,
    safe: bool,
    max_spend: float | None = None,
) -> None:
    """Run ``f`` once (or show what it would call), print or write the result, then the cost;
    ``max_spend``: within that many US dollars.

    Raises:
        InputError: a variable is missing or unknown.
    """
    f.spec.check_one(values)
    _banner(f)
    if dry_run:
        _dry_run(f.preview(values), details)
        return
    meter = CostMeter()
    try:
        if target is None and max_spend is None and _streams_to_terminal():
            from .terminal import stream_to_terminal

            result = stream_to_terminal(f, values, sys.stdout)
        else:
            result = f.run(values, max_spend=max_spend)
            if target is None:
                from ..show.display import result_text

                click.echo(result_text(result, urls=True))
    except ImageNotFetched as exc:
        meter.add_failed(exc)  # paid for though it failed: the cost line says so, then the error
        click.echo(f"flownb: {meter.total_line()}", err=True)
        raise
    if target is not None:
        import pandas as pd  # only --out makes a frame: a run printed needs no pandas

        _write(pd.DataFrame([{**values, **dict(result)}]), *target, safe=safe)
    meter.add(result)
    click.echo(f"flownb: {meter.total_line()}", err=True)


def _run_rows(
    f: BaseFlow,
    rows: pd.DataFrame,
    mapping: dict[str, str],
    fill: str | None,
    target: tuple[str, str] | None,
    *,
    progress: bool,
    batch_api: bool,
    safe: bool,
    max_spend: float | None = None,
) -> None:
    """Run ``f`` over ``rows`` (live, or through the provider's batch API; within
    ``max_spend`` US dollars), print or write the results, then the cost; exit 130 when
    interrupted, 1 when a row failed."""
    import pandas as pd

    from ..core.local import local_of
    from ..frames.run import INTERRUPTED, run_dataframe

    meter = CostMeter()
    if batch_api:
        local = local_of(f)
        if local is None:
            raise click.UsageError("--batch-api runs flow files (a served flow runs on its server)")
        from ..frames.batch_api import run_dataframe_batched

        out = run_dataframe_batched(
            local,
            rows,
            mapping or None,
            fill=fill,
            progress=progress,
            spelling=CLI,
            meter=meter,
            max_spend=max_spend,
        )
    elif max_spend is not None:
        capped, cap = f.capped(max_spend, f.preview(rows, mapping or None, fill=fill))
        try:
            out = run_dataframe(
                capped,
                rows,
                mapping or None,
                fill=fill,
                progress=progress,
                spelling=CLI,
                meter=meter,
            )
        finally:
            click.echo(f"flownb: {cap.line()}", err=True)
    else:
        out = run_dataframe(
            f, rows, mapping or None, fill=fill, progress=progress, spelling=CLI, meter=meter
        )
    if target is not None:
        _write(out, *target, safe=safe)
    else:
        with pd.option_context(
            "display.max_colwidth", 60, "display.width", 160, "display.max_rows", 60
        ):
            click.echo(term_text(out.to_string()))  # no escape sequence reaches the tty
    click.echo(f"flownb: {meter.total_line()}", err=True)  # stdout stays the results alone
    errors = out["error"].dropna() if "error" in out.columns else pd.Series(dtype=object)
    if (errors == INTERRUPTED).any():
        sys.exit(130)
    if len(errors):
        _fail(f"{len(errors)} of {len(out)} rows failed; see the 'error' column")


def _batch_rows(
    flow: BaseFlow,
    batch: list[Any] | None,
    df: pd.DataFrame | None,
    mapping: dict[str, str],
    fill: str | None,
    defaults: dict[str, str],
) -> pd.DataFrame:
    """Return the rows to run, a JSON batch or a CSV file's, each checked whole (with the
    defaults added where a variable is left out).

    Raises:
        InputError: naming every problem, in command-line spelling.
    """
    import pandas as pd

    from ..frames.run import rows_to_variables

    if batch is not None:
        if defaults:
            batch = [{**defaults, **row} if isinstance(row, dict) else row for row in batch]
        flow.spec.check_batch(batch)
        return pd.DataFrame(batch, columns=flow.variables)
    rows = df if df is not None else pd.DataFrame()
    for name, value in defaults.items():
        if name not in mapping and name not in rows.columns:
            rows[name] = value
    # Checked here, so a bad cell is reported before the banner; run_dataframe converts again.
    rows_to_variables(rows, flow.variables, mapping, fill, spelling=CLI)
    return rows


def _out_target(out_path: str | None, out_format: str | None) -> tuple[str, str] | None:
    """Return where results are written and in which format, or None to show them on stdout.

    Raises:
        click.UsageError: --format without --out, or a file name that says no format.
    """
    if out_path is None:
        if out_format is not None:
            raise click.UsageError("--format applies to --out")
        return None
    if out_format is not None:
        return out_path, out_format
    if out_path == "-":
        return out_path, "json"
    suffix = Path(out_path).suffix.lower()
    if suffix not in (".csv", ".json"):
        raise click.UsageError("--out: must end in .csv or .json (or give --format)")
    return out_path, suffix[1:]


def _streams_to_terminal() -> bool:
    """Whether a single run's text is printed as it streams: stdout is a terminal (and
    ``FLOWNB_LIVE`` is not ``0``); redirected output stays exactly the result's text."""
    from ..config.settings import live_view_mode

    return sys.stdout.isatty() and live_view_mode() != "off"


def _write(df: Any, target: str, fmt: str, *, safe: bool = True) -> None:
    """Write ``df`` as CSV or JSON records to the file ``target`` (``-``: stdout); ``safe``
    neutralises CSV cells a spreadsheet would run as formulas (:mod:`flownb.show.spreadsheet`)."""
    if fmt == "json":
        # json.dumps rather than DataFrame.to_json: no escaped '/', text kept as written, and
        # NaN (an input cell left empty and filled) written as null.
        records = df.astype(object).where(df.notna(), None).to_dict(orient="records")
        text = json.dumps(records, ensure_ascii=False, indent=2, default=str) + "\n"
    else:
        from ..show.spreadsheet import csv_text

        text = csv_text(df, safe=safe)
    if target == "-":
        # To a terminal, a model's escape sequences are shown, not obeyed; to a pipe, the data.
        click.echo(term_text(text) if sys.stdout.isatty() else text, nl=False)
        return
    Path(target).write_text(text, encoding="utf-8")
    click.echo(f"flownb: wrote {len(df)} row{'s' * (len(df) != 1)} to {target}", err=True)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """Show a warning as one ``flownb: ...`` line on stderr (no file path, no source line)."""
    click.echo(f"flownb: {_flat(str(message))}", err=True)


# The commands of their own modules (`serve`, `keys` and `gc` import FastAPI only when run).
from .eval import eval_command as _eval_command  # noqa: E402
from .looking import batches as _batches_command  # noqa: E402
from .looking import check as _check_command  # noqa: E402
from .looking import diff as _diff_command  # noqa: E402
from .looking import endpoints as _endpoints_command  # noqa: E402
from .serve import gc as _gc_command  # noqa: E402
from .serve import keys as _keys_group  # noqa: E402
from .serve import serve as _serve_command  # noqa: E402

cli.add_command(_serve_command, "serve")
cli.add_command(_keys_group, "keys")
cli.add_command(_eval_command, "eval")
cli.add_command(_gc_command, "gc")
cli.add_command(_check_command, "check")
cli.add_command(_diff_command, "diff")
cli.add_command(_batches_command, "batches")
cli.add_command(_endpoints_command, "endpoints")


# Seconds Ctrl-C waits for the provider calls in flight (sent, so paid for) before the command
# ends; a second Ctrl-C ends it at once.
IN_FLIGHT_GRACE = 60.0


def _in_flight_line() -> str | None:
    """The line Ctrl-C prints while calls in flight end (None: there are none)."""
    from ..providers.inflight import calls_in_flight  # only once a run was stopped

    n = calls_in_flight()
    if not n:
        return None
    return (
        f"stopping: waiting for {n} call{'s' * (n != 1)} in flight, Ctrl-C again to abandon "
        f"(at most {IN_FLIGHT_GRACE:g} s; they are paid for, so their answers are kept)"
    )


def _say(line: str) -> None:
    click.echo(f"flownb: {line}", err=True)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``flownb`` console script; exits with the command's status."""
    warnings.showwarning = _show_warning
    try:
        cli.main(args=argv, prog_name="flownb", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("flownb: interrupted", err=True)
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()  # `flownb` alone: the help text, as any command-line tool shows it
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code)
    except _BAD_INPUT as exc:
        _fail(one_line(exc), 2)
    except FlownbError as exc:
        _fail(one_line(exc), 1)
    except KeyboardInterrupt:
        click.echo("flownb: interrupted", err=True)
        sys.exit(130)
    sys.exit(0)
