"""The ``%flow`` line magic and ``%%flow`` cell magic.

Arguments are split like a shell line (:mod:`shlex`: quote values with spaces). IPython's own
``$name`` expansion is turned off for these magics and done here instead, per value, so a
Python variable arrives as itself: ``topic=$t`` passes the string in ``t`` even when it holds
spaces or quotes, ``$flow`` may name a flow object, ``--df $df`` a DataFrame. ``$$`` is a
literal ``$``.

A trailing ``;`` hides the output, as it does for any IPython line, and is never part of a value
(quote it to keep it: ``tone='dry;'``). ``-o VAR`` keeps the result in VAR and shows it even when
other lines follow in the cell (``-q`` keeps it quiet). FLOW, values, pairs and CSV files are read
by :mod:`flownb.flowfile.inputs`, the same way as on the command line.

Local flow files are loaded once and kept until the file changes. Flow ids go to the server
connected with ``%flow connect`` (or ``FLOWNB_BASE_URL``); the API key comes from
``FLOWNB_API_KEY``, a ``.env`` file or a password prompt, never from the magic line.
"""

from __future__ import annotations

import argparse
import keyword
import re
import shlex
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand

from ..cli.inputs import (
    MAGIC,
    flow_location,
    no_server,
    parse_map,
    parse_values,
    read_csv,
)
from ..config.settings import resolve_run_config
from ..core.flow import FlowCore
from ..core.local import local_of
from ..errors import ConfigError, FlownbError
from ..flowfile.inputs import to_text
from ..flows.local import LocalFlow
from ..frames.batch_api.run import run_dataframe_batched
from ..frames.run import run_dataframe
from ..providers.registry import provider_names
from .args import MagicParser
from .eval_magic import EvalMagics, eval_help
from .failures import one_line_failure
from .info import FlowInfo

if TYPE_CHECKING:
    import pandas as pd

    from ..flows.base import BaseFlow

__all__ = ["FlowInfo", "FlowMagics", "find_api_key"]

_USAGE = """\
%flow info FLOW                                   variables (with defaults) and outputs
%flow run FLOW [name=value ...] [-o VAR] [-q]     run once; the result is displayed
%%flow run FLOW [--var NAME] [name=value ...]     run once; the cell body is one variable
%flow batch FLOW --df DF [--map var=col ...] [--fill TEXT] [--batch-api] [-o VAR] [-q]
           [--max-spend USD]                      run once per row of a DataFrame (or CSV file)
%flow form FLOW                                   an input form with a Run button
%flow eval FLOW... --df DF --scorers $s [--out FILE] [--min-pass X] [--max-spend USD] [-o VAR]
                                                  evaluate variants
%flow connect [URL]                               use a flow server for flow ids"""

_VAR_REF = re.compile(r"\$\$|\$([A-Za-z_][A-Za-z0-9_]*)")
_WHOLE_REF = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


def _parser(sub: str) -> MagicParser:
    p = MagicParser(prog=f"flow {sub}", add_help=False, allow_abbrev=False)
    if sub == "connect":
        p.add_argument("url", nargs="?", default=None, metavar="URL")
        # Caught only to say that a key never goes on the line; not part of the usage.
        p.add_argument("extra", nargs="*", help=argparse.SUPPRESS)
        return p
    p.add_argument("flow", metavar="FLOW")
    if sub in ("run", "batch"):
        p.add_argument("-o", "--out", dest="out", metavar="VAR", default=None)
        p.add_argument("-q", "--quiet", dest="quiet", action="store_true")
        p.add_argument("--provider", choices=provider_names(), default=None)
        p.add_argument("--endpoint", metavar="NAME", default=None)
    if sub == "run":
        # default=[]: argparse otherwise reports a '*' positional as required.
        p.add_argument("pairs", nargs="*", metavar="name=value", default=[])
        # --var NAME: the variable a cell body fills; --var name=value: a pair, as in the CLI.
        p.add_argument("--var", dest="var", metavar="NAME", action="append", default=[])
    if sub == "batch":
        p.add_argument("--df", dest="df", metavar="DF", required=True)
        p.add_argument("--map", dest="map", metavar="var=col", action="append", default=[])
        p.add_argument("--fill", dest="fill", metavar="TEXT", default=None)
        p.add_argument("--concurrency", type=int, default=None)
        p.add_argument("--no-progress", dest="progress", action="store_false")
        p.add_argument("--batch-api", dest="batch_api", action="store_true")
        p.add_argument("--max-spend", dest="max_spend", type=float, default=None, metavar="USD")
    if sub in ("info", "form"):
        p.add_argument("--provider", choices=provider_names(), default=None)
        p.add_argument("--endpoint", metavar="NAME", default=None)
    return p


