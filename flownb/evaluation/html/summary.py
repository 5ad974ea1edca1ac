"""The summary table of a report (``report`` in a notebook, and the saved page's summary): per
variant and metric the mean with its 95% interval and the paired test against the first
variant, the speed, the tokens and the money, with the lines that say what the figures rest on
(labels, repeats, people's win rates, the judges) and the bill. Text is written by the rules of
:mod:`.format`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..figures.money import RANK_NOTE
from ..figures.speed import sig
from .format import esc, fmt_number, fmt_p, fmt_rate, missing, money, seconds

if TYPE_CHECKING:
    from ..record.shape import ReportView

__all__ = ["SPEED_HEAD", "bill_html", "judges_html", "money_cells", "speed_cell", "summary_html"]

SPEED_HEAD = "<th>latency: mean here<br>provider p50 / p95</th>"


def summary_html(report: ReportView) -> str:
    """Return the summary as a compact table: per metric ``mean [low, high]`` (rates as
    percentages), and against the first variant the paired test's p-value (bold when the
    difference is beyond chance)."""
    summary = report.summary
    metrics = ["pass_rate"] + [s.name for s in report.scorers]
    rates = {"pass_rate"} | {s.name for s in report.scorers if s.kind == "bool" or s.rate}
    head = "".join(f"<th>{esc(m)}</th>" for m in metrics)
    priced = "price_per_row" in summary.columns  # reports kept before prices were have none
    judged = "judge_price_per_row" in summary.columns
    money_head = ""
    if priced:
        money_head = "<th>price per row (rank)</th><th>spent / saved</th>"
        if judged:
            money_head += "<th>judges: price per row</th><th>judges: spent / saved</th>"
    rows = []
    for variant, row in summary.iterrows():
        cells = [f"<td>{int(row['n'])}</td><td>{int(row['errors'])}</td>"]
        for m in metrics:
            fmt = fmt_rate if m in rates else fmt_number
            text = f"{fmt(row[m])} [{fmt(row[f'{m}_low'])}, {fmt(row[f'{m}_high'])}]"
            if f"{m}_std" in row:  # repeats: how far one repeat's figure strayed
                text += (
                    f"<br><span class='inp'>± {fmt(row[f'{m}_std'])} (repeats "
                    f"{fmt(row[f'{m}_min'])} to {fmt(row[f'{m}_max'])})</span>"
                )
            p = row.get(f"{m}_p")
            if p is not None and p == p:
                note = fmt_p(p)
                text += "<br>" + (f"<b>{note} differs</b>" if row[f"{m}_differs"] else note)
            cells.append(f"<td>{text}</td>")
        tokens = row["total_tokens"]
        tokens_text = "–" if tokens != tokens else f"{int(tokens):,}"
        cells.append(f"{speed_cell(row)}<td>{tokens_text}</td>")
        if priced:
            cells.append(money_cells(row))
        rows.append(f"<tr><th>{esc(variant)}</th>{''.join(cells)}</tr>")
    return (
        _labels_note(summary)
        + _repeats_note(summary)
        + _wins_note(report)
        + judges_html(report)
        + (
            f"<table class='flownb-eval'><thead><tr><th>variant</th><th>n</th><th>errors</th>{head}"
            f"{SPEED_HEAD}<th>total_tokens</th>{money_head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody>"
            "</table><p class='inp'>mean (pass rate for pass/fail, win rate for pick_best) [95% "
            "interval: Wilson for rates, Student t for means]; p: paired test against the first "
            "variant over the same rows (McNemar exact for rates, Wilcoxon signed-rank for scores)"
            f"{'; ' + esc(RANK_NOTE) if priced else ''}</p>"
            + bill_html(report, judged)
            + _setup_html(report)
        )
    )


def _setup_html(report: ReportView) -> str:
    """Return a table of what each variant ran on (endpoint, model, system message), or ''."""
    if not report.setup:
        return ""
    rows = []
    for variant in report.variants:
        known = report.setup.get(variant, {})
        cells = "".join(f"<td>{esc(known.get(f) or '–')}</td>" for f in ("endpoint", "model"))
        cells += f"<td>{esc(known.get('system') or '–')}</td>"
        rows.append(f"<tr><th>{esc(variant)}</th>{cells}</tr>")
    return (
        "<table class='flownb-eval'><thead><tr><th>variant</th><th>endpoint</th><th>model</th>"
        f"<th>system</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def judges_html(report: ReportView) -> str:
    """Return a line per judge naming its endpoint and model, and the variants of its vendor
    (self-preference is possible there: said, not forbidden); '' without judges."""
    lines = []
    for s in report.scorers:
        judge = s.judge
        if not judge:
            continue
        line = (
            f"judge <b>{esc(s.name)}</b>: endpoint <b class='flownb-judge-endpoint'>"
            f"{esc(judge['endpoint'])}</b>, model <b class='flownb-judge-model'>"
            f"{esc(judge['model'])}</b> ({esc(judge['vendor'])})"
        )
        same = list(judge.get("same_vendor") or ())
        if same:
            line += (
                f"; <span class='flownb-self-preference'>the same vendor as variant"
                f"{'s' * (len(same) > 1)} {esc(', '.join(same))}: a judge may favour its own "
                "vendor's answers (self-preference)</span>"
            )
        lines.append(f"<p class='inp flownb-judge'>{line}</p>")
    return "".join(lines)


def _wins_note(report: Any) -> str:
    """Return a line with the people's pairwise win rates (``report.prefer``), or nothing
    before there are any."""
    rates = report.win_rates() if hasattr(report, "win_rates") else None
    if rates is None or rates.empty:
        return ""
    parts = ", ".join(
        f"{esc(v)} {fmt_rate(r['win_rate'])} [{fmt_rate(r['win_rate_low'])}, "
        f"{fmt_rate(r['win_rate_high'])}] of {int(r['n'])}"
        for v, r in rates.iterrows()
    )
    return f"<p class='inp'>people's pairwise win rates (ties count half): {parts}</p>"


def _repeats_note(summary: Any) -> str:
    """Return a line saying how many times each row ran and how many rows flip, or nothing
    without repeats."""
    if "repeats" not in summary.columns:
        return ""
    flips = ", ".join(
        f"{esc(v)}: {int(k)} of {int(n)}"
        for v, k, n in zip(summary.index, summary["flips"], summary["n"], strict=True)
    )
    return (
        f"<p class='inp'>each row ran {int(summary['repeats'].iloc[0])} times: figures are "
        "means over the rows of each row's mean, ± the spread of the figure between repeats; "
        f"rows whose pass/fail flips between repeats: {flips}</p>"
    )


def _labels_note(summary: Any) -> str:
    """Return a line saying how many rows carry human labels per variant (what the human
    figures and any agreement rest on), or nothing before there are labels."""
    if "labels" not in summary.columns:
        return ""
    parts = ", ".join(
        f"{esc(v)}: {int(k)} of {int(n)}"
        for v, k, n in zip(summary.index, summary["labels"], summary["n"], strict=True)
    )
    return f"<p class='inp'>human labels (rows labelled per variant): {parts}</p>"


def speed_cell(row: Any) -> str:
    """Return the summary's latency cell for one variant: the mean time here, then the
    provider's p50 / p95, and how many rows they rest on (of which cached, timed as bought)."""
    text = f"{seconds(row.get('latency_s'))}"
    if "latency_p50_s" in row:
        rows = int(row.get("latency_rows") or 0)
        cached = int(row.get("latency_cached_rows") or 0)
        unknown = int(row.get("latency_unknown_rows") or 0)
        text += (
            f"<br>{seconds(row['latency_p50_s'])} / {seconds(row['latency_p95_s'])}"
            f"<br><span class='inp'>{rows} rows"
            + (f", {cached} cached (as bought)" if cached else "")
            + (f", {unknown} not timed" if unknown else "")
            + "</span>"
        )
        tps = row.get("tokens_per_s")
        if tps is not None and tps == tps:
            text += f"<br><span class='inp'>{sig(float(tps))} tokens/s</span>"
    return f"<td>{text}</td>"


