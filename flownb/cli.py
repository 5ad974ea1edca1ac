"""The ``flownb`` command line (click).

``flownb info FLOW`` and ``flownb run FLOW ...``: FLOW is a path to an exported flow JSON file
(local engine) or a flow id (remote, through FLOWNB_BASE_URL / FLOWNB_API_KEY). Results go to
stdout, banners and progress to stderr, so ``flownb run ... > out.txt`` keeps only results. Bad
input exits 2 with a one-line message; a failed run exits 1; Ctrl-C exits 130 after saving what
finished.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from .errors import FlownbError, InputError
from .flow import BaseFlow

__all__ = ["main"]


def _fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"flownb: error: {message}", err=True)
    sys.exit(code)


def _one_line(exc: FlownbError) -> str:
    if isinstance(exc, InputError) and len(exc.problems) > 1:
        return "; ".join(p.message for p in exc.problems)
    return exc.message.replace("\n", " ")


def _is_path(flow: str) -> bool:
    return flow.endswith(".json") or "/" in flow or Path(flow).is_file()


def open_flow(
    flow: str,
    provider: str | None = None,
    concurrency: int | None = None,
    cache: bool | None = None,
) -> BaseFlow:
    """Return the flow FLOW names: a local file, or a flow id on the configured server.

    Raises:
        FlownbError: the file is not a valid flow, or the server cannot be reached or refuses.
    """
    if _is_path(flow):
        from .flow import load_flow

        return load_flow(flow, provider=provider, concurrency=concurrency, cache=cache)
    if provider is not None:
        raise click.UsageError("--provider applies to local flow files; the server picks its own")
    from .client import Client

    return Client().flow(flow)


def _banner(flow: BaseFlow) -> None:
    provider = getattr(flow, "provider", None)
    line = provider.banner() if provider is not None else f"remote flow {flow.name!r}"
    click.echo(f"flownb: {line}", err=True)


def _parse_vars(pairs: tuple[str, ...]) -> dict[str, str]:
    values: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"expected NAME=VALUE, got {pair!r}", param_hint="--var")
        values[name] = value
    return values


def _parse_map(pairs: tuple[str, ...]) -> dict[str, str]:
    mapping = {}
    for pair in pairs:
        var, sep, col = pair.partition("=")
        if not sep or not var or not col:
            raise click.BadParameter(f"expected VARIABLE=COLUMN, got {pair!r}", param_hint="--map")
        mapping[var] = col
    return mapping


def _read_json_batch(path: str) -> Any:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise click.BadParameter(
            f"cannot read {path}: {exc.strerror}", param_hint="--json"
        ) from None
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"{path} is not JSON (line {exc.lineno} column {exc.colno}: {exc.msg})",
            param_hint="--json",
        ) from None
    if isinstance(data, dict) and "variables" in data:
        data = data["variables"]  # a contract request body works too
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise click.BadParameter(
            f"{path} must hold a JSON array of variable objects", param_hint="--json"
        )
    return data


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="flownb")
def cli() -> None:
    """Run LLM flows exported from the web tool: once, over CSV/JSON batches, or over HTTP."""


@cli.command()
@click.argument("flow")
def info(flow: str) -> None:
    """Show a flow's variables and outputs (FLOW: a .json file or a flow id)."""
    f = open_flow(flow)
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
    "--var",
    "var_pairs",
    multiple=True,
    metavar="NAME=VALUE",
    help="A variable value (repeat for each).",
)
@click.option(
    "--csv", "csv_path", type=click.Path(dir_okay=False), help="Run once per row of this CSV file."
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    help="Run once per object of this JSON array.",
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
    type=click.Path(dir_okay=False),
    help="Write results to a .csv or .json file.",
)
@click.option(
    "--provider",
    type=click.Choice(["offline", "openai"]),
    default=None,
    help="Model provider for local flow files (default: FLOWNB_PROVIDER or offline).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Provider calls in flight at once.",
)
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--no-cache", is_flag=True, help="Call the provider even for cached calls.")
def run(
    flow: str,
    var_pairs: tuple[str, ...],
    csv_path: str | None,
    json_path: str | None,
    map_pairs: tuple[str, ...],
    fill: str | None,
    out_path: str | None,
    provider: str | None,
    concurrency: int | None,
    no_progress: bool,
    no_cache: bool,
) -> None:
    """Run FLOW once (--var) or over a batch (--csv / --json)."""
    import pandas as pd

    if csv_path and json_path:
        raise click.UsageError("give --csv or --json, not both")
    if (csv_path or json_path) and var_pairs:
        raise click.UsageError("--var sets a single run; it cannot be combined with --csv/--json")
    if map_pairs and not csv_path:
        raise click.UsageError("--map applies to --csv columns")
    if out_path and Path(out_path).suffix.lower() not in (".csv", ".json"):
        raise click.BadParameter("must end in .csv or .json", param_hint="--out")
    values = _parse_vars(var_pairs)
    cache = False if no_cache else None
    f = open_flow(flow, provider=provider, concurrency=concurrency, cache=cache)
    _banner(f)

    if not csv_path and not json_path:
        result = f.run(values)
        click.echo(str(result))
        if out_path:
            _write(pd.DataFrame([{**values, **dict(result)}]), out_path)
        return

    if csv_path:
        try:
            # Only truly empty cells are missing; "NA" or "null" may be real text.
            df = pd.read_csv(csv_path, dtype=str, keep_default_na=False, na_values=[""])
        except FileNotFoundError:
            raise click.BadParameter(f"no such file: {csv_path}", param_hint="--csv") from None
        except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
            raise click.BadParameter(
                f"{csv_path} is not a readable CSV: {exc}", param_hint="--csv"
            ) from None
    else:
        batch = _read_json_batch(json_path)  # type: ignore[arg-type]
        f.spec.check_batch(batch)
        df = pd.DataFrame(batch, columns=f.variables)
    from .frame import INTERRUPTED

    out = f.run_dataframe(df, _parse_map(map_pairs) or None, fill=fill, progress=not no_progress)
    if out_path:
        _write(out, out_path)
        click.echo(f"flownb: wrote {len(out)} rows to {out_path}", err=True)
    else:
        with pd.option_context(
            "display.max_colwidth", 60, "display.width", 160, "display.max_rows", 60
        ):
            click.echo(out.to_string())
    errors = out["error"].dropna() if "error" in out.columns else pd.Series(dtype=object)
    if (errors == INTERRUPTED).any():
        sys.exit(130)
    if len(errors):
        _fail(f"{len(errors)} of {len(out)} rows failed; see the 'error' column")


def _write(df: Any, path: str) -> None:
    if path.lower().endswith(".json"):
        Path(path).write_text(
            df.to_json(orient="records", indent=2, force_ascii=False) + "\n", encoding="utf-8"
        )
    else:
        df.to_csv(path, index=False)


# `flownb serve` and `flownb keys` live with the server (they import FastAPI only when run).
from .server.commands import gc as _gc_command  # noqa: E402
from .server.commands import keys as _keys_group  # noqa: E402
from .server.commands import serve as _serve_command  # noqa: E402

cli.add_command(_serve_command, "serve")
cli.add_command(_keys_group, "keys")
cli.add_command(_gc_command, "gc")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``flownb`` console script; exits with the command's status."""
    try:
        cli.main(args=argv, prog_name="flownb", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("flownb: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except InputError as exc:
        _fail(_one_line(exc), 2)
    except FlownbError as exc:
        _fail(_one_line(exc), 2 if exc.code in ("invalid_flow", "config_error") else 1)
    except KeyboardInterrupt:
        click.echo("flownb: interrupted", err=True)
        sys.exit(130)
    sys.exit(0)