_SUBCOMMANDS = ("info", "run", "batch", "form", "connect", "eval")


def find_api_key(prompt_for: str | None = None) -> tuple[str, str]:
    """Return ``(key, where it came from)``: ``FLOWNB_API_KEY``, else a ``.env`` file (this
    folder or a parent), else a hidden prompt (when ``prompt_for`` names the server).

    Raises:
        UsageError: no key anywhere and no way to prompt (e.g. a notebook run without stdin).
    """
    key = resolve_run_config(local=False).service_key
    if key:
        return key, "FLOWNB_API_KEY"
    from dotenv import dotenv_values, find_dotenv

    path = find_dotenv(usecwd=True)
    if path:
        key = dotenv_values(path).get("FLOWNB_API_KEY")
        if key:
            return key, path
    if prompt_for is not None:
        import getpass

        try:
            key = getpass.getpass(f"flownb API key for {prompt_for}: ")
        except Exception as exc:  # StdinNotImplementedError and friends: no way to ask
            raise UsageError(
                "no API key: set FLOWNB_API_KEY or put FLOWNB_API_KEY=... in a .env file "
                f"({type(exc).__name__}: cannot prompt here)"
            ) from None
        if key.strip():
            return key.strip(), "prompt"
    raise UsageError("no API key: set FLOWNB_API_KEY, put it in a .env file, or answer the prompt")


