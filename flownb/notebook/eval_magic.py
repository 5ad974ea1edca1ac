"""``%flow eval``: an evaluation from a notebook line.

    %flow eval $flow name=$variant ... --df $df --scorers $scorers [--scorers $more]
               [--out report.html] [--min-pass 0.9] [--concurrency N] [--repeats K]
               [--max-spend USD]
               [--no-progress] [-o VAR]

FLOW is a flow file, a flow id, ``$flow`` (a flow object) or ``$variants`` (a dict of variant
name -> flow); ``NAME=FLOW`` names a variant. ``--scorers`` takes ``$name`` of a scorer or a
list of scorers, or a .json/.toml scorers file (as ``flownb eval``). Returns the report.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from ..flows.base import BaseFlow
from ..scorers import Scorer
from .args import MagicParser

__all__ = ["EvalMagics", "eval_help"]


_DESCRIPTION = """\
Evaluate flows over the rows of a DataFrame with scorers; returns the report (an EvalReport:
.summary, .results, .compare(), .plot(), .save()). FLOW is a flow file, a flow id, $flow (a flow
object) or $variants (a dict of variant name -> flow); NAME=FLOW names a variant."""


def _parser() -> MagicParser:
    p = MagicParser(
        prog="flow eval",
        add_help=False,
        allow_abbrev=False,
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("flows", nargs="+", metavar="FLOW", help="the variants to compare")
    p.add_argument(
        "--df",
        dest="df",
        metavar="DF",
        required=True,
        help="the rows: a DataFrame variable ($df or df) or a .csv path",
    )
    p.add_argument(
        "--scorers",
        dest="scorers",
        action="append",
        default=[],
        metavar="$S",
        help="a scorer or a list of scorers ($name), or a .json/.toml scorers file; repeatable",
    )
    p.add_argument(
        "--out",
        dest="out_path",
        default=None,
        metavar="FILE",
        help="save the report (.html, .csv or .json)",
    )
    p.add_argument(
        "--min-pass",
        dest="min_pass",
        type=float,
        default=None,
        metavar="X",
        help="say which variants pass under this rate (0..1)",
    )
    p.add_argument(
        "--concurrency", type=int, default=None, metavar="N", help="provider calls in flight"
    )
    p.add_argument(
        "--max-spend",
        dest="max_spend",
        type=float,
        default=None,
        metavar="USD",
        help="stop paying at this many US dollars (variants and judges together)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="K",
        help="run each (variant, row) K times: means, spread and rows that flip",
    )
    p.add_argument(
        "--endpoint",
        metavar="NAME",
        default=None,
        help="an [endpoints.NAME] of flownb.toml, for the flow files",
    )
    p.add_argument(
        "--fill", default=None, metavar="TEXT", help="use TEXT for empty cells instead of refusing"
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.add_argument("-o", dest="out", metavar="VAR", default=None, help="keep the report in VAR")
    return p


def eval_help() -> str:
    """Return ``%flow eval --help``: its usage, what it does and every option."""
    parser = _parser()
    parser.prog = "%flow eval"  # as typed; error messages add the % themselves
    return parser.format_help().rstrip()


class EvalMagics:
    """The ``%flow eval`` part of :class:`~flownb.notebook.magics.FlowMagics` (a mixin: it uses
    the magic's ``$name`` expansion, flow resolution and DataFrame lookup)."""

    if TYPE_CHECKING:  # provided by FlowMagics
        shell: Any

        def _expand(self, ref: str, what: str) -> Any: ...
        def _resolve(
            self, source: str, provider: str | None, endpoint: str | None = None
        ) -> Any: ...
        def _dataframe(self, ref: str) -> Any: ...

    def _eval_scorers(self, refs: list[str]) -> list[Scorer]:
        found: list[Scorer] = []
        for ref in refs:
            if ref.lower().endswith((".json", ".toml")):
                from ..evaluation.running.config import load_config, make_scorer

                found += [make_scorer(s) for s in load_config(ref).get("scorers") or []]
                continue
            value = self._expand(ref, "--scorers")
            items = [value] if isinstance(value, Scorer) else value
            if not isinstance(items, list | tuple) or not all(isinstance(s, Scorer) for s in items):
                raise UsageError(
                    f"%flow eval: --scorers {ref} is not a scorer or a list of scorers "
                    "(build them with flownb.scorers)"
                )
            found += list(items)
        return found

    def _eval_variants(self, refs: list[str], endpoint: str | None = None) -> dict[str, BaseFlow]:
        variants: dict[str, BaseFlow] = {}
        for ref in refs:
            name, sep, source = ref.partition("=")
            if not sep or not name.isidentifier():
                name, source = "", ref
            value = self._expand(source, "FLOW")
            if isinstance(value, Mapping):
                variants.update(value)
                continue
            flow = (
                value if isinstance(value, BaseFlow) else self._resolve(source, None, endpoint)[0]
            )
            variants[name or flow.name] = flow
        return variants

    def _eval(self, tokens: list[str]) -> Any:
        """Run ``%flow eval`` with the line's ``tokens`` (after ``eval``); return the report."""
        __tracebackhide__ = True
        from ..evaluation.running.run import evaluate

        args = _parser().parse_intermixed_args(tokens)
        if not args.scorers:
            raise UsageError("%flow eval: give --scorers $name (a scorer or a list of scorers)")
        report = evaluate(
            self._eval_variants(args.flows, args.endpoint),
            self._dataframe(args.df),
            self._eval_scorers(args.scorers),
            fill=args.fill,
            concurrency=args.concurrency,
            progress=args.progress,
            repeats=args.repeats,
            max_spend=args.max_spend,
        )
        if args.out:
            self.shell.user_ns[args.out] = report
        if args.out_path:
            report.save(args.out_path)  # type: ignore[union-attr]
        if args.min_pass is not None:
            rates = report.summary["pass_rate"].fillna(0)  # type: ignore[union-attr]
            low = rates[rates < args.min_pass]
            if len(low):
                shown = ", ".join(f"{v} {r:.3f}" for v, r in low.items())
                print(f"flownb: pass rate under {args.min_pass:g}: {shown}", file=sys.stderr)
        return report
