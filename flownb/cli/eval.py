"""``flownb eval``: an evaluation from the command line, for CI pipelines to gate on.

    flownb eval flows/a.json [name=flows/b.json ...] --data rows.csv --scorers eval.toml \\
        --out report.html --min-pass 0.9

The scorers file (JSON or TOML) lists scorers and, optionally, variants of the first flow::

    [[scorers]]
    type = "contains"            # equals, contains, regex, is_json, length, judge, pick_best
    output = "intro"
    text = { col = "topic" }     # a column of the row; a plain value is a literal

    [variants.cold]              # another variant: the first flow with other params / prompts
    params = { temperature = 0 }
    prompts = { "Blog intro" = "Write about {topic}." }

    [variants.azure-mini]        # the first flow on another endpoint, model or system message
    endpoint = "azure-eu"        # an [endpoints.NAME] of flownb.toml
    model = "gpt-4o-mini"        # every text node's model (or { "Node" = "model" })
    system = "Answer in one sentence."  # (or { "Node" = "message" })

A judge entry may say who judges: ``endpoint = "NAME"`` (an ``[endpoints.NAME]`` of flownb.toml)
or ``provider = "..."``, and ``model = "..."``; without them it uses the first variant's.

The provider banner (each variant's provider, and each judge's endpoint and model, with a note
when it is of the same vendor as a variant it grades) goes to stderr before anything runs; the
summary (each metric's mean or rate with its 95% interval, then who judged) to stdout. Exit
status: 0, or 1 when some variant's pass rate is under ``--min-pass`` (or a run failed), 2 for
bad arguments or files.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import ConfigError
from ..infra.files import read_input
from ..show.escape import term_text
from .clickhelp import ProviderChoice
from .inputs import INPUT_FILE_HELP, parse_map
from .opening import MAX_SPEND_OPTION, banner, open_flow, usage_error

if TYPE_CHECKING:
    from ..core.flow import FlowCore
    from ..scorers import Scorer

# The scorers, the flow classes and the evaluation are imported when `flownb eval` runs, not for
# `flownb --help`.

__all__ = ["eval_command"]

_VARIANT_FIELDS = frozenset({"flow", "params", "prompts", "endpoint", "model", "system"})


def _variants(flows: tuple[str, ...], config: Mapping[str, Any], **options: Any) -> dict:
    from ..core.local import local_of

    variants: dict[str, FlowCore] = {}
    for ref in flows:
        name, sep, source = ref.partition("=")
        if not sep:
            name, source = "", ref
        flow = open_flow(source, **options)
        variants[name or flow.name] = flow
    first = next(iter(variants.values()))
    for name, spec in (config.get("variants") or {}).items():
        if not isinstance(spec, Mapping):
            raise ConfigError(f"variant {name!r} must be a table with params and/or prompts")
        chosen = open_flow(spec["flow"], **options) if "flow" in spec else first
        base = local_of(chosen)
        if base is None:
            raise ConfigError(
                f"variant {name!r}: params, prompts, endpoint, model and system need a local "
                "flow file"
            )
        unknown = sorted(set(spec) - _VARIANT_FIELDS)
        if unknown:
            raise ConfigError(
                f"variant {name!r}: unknown field{'s' * (len(unknown) > 1)} "
                f"{', '.join(unknown)}; known: {', '.join(sorted(_VARIANT_FIELDS))}"
            )
        if spec.get("endpoint") is not None:
            base = base.with_endpoint(str(spec["endpoint"]))
        if spec.get("model") is not None:
            base = base.with_model(spec["model"])
        if "system" in spec:
            base = base.with_system(spec["system"] or None)
        params = spec.get("params") or {}
        if params:
            if all(isinstance(v, Mapping) for v in params.values()):
                base = base.with_params(params)
            else:
                base = base.with_params(**params)
        if spec.get("prompts"):
            base = base.with_prompts(spec["prompts"])
        variants[name] = base
    return variants


def _read_data(path: str) -> Any:
    import pandas as pd

    is_json = path.lower().endswith(".json")
    try:
        raw = read_input(path, "the JSON file" if is_json else "the CSV file")
    except ConfigError as exc:
        raise click.BadParameter(exc.message, param_hint="--data") from None
    try:
        if is_json:
            return pd.DataFrame(json.loads(raw.decode("utf-8")))
        return pd.read_csv(io.BytesIO(raw), dtype=str, keep_default_na=False, na_values=[""])
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"{path} is not readable: {exc}", param_hint="--data") from None


def _banners(variants: Mapping[str, FlowCore], graders: list[Scorer]) -> None:
    """Print, once each, the banner of every provider the evaluation will call (stderr)."""
    from ..scorers.judge import JudgeScorer
    from ..scorers.judging import judged_by_line, self_preference, variant_vendor

    shown: set[str] = set()
    for flow in variants.values():
        key = repr(getattr(flow, "provider", None) or flow.name)
        if key not in shown:
            shown.add(key)
            banner(flow)
    vendors = {name: variant_vendor(flow) for name, flow in variants.items()}
    for j in graders:
        if isinstance(j, JudgeScorer):
            info = j.judged_by()
            same = self_preference(info["vendor"], vendors)
            click.echo(f"flownb: {judged_by_line(j.name, info, same)}", err=True)


def scale_text(report: Any, rows: int = 1_000_000) -> str:
    """Return each variant's price for ``rows`` rows at list price, and through the batch API
    where its provider has one, in one line."""
    from ..show.meter import usd

    parts = []
    for v, r in report.price(rows).iterrows():
        batch = r["batch_usd"]
        parts.append(
            f"{v} {usd(float(r['list_usd']))}"
            + (f" (batch {usd(batch)})" if batch == batch else "")
        )
    return f"{rows:,} rows at list price: {', '.join(parts)}"


def summary_text(report: Any) -> str:
    """Return the summary as a text table: per variant n, errors, and each metric's mean (rates
    as percentages) with its 95% interval, and its paired p-value against the first variant."""
    import pandas as pd

    from ..evaluation.figures.speed import speed_text
    from ..evaluation.html.report import fmt_number, fmt_p, fmt_rate

    summary = report.summary
    rates = {"pass_rate"} | {s.name for s in report.scorers if s.kind == "bool" or s.rate}
    metrics = ["pass_rate"] + [s.name for s in report.scorers]
    table: dict[str, list[str]] = {"n": [], "errors": []}
    for m in metrics:
        table[m] = []
    for _, row in summary.iterrows():
        table["n"].append(str(int(row["n"])))
        table["errors"].append(str(int(row["errors"])))
        for m in metrics:
            fmt = fmt_rate if m in rates else fmt_number
            text = f"{fmt(row[m])} [{fmt(row[f'{m}_low'])}, {fmt(row[f'{m}_high'])}]"
            if f"{m}_std" in row:  # repeats: the spread of the figure between repeats
                text += f" ±{fmt(row[f'{m}_std'])}"
            p = row.get(f"{m}_p")
            if p is not None and p == p:
                text += f" {fmt_p(p)}{' *' if row[f'{m}_differs'] else ''}"
            table[m].append(text)
    if "latency_p50_s" in summary.columns:
        table["p50 / p95 s"] = [speed_text(row) for _, row in summary.iterrows()]
    frame = pd.DataFrame(table, index=summary.index)
    money = "price_per_row" in summary.columns
    if money:
        from ..evaluation.figures.money import money_text

        frame["price/row (rank)"] = [
            money_text(r["price_per_row"], r["unpriced_calls"])
            + ("" if pd.isna(r["price_rank"]) else f" ({int(r['price_rank'])})")
            for _, r in summary.iterrows()
        ]
        frame["spent / saved"] = [
            f"{money_text(r['spent_usd'], r['unpriced_calls'])} / "
            f"{money_text(r['saved_usd'], r['unpriced_calls'])}"
            for _, r in summary.iterrows()
        ]
        if "judge_price_per_row" in summary.columns:
            frame["judges: price/row"] = [
                money_text(r["judge_price_per_row"], r["judge_unpriced_calls"])
                for _, r in summary.iterrows()
            ]
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        text = frame.to_string()
    note = "mean or rate [95% interval]"
    if "latency_p50_s" in summary.columns:
        note += "; p50 / p95: seconds at the provider per row (rows timed)"
    if "repeats" in summary.columns:
        flips = ", ".join(f"{v} {int(k)}" for v, k in summary["flips"].items())
        note += (
            f"; each row ran {int(summary['repeats'].iloc[0])} times: means of per-row means; "
            f"rows whose pass/fail flips: {flips}"
        )
    if len(summary) > 1:
        note += "; p: paired test against the first variant (* differs, p < 0.05)"
    if money:
        from ..evaluation.figures.money import RANK_NOTE

        note += f"; {RANK_NOTE}"
    from ..scorers.judging import judged_by_line

    judges = [
        judged_by_line(s.name, s.judge, s.judge.get("same_vendor") or ())
        for s in report.scorers
        if getattr(s, "judge", None)
    ]
    return "\n".join([text, f"({note})", *judges])


def money_line(report: Any) -> str | None:
    """Return the evaluation's bill in one line: spent and saved, the judges' part apart and
    in the total (None for a report without prices)."""
    from ..evaluation.figures.money import money_text

    bill = report.money
    if bill.empty:
        return None
    total = bill.loc["total"]
    line = (
        f"money: {money_text(total['spent_usd'], total['unpriced_calls'])} spent, "
        f"{money_text(total['saved_usd'], total['unpriced_calls'])} saved by the cache"
    )
    if "judges" in bill.index:
        judges = bill.loc["judges"]
        line += (
            f" (judges: {money_text(judges['spent_usd'], judges['unpriced_calls'])} spent, "
            f"{money_text(judges['saved_usd'], judges['unpriced_calls'])} saved)"
        )
    return line


@click.command("eval")
@click.argument("flows", nargs=-1, required=True)
@click.option(
    "--data",
    "data_path",
    required=True,
    help=f"Rows to run: a .csv or .json file ({INPUT_FILE_HELP}).",
)
@click.option(
    "--scorers",
    "config_path",
    required=True,
    help=f"Scorers (and variants): a .json or .toml file ({INPUT_FILE_HELP}).",
)
@click.option("--out", "out_path", help="Write the report: .html, .csv or .json.")
@click.option(
    "--raw-csv",
    is_flag=True,
    help="Write --out .csv cells exactly as they are (by default a cell that would run as a "
    "spreadsheet formula gets a leading ').",
)
@click.option(
    "--min-pass",
    type=click.FloatRange(0, 1),
    default=None,
    help="Exit 1 if a variant's pass rate is below this (0..1).",
)
@click.option("--fill", default=None, help="Use this for empty cells instead of refusing them.")
@click.option(
    "--map",
    "map_pairs",
    multiple=True,
    metavar="VAR=COLUMN",
    help="Take a variable from a differently named data column (repeatable).",
)
@click.option(
    "--provider",
    type=ProviderChoice(),
    default=None,
    help="Model provider for local flow files.",
)
@click.option(
    "--endpoint",
    metavar="NAME",
    default=None,
    help="Endpoint declared as [endpoints.NAME] in flownb.toml, for the flow files.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Most provider calls in flight at once, across every variant and judge "
    "(default: FLOWNB_CONCURRENCY, 16).",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="K",
    help="Run each (variant, row), judges included, K times (each repeat cached apart): the "
    "summary gives per-row means, their spread and the rows whose pass/fail flips.",
)
@click.option(
    "--frontier",
    "frontier_path",
    metavar="PATH",
    default=None,
    help="Draw quality (pass rate) against price per row, speed as colour, to a .png or .svg, "
    "and print which variants are on the frontier.",
)
@click.option(
    "--min-quality",
    type=click.FloatRange(0, 1),
    default=None,
    metavar="Q",
    help="Choose among variants whose pass rate's 95%% lower bound is at least Q (with the "
    "other bars: the cheapest that clears them).",
)
@click.option(
    "--max-price",
    type=click.FloatRange(min=0),
    default=None,
    metavar="USD",
    help="Choose among variants whose price per row is at most USD.",
)
@click.option(
    "--max-p95",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Choose among variants whose p95 latency at the provider is at most SECONDS.",
)
@click.option(
    "--save-choice",
    "choice_path",
    metavar="PATH",
    default=None,
    help="Write the chosen variant's flow to PATH (.json, as the web tool exports flows); "
    "exits 1 when no variant meets the bars.",
)
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the calls the evaluation would make (a summary per node; --details: every "
    "call's rendered prompt).",
)
@click.option(
    "--details", is_flag=True, help="With --dry-run: every call's rendered prompt, one a line."
)
@MAX_SPEND_OPTION
def eval_command(
    flows: tuple[str, ...],
    data_path: str,
    config_path: str,
    out_path: str | None,
    raw_csv: bool,
    min_pass: float | None,
    fill: str | None,
    map_pairs: tuple[str, ...],
    provider: str | None,
    endpoint: str | None,
    concurrency: int | None,
    repeats: int,
    frontier_path: str | None,
    min_quality: float | None,
    max_price: float | None,
    max_p95: float | None,
    choice_path: str | None,
    no_progress: bool,
    dry_run: bool,
    details: bool,
    max_spend: float | None,
) -> None:
    """Evaluate FLOWS (files or ids; NAME=FLOW names a variant) over --data with --scorers."""
    from ..evaluation.running.config import load_config, make_scorer
    from ..evaluation.running.jobs import _bind_judges
    from ..evaluation.running.run import evaluate
    from ..scorers.judge import JudgeScorer

    try:
        mapping = parse_map(map_pairs)
    except ConfigError as exc:
        raise usage_error("--map", exc) from None
    if out_path and Path(out_path).suffix.lower() not in (".html", ".csv", ".json"):
        raise click.BadParameter("must end in .html, .csv or .json", param_hint="--out")
    if frontier_path and Path(frontier_path).suffix.lower() not in (".png", ".svg"):
        raise click.BadParameter("must end in .png or .svg", param_hint="--frontier")
    bars = (min_quality, max_price, max_p95)
    if choice_path is None and any(bar is not None for bar in bars):
        raise click.UsageError("--min-quality, --max-price and --max-p95 go with --save-choice")
    if choice_path and Path(choice_path).suffix.lower() != ".json":
        raise click.BadParameter("must end in .json", param_hint="--save-choice")
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        raise click.BadParameter(exc.message, param_hint="--scorers") from None
    specs = config.get("scorers") or []
    if not isinstance(specs, list):
        raise ConfigError(f"{config_path}: 'scorers' must be a list")
    graders = [make_scorer(s) for s in specs]
    variants = _variants(
        flows, config, provider=provider, concurrency=concurrency, endpoint=endpoint
    )
    data = _read_data(data_path)
    data.attrs["name"] = Path(data_path).name  # the data set's name in the report
    _bind_judges([g for g in graders if isinstance(g, JudgeScorer)], variants)
    _banners(variants, graders)
    result = evaluate(
        variants,
        data,
        graders,
        columns=mapping or None,
        fill=fill,
        concurrency=concurrency,
        progress=not no_progress,
        dry_run=dry_run,
        repeats=repeats,
        max_spend=max_spend,
    )
    if dry_run:
        text = str(result) if details else result.brief("add --details")  # type: ignore[union-attr]
        click.echo(term_text(text))
        return
    report = result
    if out_path:
        report.save(out_path, safe_csv=not raw_csv)  # type: ignore[union-attr]
        click.echo(f"flownb: wrote the report to {out_path}", err=True)
    summary = report.summary  # type: ignore[union-attr]
    click.echo(term_text(summary_text(report)))
    if frontier_path:
        frontier = report.frontier()  # type: ignore[union-attr]
        frontier.save(frontier_path)
        click.echo(term_text(frontier.sentence))  # variant names are text
        click.echo(f"flownb: wrote the frontier to {frontier_path}", err=True)
    line = money_line(report)
    if line is not None:  # what the evaluation spent and saved, the judges' part apart
        click.echo(f"flownb: {line}", err=True)
    click.echo(f"flownb: {scale_text(report)}", err=True)
    click.echo(f"flownb: evaluation {report.id}", err=True)  # type: ignore[union-attr]
    chose = True
    if choice_path:
        chose = _save_choice(report, choice_path, *bars)
    if min_pass is not None:
        low = summary[summary["pass_rate"].fillna(0) < min_pass]
        if len(low):
            rates = ", ".join(f"{v} {r:.3f}" for v, r in low["pass_rate"].fillna(0).items())
            click.echo(f"flownb: pass rate under --min-pass {min_pass:g}: {rates}", err=True)
            sys.exit(1)
    if not chose:
        sys.exit(1)


def _save_choice(
    report: Any,
    path: str,
    min_quality: float | None,
    max_price: float | None,
    max_p95: float | None,
) -> bool:
    """Print the choice among ``report``'s variants and write the chosen one's flow to
    ``path``; return whether a variant was chosen (when none was, print why)."""
    choice = report.choose(min_quality=min_quality, max_price=max_price, max_p95=max_p95)
    click.echo(term_text(choice.verdict))  # variant names are text
    if choice.variant is None:
        for line in choice.advice:
            click.echo(term_text(line), err=True)
        click.echo(f"flownb: nothing written to {path}", err=True)
        return False
    choice.save(path)
    click.echo(term_text(f"flownb: wrote {choice.variant}'s flow to {path}"), err=True)
    return True