@magics_class
class FlowMagics(EvalMagics, Magics):
    """Holds the ``%flow`` magic's state: loaded local flows and the connected server."""

    shell: Any  # the InteractiveShell; IPython types it Optional, but a loaded magic has one

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        # (resolved path, provider[, endpoint]) -> (mtime_ns, size, flow): reloaded when the
        # file changes.
        self._local: dict[tuple[Any, ...], tuple[int, int, LocalFlow]] = {}
        self.client: Any = None

    # ---- the magic --------------------------------------------------------------------------

    @line_cell_magic
    @no_var_expand
    def flow(self, line: str, cell: str | None = None) -> Any:
        """Run LLM flows from notebook cells.

        Usage::

          %flow info FLOW                                 variables (with defaults) and outputs
          %flow run FLOW [name=value ...] [-o VAR] [-q]   run once; the result is displayed
                                                          (--var name=value works too)
          %%flow run FLOW [--var NAME] [name=value ...]   run once; the cell body is the value of
                                                          the flow's only variable (or of NAME)
          %flow batch FLOW --df DF [--map var=col ...] [--fill TEXT] [--no-progress] [--batch-api]
                      [--max-spend USD] [-o VAR] [-q]
                                                          run once per row of DataFrame DF (a
                                                          Python variable, or a .csv path);
                                                          returns the results DataFrame
          %flow form FLOW                                 an input form with a Run button
          %flow eval FLOW... --df DF --scorers $S [--out FILE] [--min-pass X] [-o VAR]
                                                          evaluate flows (variants: NAME=FLOW or
                                                          $dict) over DF with the scorers in $S;
                                                          returns the report (--help: all options)
          %flow connect [URL]                             send flow ids to this flow server
                                                          (default FLOWNB_BASE_URL)

        FLOW is a path to an exported flow file (run locally; reloaded when it changes), a flow
        id on the connected server, or ``$name`` of a flow object. Values with spaces need
        quotes: ``tone="very dry"``. ``$name`` passes a Python variable (``topic=$t``); ``$$``
        is a literal ``$``. ``-o VAR`` stores the result in VAR and shows it; ``-q`` shows
        nothing; a trailing ``;`` hides the output. ``--provider offline|openai`` picks the model
        provider for a local flow file; ``--endpoint NAME`` an endpoint declared as
        ``[endpoints.NAME]`` in ``flownb.toml``.

        The API key for ``%flow connect`` comes from FLOWNB_API_KEY, a ``.env`` file, or a
        hidden prompt. It is never typed on the magic line.

        A user error (bad arguments, a missing or broken flow file, variables that do not fit,
        a failed run) is one line, as on the command line, and fails the cell. ``%flow SUB
        --help`` shows a subcommand's usage (``%flow eval --help`` every option of eval).
        """
        __tracebackhide__ = True  # IPython: hide this frame, show the flownb error itself
        try:
            # Warnings raised meanwhile (a flow file's lint, an interrupted batch) are plain
            # ``flownb: ...`` lines, wherever in the magic they come from.
            with _plain_notices():
                return self._dispatch(line, cell)
        except (UsageError, FlownbError) as exc:
            failure = one_line_failure(exc)
            if failure is exc:
                raise
            raise failure from None

    def _dispatch(self, line: str, cell: str | None) -> Any:
        """Run one ``%flow`` line (and cell body); return what the cell shows."""
        __tracebackhide__ = True
        quiet, tokens = _split_line(line)
        if not tokens or tokens[0] in ("help", "-h", "--help"):
            print(type(self).flow.__doc__ or _USAGE)
            return None
        sub, rest = tokens[0], tokens[1:]
        _check_subcommand(sub, cell)
        if any(t in ("-h", "--help") for t in rest):
            print(eval_help() if sub == "eval" else _USAGE)
            return None
        if sub == "eval":  # parsed and run by EvalMagics (eval_magic.py)
            return self._eval(rest)
        args = _parse_args(sub, rest, cell)
        if sub == "connect":
            return self._connect(args)
        flow, source = self._resolve(
            args.flow, getattr(args, "provider", None), getattr(args, "endpoint", None)
        )
        if sub == "info":
            return FlowInfo(flow, source)
        if sub == "form":
            return flow.form()
        result = self._batch(flow, args) if sub == "batch" else self._run(flow, args, cell)
        if sub == "batch" and (args.out is not None or args.quiet or quiet):
            from ..views.live import keep_bar_only

            keep_bar_only(result)  # shown below by -o, or not at all: the live view's bar stays
        return _shown(result, args, quiet)

    # ---- subcommands ------------------------------------------------------------------------

    def _run(self, flow: BaseFlow, args: argparse.Namespace, cell: str | None) -> Any:
        __tracebackhide__ = True
        try:
            values = parse_values(
                args.pairs,
                form="name=value",
                convert=lambda name, raw: _as_text(self._expand(raw, f"{name}="), name),
            )
        except ConfigError as exc:
            raise UsageError(f"%flow run: {exc.message} (quote values with spaces)") from None
        if cell is not None:
            name = args.var
            if name is None:
                if len(flow.variables) != 1:
                    raise UsageError(
                        f"%%flow run: flow {flow.name!r} has {len(flow.variables)} variables "
                        f"({', '.join(flow.variables) or 'none'}); name the one the cell fills "
                        "with --var NAME"
                    )
                name = flow.variables[0]
            elif name not in flow.variables:
                raise UsageError(
                    f"%%flow run: --var {name!r} is not a variable of {flow.name!r} "
                    f"(variables: {', '.join(flow.variables) or 'none'})"
                )
            if name in values:
                raise UsageError(f"%%flow run: {name!r} is set by the cell body and {name}=...")
            values[name] = _cell_text(cell)
        result = flow.run(values)
        if args.out:
            self.shell.user_ns[args.out] = result
        return result

    def _batch(self, flow: BaseFlow, args: argparse.Namespace) -> pd.DataFrame:
        __tracebackhide__ = True
        df = self._dataframe(args.df)
        try:
            mapping = parse_map(args.map, form="var=column")
        except ConfigError as exc:
            raise UsageError(f"%flow batch: --map: {exc.message}") from None
        fill = self._expand(args.fill) if args.fill is not None else None
        if args.concurrency is not None and args.concurrency < 1:
            raise UsageError("%flow batch: --concurrency must be at least 1")
        if args.max_spend is not None and args.max_spend < 0:
            raise UsageError("%flow batch: --max-spend is a number of US dollars >= 0")
        run: Callable[..., pd.DataFrame] = run_dataframe
        runs: FlowCore = flow
        if args.batch_api:  # the provider's batch API: half price, answers within 24 hours
            local = local_of(flow)
            if local is None:
                raise UsageError("%flow batch: --batch-api runs flow files, not served flows")
            run, runs = run_dataframe_batched, local
        text_fill = fill if fill is None else str(fill)
        cap = None
        extra: dict[str, Any] = {}
        if args.batch_api:  # the batched run caps its submissions itself
            extra["max_spend"] = args.max_spend
        elif args.max_spend is not None:  # within the cap: the flow seen through its gate
            runs, cap = flow.capped(
                args.max_spend, flow.preview(df, mapping or None, fill=text_fill)
            )
        try:
            out = run(
                runs,
                df,
                mapping or None,
                fill=text_fill,
                progress=args.progress,
                concurrency=args.concurrency,
                spelling=MAGIC,
                **extra,
            )
        finally:
            if cap is not None:
                print(f"flownb: {cap.line()}", file=sys.stderr)
        if args.out:
            self.shell.user_ns[args.out] = out
        if "error" in out.columns:
            failed = int(out["error"].notna().sum())
            if failed:  # the finished rows are kept; make the failures hard to miss
                print(
                    f"flownb: {failed} of {len(out)} rows did not finish; see the 'error' column",
                    file=sys.stderr,
                )
        return out

    def _connect(self, args: argparse.Namespace) -> None:
        if args.extra:
            raise UsageError(
                "%flow connect takes only a URL; the API key never goes on the magic line "
                "(set FLOWNB_API_KEY, use a .env file, or answer the prompt)"
            )
        url = args.url or resolve_run_config(local=False).service_url
        if not url:
            raise UsageError("%flow connect: give the server URL (or set FLOWNB_BASE_URL)")
        url = str(self._expand(url))
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"%flow connect: {url!r} is not an http(s) URL")
        key, where = find_api_key(prompt_for=url)
        from ..flows.client import Client

        self.client = Client(url, key)
        print(f"flownb: flow ids now run on {url} (API key from {where})")

    # ---- argument helpers -------------------------------------------------------------------

    def _lookup(self, name: str, what: str) -> Any:
        ns = self.shell.user_ns
        if name not in ns:
            raise UsageError(f"%flow: {what}: no Python variable named {name!r}")
        return ns[name]

    def _expand(self, value: str, what: str = "value") -> Any:
        """Return the value a token stands for: the object of a whole ``$name``, else the text
        with each ``$name`` of a defined variable replaced by its string and ``$$`` by ``$``."""
        whole = _WHOLE_REF.fullmatch(value)
        if whole:
            return self._lookup(whole.group(1), what)
        ns = self.shell.user_ns

        def sub(m: re.Match[str]) -> str:
            if m.group(0) == "$$":
                return "$"
            name = m.group(1)
            return str(ns[name]) if name in ns else m.group(0)

        return _VAR_REF.sub(sub, value)

    def _dataframe(self, ref: str) -> pd.DataFrame:
        import pandas as pd

        name = ref[1:] if _WHOLE_REF.fullmatch(ref) else ref
        if name.isidentifier() and name in self.shell.user_ns:
            df = self.shell.user_ns[name]
        elif ref.lower().endswith(".csv"):
            try:
                df = read_csv(ref)
            except ConfigError as exc:
                raise UsageError(f"%flow batch: --df: {exc.message}") from None
        else:
            raise UsageError(f"%flow batch: --df {ref}: no such Python variable or .csv file")
        if not isinstance(df, pd.DataFrame):
            raise UsageError(f"%flow batch: --df {ref} is a {type(df).__name__}, not a DataFrame")
        return df

    def _resolve(
        self, ref: str, provider: str | None, endpoint: str | None = None
    ) -> tuple[BaseFlow, str]:
        """Return the flow FLOW names and a note of where it came from."""
        __tracebackhide__ = True
        from ..flows.base import BaseFlow

        target = self._expand(ref, "FLOW")
        if isinstance(target, BaseFlow):
            return target, "flow object"
        if isinstance(target, Path):
            target = str(target)
        if not isinstance(target, str) or not target:
            raise UsageError(
                f"%flow: FLOW {ref} is a {type(target).__name__}; give a path, flow id or flow"
            )
        location = flow_location(target)
        if isinstance(location, Path):
            return self._local_flow(location, provider, endpoint), "local engine"
        if provider is not None or endpoint is not None:
            option = "--provider" if provider is not None else "--endpoint"
            raise UsageError(f"%flow: {option} applies to local flow files; servers choose")
        client = self.client
        if client is None:
            if not resolve_run_config(local=False).service_url:
                raise UsageError(f"%flow: {no_server(target, MAGIC).message}")
            from ..flows.client import Client

            client = self.client = Client()
        return client.flow(target), f"server {getattr(client, 'base_url', '')}".strip()

    def _local_flow(
        self, path: Path, provider: str | None, endpoint: str | None = None
    ) -> LocalFlow:
        __tracebackhide__ = True
        from ..flows.local import load_flow

        resolved = path.expanduser().resolve()
        key = (resolved, provider) if endpoint is None else (resolved, provider, endpoint)
        try:
            st = resolved.stat()
        except OSError:
            self._local.pop(key, None)
            # Raises FlowFileError naming the file.
            return load_flow(path, provider=provider, endpoint=endpoint)
        cached = self._local.get(key)
        if cached is not None and cached[:2] == (st.st_mtime_ns, st.st_size):
            return cached[2]
        flow = load_flow(resolved, provider=provider, endpoint=endpoint)
        self._local[key] = (st.st_mtime_ns, st.st_size, flow)
        return flow