def money_cells(row: Any) -> str:
    """Return a summary row's money cells: price per row with its rank, spent / saved, and
    the judges' the same way when there are judges."""
    rank = row.get("price_rank")
    ranked = "" if missing(rank) else f" ({int(rank)})"
    unpriced = row.get("unpriced_calls", 0)
    cells = (
        f"<td><b>{money(row.get('price_per_row'), unpriced)}</b>{ranked}</td>"
        f"<td>{money(row.get('spent_usd'), unpriced)} / "
        f"{money(row.get('saved_usd'), unpriced)}</td>"
    )
    if "judge_price_per_row" in row:
        unpriced = row.get("judge_unpriced_calls", 0)
        cells += (
            f"<td>{money(row.get('judge_price_per_row'), unpriced)}</td>"
            f"<td>{money(row.get('judge_spent_usd'), unpriced)} / "
            f"{money(row.get('judge_saved_usd'), unpriced)}</td>"
        )
    return cells


def bill_html(report: Any, judged: bool) -> str:
    """Return the evaluation's bill in one line (variants, judges, total: spent, saved), or
    '' for a report kept before prices were."""
    bill = getattr(report, "money", None)
    if bill is None or bill.empty:
        return ""
    parts = []
    for part in ("judges", "total") if judged else ("total",):
        if part not in bill.index:
            continue
        line = bill.loc[part]
        unpriced = line["unpriced_calls"]
        parts.append(
            f"{part}: {money(line['spent_usd'], unpriced)} spent, "
            f"{money(line['saved_usd'], unpriced)} saved by the cache, "
            f"{money(line['price_usd'], unpriced)} at list price"
        )
    return f"<p class='inp'>money: {'; '.join(parts)}</p>"