def _split_line(line: str) -> tuple[bool, list[str]]:
    """Return ``(quiet, tokens)`` of a ``%flow`` line: ``quiet`` when it ends in ``;``.

    Raises:
        UsageError: the line cannot be split like a shell line (an unclosed quote).
    """
    __tracebackhide__ = True
    # IPython hides the output of a line ending in ';' but still passes the ';' to magics:
    # it is that convention, never data (a value ending in ';' is quoted).
    quiet = line.rstrip().endswith(";")
    if quiet:
        line = line.rstrip()[:-1]
    try:
        return quiet, shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"%flow: cannot split the line: {exc}") from None


def _check_subcommand(sub: str, cell: str | None) -> None:
    """Refuse an unknown subcommand, or a cell body for one other than ``run``.

    Raises:
        UsageError: naming the subcommands, or the one that takes a cell body.
    """
    __tracebackhide__ = True
    if sub not in _SUBCOMMANDS:
        raise UsageError(
            f"%flow: unknown command {sub!r}; use one of {', '.join(_SUBCOMMANDS)} (see %flow?)"
        )
    if cell is not None and sub != "run":
        raise UsageError(f"%%flow {sub}: only %%flow run takes a cell body")


def _parse_args(sub: str, rest: list[str], cell: str | None) -> argparse.Namespace:
    """Return the arguments of subcommand ``sub`` (not ``eval``); for ``run``, ``args.var`` is
    the variable a cell body fills (``--var name=value`` are pairs, as in the CLI).

    Raises:
        UsageError: arguments that do not fit the subcommand.
    """
    __tracebackhide__ = True
    parser = _parser(sub)
    args = parser.parse_intermixed_args(rest) if sub == "run" else parser.parse_args(rest)
    if getattr(args, "out", None) is not None:
        _check_identifier(args.out, "-o")
    if sub == "run":
        args.pairs += [v for v in args.var if "=" in v]
        body_vars = [v for v in args.var if "=" not in v]
        if cell is None and body_vars:
            raise UsageError(
                "%flow run: --var NAME names the variable a %%flow run cell body fills; "
                "on one line, give name=value"
            )
        if len(body_vars) > 1:
            raise UsageError("%%flow run: the cell body fills one variable; give --var once")
        args.var = body_vars[0] if body_vars else None
    return args


def _shown(result: Any, args: argparse.Namespace, quiet: bool) -> Any:
    """Return what the cell shows of a run's or batch's ``result`` (``None`` when it is hidden
    by ``-q``, or kept in ``-o VAR`` by the subcommand and displayed here instead)."""
    if args.out is None:
        return None if args.quiet else result  # IPython shows a returned value if last
    # Kept in VAR; shown here, since the magic may not be the cell's last line.
    if not (args.quiet or quiet):
        from IPython.display import display

        display(result)
    return None


def _check_identifier(name: str, option: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise UsageError(f"%flow: {option} needs a Python variable name, got {name!r}")


def _as_text(value: Any, name: str) -> str:
    """Return a variable's value as the text a flow takes (:func:`flownb.flowfile.inputs.to_text`,
    as
    for a DataFrame cell); collections and missing values are refused."""
    if isinstance(value, Mapping | list | tuple | set):
        hint = "a flow variable takes one string"
    else:
        text = to_text(value)
        if text is not None:
            return text
        hint = "it is missing (None/NaN); pass a str (or a number)"
    raise UsageError(f"%flow run: {name}= got a {type(value).__name__}; {hint}")


_notices = threading.local()  # .depth: how many _plain_notices blocks this thread is in
_hook_lock = threading.Lock()
_passed_on: Any = None  # what showed warnings before _show was put in place


def _show(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """``warnings.showwarning`` once a magic ran: plain lines for warnings a magic's own thread
    raises inside :func:`_plain_notices`; every other warning goes where it went before."""
    if getattr(_notices, "depth", 0):
        print(f"flownb: {' '.join(str(message).split())}", file=sys.stderr)
    elif _passed_on is not None:
        _passed_on(message, category, filename, lineno, file, line)


@contextmanager
def _plain_notices() -> Iterator[None]:
    """Show warnings this thread raises meanwhile (an interrupted batch's notice) as plain
    ``flownb: ...`` lines on stderr, without Python's file path and source line.

    Not by swapping ``warnings.showwarning`` for the duration (``catch_warnings``), which would
    reword the warnings of every other thread (a form's run, a progress bar) and could restore
    the wrong function when two threads overlap: the hook is put in place once, and decides
    per thread.
    """
    global _passed_on
    with _hook_lock:
        if warnings.showwarning is not _show:
            _passed_on = warnings.showwarning
            warnings.showwarning = _show
    _notices.depth = getattr(_notices, "depth", 0) + 1
    try:
        yield
    finally:
        _notices.depth -= 1


def _cell_text(cell: str) -> str:
    """Return the variable value a cell body holds: without surrounding blank lines or a
    trailing newline; inner lines and indentation kept."""
    lines = cell.splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines).rstrip()
