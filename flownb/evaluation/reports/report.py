"""What :func:`flownb.evaluate` returns: the long results frame, a summary per variant with
intervals and paired tests, and views of both (side by side, a plot, files, a diff)."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError
from ...show.frame_views import mark_frame
from ..decision.price import price_per_row
from ..figures import stats
from ..figures.money import bill, price_ranks, summary_money
from ..figures.speed import variant_speed
from ..labels.labelling import Labelled
from ..labels.preferences import Preferring
from ..record.shape import ScorerInfo

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["EvalReport", "ScorerInfo"]

ALPHA = 0.05  # a paired test's p-value below this marks a variant as differing from the first


class EvalReport(Labelled, Preferring):
    """An evaluation's results.

    Attributes:
        id: the evaluation's id in the run log (``report.diff(id)`` reads it back).
        results: one row per (variant, input row): ``variant``, the input row's index and
            columns, every output, one column per scorer (``<name>_reason`` where reasons
            exist), ``passed``, ``latency_s`` (the row's time here, cache included),
            ``provider_s`` (its time at the provider on the critical path, see
            :mod:`flownb.evaluation.figures.speed`), ``output_tokens`` and ``fresh_s`` (output
            tokens and provider seconds of the calls that went to the provider this run),
            ``total_tokens``, ``spent_usd`` (US dollars this run paid for the row: 0 when
            cached), ``saved_usd`` (what the cache saved),
            ``price_usd`` (the row's list price: its calls at what they cost when bought,
            cached or not), ``unpriced_calls`` (calls without a known price, left out of
            those), with judges ``judge_calls``, ``judge_spent_usd``, ``judge_saved_usd``,
            ``judge_price_usd``, ``judge_unpriced_calls`` (the judges' calls grading the row;
            a ``pick_best`` call shared evenly among the variants), ``cached``, ``error``.
            With repeats (``evaluate(..., repeats=k)``): per-row means over the
            repeats (a pass/fail scorer's column and ``passed`` become the share of repeats
            that passed), ``flips`` (pass/fail differed between repeats), the outputs and
            reasons of repeat 0, summed tokens, spent and saved, the mean price of one run,
            the first error; see :attr:`runs`.
        repeats: how many times each (variant, row) ran (1 without ``repeats=``).
        variants: the variant names, in the order given (the first is the baseline).
        context: what was evaluated, for a report read later: ``title``, ``dataset`` (name,
            rows, columns), and per variant its flow, provider, endpoint, models and nodes
            (name, kind, prompt, model parameters), and ``repeats`` when the rows ran several
            times; empty when not known.
        flows: variant name -> the flow it ran, in the process that ran it (empty for a report
            read back).
        flow_files: variant name -> its flow as :meth:`flownb.LocalFlow.export` writes it (kept
            with the evaluation, so :meth:`choose` of a report read back can give the flow).
        setup: per variant, what it ran on (``endpoint``, ``model``, ``system``: the system
            message, ``None`` when it has none); shown in the summary and the HTML report.
    """

    def __init__(
        self,
        results: pd.DataFrame,
        variants: list[str],
        scorers: list[ScorerInfo],
        *,
        outputs: list[str],
        kinds: dict[str, str],
        index_name: str = "index",
        inputs: list[str] | None = None,
        id: str | None = None,
        home: Path | None = None,
        context: dict[str, Any] | None = None,
        setup: dict[str, dict[str, str | None]] | None = None,
        flows: Mapping[str, Any] | None = None,
        flow_files: Mapping[str, dict[str, Any]] | None = None,
    ) -> None:
        self.setup = setup or {}
        # Variant name -> the flow it ran (this process only; a report read back has none).
        self.flows: dict[str, Any] = dict(flows or {})
        self.flow_files: dict[str, dict[str, Any]] = dict(flow_files or {})
        self.results = mark_frame(results)
        self.variants = variants
        self.scorers = scorers
        self.outputs = outputs
        self.kinds = kinds
        self.index_name = index_name
        self.inputs = inputs or []
        self.id = id or uuid.uuid4().hex[:12]
        self.created = time.time()
        # The FLOWNB_HOME whose run log keeps this evaluation (None: not kept).
        self.home = home
        self.context: dict[str, Any] = context or {}
        # Variant name -> its set-up as text (provider, model, prompts, params), for trackers.
        self.variant_params: dict[str, dict[str, str]] = {}
        self.repeats = 1
        self._runs: pd.DataFrame | None = None  # every repeat's results, when there are several

    # -- repeats -----------------------------------------------------------------------------------

    def set_runs(self, runs: pd.DataFrame) -> None:
        """Make this report one of several repeats: ``runs`` is every run (the results of each
        repeat, a ``repeat`` column, ordered by variant, row and repeat); :attr:`results`
        becomes their per-row means (see :func:`flownb.evaluation.reports.spread.combine`)."""
        from .spread import combine

        self.repeats = int(runs["repeat"].max()) + 1 if len(runs) else 1
        self._runs = mark_frame(runs)
        self.results = mark_frame(combine(runs, self.scorers, self.variants))
        self.__dict__.pop("summary", None)

    @property
    def runs(self) -> pd.DataFrame:
        """Every run, one row per (variant, input row, repeat): the columns of :attr:`results`
        for that one run, with ``repeat`` (0 to k-1) after the input row's index. Without
        repeats, :attr:`results` with ``repeat`` 0."""
        if self._runs is not None:
            return self._runs
        runs = self.results.copy()
        runs.insert(runs.columns.get_loc(self.index_name) + 1, "repeat", 0)
        return mark_frame(runs)

    @property
    def spread(self) -> pd.DataFrame:
        """The spread over the repeats, one row per (variant, input row): ``variant``, the row's
        index, ``repeats``, and for ``passed`` and each scorer ``<name>_mean``, ``<name>_std``,
        ``<name>_min``, ``<name>_max`` (pass/fail as 1/0), and ``flips``."""
        from .spread import row_spread

        return row_spread(self.runs, self.scorers, self.variants, self.index_name)

    @property
    def flips(self) -> pd.DataFrame:
        """The rows of :attr:`results` whose pass/fail differed between repeats (none without
        repeats): answers the evaluation cannot vouch for, worth a look or more repeats."""
        if "flips" not in self.results.columns:
            return self.results.iloc[0:0]
        return self.results[self.results["flips"]]

    # -- summary ---------------------------------------------------------------------------------

    @cached_property
    def summary(self) -> pd.DataFrame:
        """One row per variant (index: variant name): ``n``, ``errors``, ``pass_rate`` and per
        scorer its mean (the pass rate for pass/fail scorers, the win rate for ``pick_best``),
        each with a 95% interval (``_low``/``_high``: Wilson for rates, Student t for means);
        mean ``latency_s``; the speed at the provider (see :mod:`flownb.evaluation.figures.speed`):
        ``latency_p50_s`` and ``latency_p95_s`` over the rows whose time is known,
        ``latency_rows`` (how many), ``latency_cached_rows`` (of those, served from the cache
        and timed as when bought), ``latency_unknown_rows`` (left out), ``tokens_per_s`` (output
        tokens per second of provider time); ``usd_per_1m_rows`` (a million rows at list price;
        see :meth:`price`); summed ``total_tokens``; the money, three figures never mixed (see
        :mod:`flownb.evaluation.figures.money`): ``price_per_row`` (what one row costs at list
        price, from the tokens each answer used when it was bought, cached or not: the same on
        every re-run) and ``price_rank`` (1: the cheapest per row), ``spent_usd`` (what this run
        paid; cache hits cost 0), ``saved_usd`` (what the cache saved) and ``unpriced_calls``
        (calls without a known price, left out: the figures are then lower bounds; NaN when
        none has a price); with judges, ``judge_price_per_row``, ``judge_spent_usd``,
        ``judge_saved_usd`` and ``judge_unpriced_calls``: the judges' calls grading this
        variant's rows, apart (:attr:`money` adds them up). With two or more variants,
        ``<name>_p`` and ``<name>_differs``: a paired test
        against the first variant over the same rows (McNemar exact for rates, Wilcoxon
        signed-rank or a sign test for scores), differing when p < 0.05. With repeats, every
        figure rests on the per-row means (t intervals, and Wilcoxon or the sign test on them),
        and ``repeats``, ``flips`` (rows whose pass/fail differed between repeats) and per
        metric ``_std``, ``_min``, ``_max`` (of the figure each repeat alone gives) say how far
        a single run could have strayed. Where known,
        ``endpoint``, ``model`` and ``system`` say what each variant ran on. Per judge (``judge``,
        ``pick_best``), ``<name>_judged_by`` names its endpoint and model (``"ge ·
        gemini-2.5-flash"``) and ``<name>_same_vendor`` says whether the judge's model is of this
        variant's vendor (self-preference is possible: see :attr:`judges`). Once rows carry
        human labels, ``labels``: how many of the variant's rows are labelled.
        """
        import pandas as pd

        res = self.results
        groups = {v: res[res["variant"] == v] for v in self.variants}
        # Rates (pass/fail scorers, pick_best's 0/1 wins) get Wilson intervals and McNemar.
        metrics = [("pass_rate", "bool")] + [
            (s.name, "bool" if s.rate else s.kind) for s in self.scorers
        ]
        spread: dict[str, dict[str, float]] = {}
        if self.repeats > 1:
            from .spread import variant_spread

            spread = variant_spread(self.runs, self.scorers, self.variants)
            # Per-row shares and means: intervals and paired tests for scores apply.
            metrics = [(name, "float") for name, _ in metrics]
        runs = self.runs
        rows = [
            self._summary_row(v, groups, metrics, runs[runs["variant"] == v], spread.get(v))
            for v in groups
        ]
        summary = pd.DataFrame(rows, index=pd.Index(self.variants, name="variant"))
        if "price_per_row" in summary.columns:  # comparisons rank by the price of a row
            summary.insert(
                summary.columns.get_loc("price_per_row") + 1,
                "price_rank",
                price_ranks(summary["price_per_row"]),
            )
        per_row = price_per_row(summary)
        summary.insert(summary.columns.get_loc("total_tokens"), "usd_per_1m_rows", per_row * 1e6)
        return self._with_label_counts(summary)  # how many labels the human figures rest on

    def _summary_row(
        self,
        v: str,
        groups: Mapping[str, pd.DataFrame],
        metrics: Sequence[tuple[str, str]],
        runs: pd.DataFrame,
        spread: Mapping[str, float] | None,
    ) -> dict[str, Any]:
        """Return variant ``v``'s row of the summary (see :attr:`summary`) from its results in
        ``groups``, its ``runs`` (every repeat's) and, with repeats, its ``spread``."""
        import numpy as np

        g = groups[v]
        first = self.variants[0]
        row: dict[str, Any] = {"n": len(g), "errors": int(g["error"].notna().sum())}
        for name, kind in metrics:
            row.update(_metric(g["passed"] if name == "pass_rate" else g[name], name, kind))
            if len(groups) > 1:
                p = math.nan if v == first else stats.paired_p(groups[first], g, name, kind)
                row[f"{name}_p"] = p
                row[f"{name}_differs"] = bool(p < ALPHA) if not math.isnan(p) else False
        row["latency_s"] = (
            float(np.nanmean(g["latency_s"])) if g["latency_s"].notna().any() else math.nan
        )
        row.update(variant_speed(runs))  # over every repeat's run
        row["total_tokens"] = float(g["total_tokens"].sum(min_count=1))
        row.update(summary_money(g))  # spent, saved, price per row; the judges' apart
        if spread is not None:
            row["repeats"] = self.repeats
            row.update(spread)
            row["flips"] = int(row["flips"])
        row.update(self._ran_on(v))
        return row

    def _ran_on(self, v: str) -> dict[str, Any]:
        """Return what variant ``v`` ran on (where known) and, per judge, who judged it and
        whether the judge is of its vendor."""
        row: dict[str, Any] = {}
        if self.setup:
            known = self.setup.get(v, {})
            for field in ("endpoint", "model", "system"):
                row[field] = known.get(field)
        for s in self.scorers:
            if s.judge:
                row[f"{s.name}_judged_by"] = f"{s.judge['endpoint']} · {s.judge['model']}"
                row[f"{s.name}_same_vendor"] = v in (s.judge.get("same_vendor") or ())
        return row

    @property
    def money(self) -> pd.DataFrame:
        """The evaluation's bill: one row per variant, ``judges`` (every judge's calls) and
        ``total`` (variants and judges), with ``spent_usd`` (what this run paid),
        ``saved_usd`` (what the cache saved), ``price_usd`` (all of it at list price, the same
        on every re-run), ``price_per_row`` (per input row) and ``unpriced_calls`` (calls
        without a known price, left out of the sums: then lower bounds). Empty for reports
        kept before prices were."""
        import pandas as pd

        summary = self.summary
        if "price_per_row" not in summary.columns:
            return pd.DataFrame()
        return bill(summary, int(summary["n"].max()) if len(summary) else 0)

    @property
    def judges(self) -> pd.DataFrame:
        """Who judged, one row per judge (index: its column name): ``endpoint`` (the endpoint's
        name, else the provider's), ``model`` (as sent), ``vendor``, and ``same_vendor``: the
        variants of the judge's vendor, comma-separated (a judge may favour its own vendor's
        answers: give it an endpoint of another vendor to avoid it). Empty without judges."""
        import pandas as pd

        rows = {
            s.name: {
                "endpoint": s.judge["endpoint"],
                "model": s.judge["model"],
                "vendor": s.judge["vendor"],
                "same_vendor": ", ".join(s.judge.get("same_vendor") or ()),
            }
            for s in self.scorers
            if s.judge
        }
        columns = ["endpoint", "model", "vendor", "same_vendor"]
        frame = pd.DataFrame.from_dict(rows, orient="index", columns=columns)
        frame.index.name = "judge"
        return frame

    # -- the decision: price at scale, the frontier, the choice -----------------------------------

    def price(self, rows: int = 1_000_000) -> pd.DataFrame:
        """Return what each variant costs for ``rows`` rows (index: variant): ``price_per_row``
        (list price; see :func:`flownb.evaluation.decision.price.price_per_row`), ``rows``,
        ``list_usd``, ``batch_usd`` (through the provider's batch API at half price; NaN where
        it has none), ``judges_usd`` (the judges' price for those rows, apart) and
        ``total_usd`` (list price plus judges).

        Raises:
            ConfigError: ``rows`` is not a whole number of at least 1.
        """
        from ..decision.price import price_table

        return price_table(self.summary, self.context, rows)

    def frontier(
        self,
        quality: str = "pass_rate",
        price: str | None = None,
        speed: str | None = "latency_p95_s",
    ) -> Any:
        """Return the :class:`~flownb.evaluation.decision.frontier.Frontier`: ``quality``
        (``pass_rate`` or a scorer's name) against ``price`` (a summary column; default: the
        price per row), each point with its 95% interval, ``speed`` (a summary column, None:
        none) as its colour, the Pareto-efficient variants joined and the dominated ones faded.
        Shown as SVG in a notebook; ``.sentence`` says which variants are efficient and which
        pairs the data cannot tell apart (intervals overlap or paired test p >= 0.05);
        ``.save("f.png")``.

        Raises:
            ConfigError: an unknown quality, price or speed column.
        """
        from ..decision.frontier import report_frontier

        return report_frontier(self, quality, price, speed)

    def choose(
        self,
        min_quality: float | None = None,
        max_price: float | None = None,
        max_p95: float | None = None,
        *,
        quality: str = "pass_rate",
    ) -> Any:
        """Return the :class:`~flownb.evaluation.decision.choose.Choice`: the cheapest variant whose
        ``quality`` (``pass_rate`` or a scorer) has a 95% lower bound of at least
        ``min_quality``, whose price per row is at most ``max_price`` (US dollars) and whose p95
        latency at the provider is at most ``max_p95`` seconds (a bar left None is not applied).
        Its repr states the rule and every variant's numbers; when no variant qualifies it says
        why, how many more rows would decide it and which rows to label. ``choice.flow`` is the
        chosen variant's flow and ``choice.save(path)`` writes it as the web tool exports flows.

        Raises:
            ConfigError: an unknown quality, or a bar that is not a number.
        """
        from ..decision.choose import report_choice

        return report_choice(self, quality, min_quality, max_price, max_p95)

    # -- views -----------------------------------------------------------------------------------

    def compare(self, output: str | list[str] | None = None, *, limit: int | None = 100) -> Any:
        """Return the side-by-side view (rich HTML in a notebook): one row per input, one column
        per variant, differences from the first variant highlighted, images as thumbnails, the
        scores under each output. ``output`` picks outputs; ``limit`` caps the rows shown."""
        from IPython.display import HTML

        from ..html.compare import compare_html

        if isinstance(output, str) and output not in self.outputs:
            raise ConfigError(f"no output {output!r}; the outputs are {self.outputs}")
        return HTML(compare_html(self, output, limit))

    def plot(self) -> Any:
        """Return a matplotlib figure: each scorer's mean (pass rate for pass/fail) per variant,
        with its 95% interval."""
        import matplotlib.pyplot as plt

        summary = self.summary
        metrics = ["pass_rate"] + [s.name for s in self.scorers]
        rates = {"pass_rate"} | {s.name for s in self.scorers if s.kind == "bool" or s.rate}
        fig, axes = plt.subplots(
            1,
            len(metrics),
            figsize=(2.6 * len(metrics) + 1, 0.45 * len(self.variants) + 1.4),
            squeeze=False,
            sharey=True,
        )
        ys = list(range(len(self.variants)))
        for ax, name in zip(axes[0], metrics, strict=True):
            mean = summary[name].to_numpy(dtype=float)
            low = summary[f"{name}_low"].to_numpy(dtype=float)
            high = summary[f"{name}_high"].to_numpy(dtype=float)
            below = [m - lo if lo == lo else 0.0 for m, lo in zip(mean, low, strict=True)]
            above = [hi - m if hi == hi else 0.0 for m, hi in zip(mean, high, strict=True)]
            err = [[max(x, 0.0) for x in below], [max(x, 0.0) for x in above]]
            ax.errorbar(mean, ys, xerr=err, fmt="o", capsize=3)
            ax.set_title(name, fontsize=9)
            if name in rates:  # rates and pass/fail scores on one fixed scale
                ax.set_xlim(-0.05, 1.05)
            ax.grid(axis="x", alpha=0.3)
        axes[0][0].set_yticks(ys, self.variants)
        axes[0][0].set_ylim(len(ys) - 0.5, -0.5)  # first variant on top
        fig.tight_layout()
        plt.close(fig)  # shown once, as the value returned (not again by pyplot)
        return fig

    def save(self, path: str | Path, *, safe_csv: bool = True) -> Path:
        """Write the report: ``.html`` (self-contained: summary and side-by-side view, images
        embedded, no request when opened), ``.csv`` (the results) or ``.json`` (id, summary and
        results). Returns the path.

        A ``.csv`` is made for spreadsheets: a cell that would run as a formula there (text
        starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) gets a leading
        ``'``. ``safe_csv=False`` writes every cell exactly as it is, for programs.

        Raises:
            ConfigError: another file extension.
        """
        p = Path(path)
        suffix = p.suffix.lower()
        if suffix == ".html":
            from ..html.page import page_html

            p.write_text(page_html(self), encoding="utf-8")
        elif suffix == ".csv":
            from ...show.spreadsheet import csv_text

            p.write_text(csv_text(self.results, safe=safe_csv), encoding="utf-8")
        elif suffix == ".json":
            import orjson

            data: dict[str, Any] = {
                "id": self.id,
                "context": self.context,
                "variants": self.variants,
                "scorers": [asdict(s) for s in self.scorers],
                "summary": _records(self.summary.reset_index()),
                "results": _records(self.results),
            }
            if self.repeats > 1:
                data["repeats"] = self.repeats
                data["runs"] = _records(self.runs)
            p.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
        else:
            raise ConfigError(f"save() writes .html, .csv or .json, not {p.name!r}")
        return p

    # -- the run log -------------------------------------------------------------------------------

    def store(self, home: Path | None = None) -> None:
        """Keep this evaluation's scores in the run log of ``home`` (default: the FLOWNB_HOME
        the evaluation ran with), ``home/runs.sqlite``.

        Raises:
            ConfigError: no home given and the evaluation ran with no run log.
        """
        from ..record.store import save_scores

        home = home or self.home
        if home is None:
            raise ConfigError("this evaluation has no run log; pass store(home=...)")
        self.home = home
        save_scores(self, home)
        self._store_labels(home)
        self._store_preferences(home)

    def diff(self, other: EvalReport | str) -> pd.DataFrame:
        """Return the (variant, input row) pairs whose scores or pass changed from ``other``
        (another report, or the id of an earlier evaluation in the run log): ``variant``, the
        row's index, and ``<column>_before`` / ``<column>_after`` for each column that changed.

        Raises:
            ConfigError: no evaluation with that id in the run log.
        """
        from ..record.store import diff_frames, load_scores

        if isinstance(other, str):
            if self.home is None:
                raise ConfigError("this evaluation has no run log to read earlier ones from")
            before = load_scores(other, self.home)
        else:
            before = other.score_frame()
        changed = diff_frames(before, self.score_frame(), self.index_name)
        # Rows are matched by the text of their index (what the run log keeps); show the labels.
        labels = dict(
            zip(
                map(str, self.results[self.index_name]), self.results[self.index_name], strict=False
            )
        )
        changed[self.index_name] = changed[self.index_name].map(lambda k: labels.get(k, k))
        return changed

    def score_frame(self) -> pd.DataFrame:
        """Return the columns a diff compares: variant, index, scorers, passed, error."""
        keep = ["variant", self.index_name, *(s.name for s in self.scorers), "passed", "error"]
        frame = self.results[keep].rename(columns={self.index_name: "index"})
        frame["index"] = frame["index"].astype(str)
        return frame

    def review(
        self,
        output: str | list[str] | None = None,
        variants: list[str] | None = None,
        *,
        pairwise: tuple[str, str] | list[str] | None = None,
    ) -> Any:
        """Return a widget that walks the rows for labelling: the inputs, each variant's
        ``output`` side by side (default: every output; images inline), pass / fail buttons, a
        1-5 score, a note, keyboard shortcuts and a progress count; the scorers' values and
        reasons show for a variant only once it is labelled. Each answer is a :meth:`label`.

        ``pairwise=(a, b)`` asks instead, blind, which of two variants' outputs is better: per
        row the two are shown as "A" and "B" in an order shuffled per row (seeded by the
        evaluation's id and the row, so the same each time, and recorded), with "A better",
        "B better" and "tie" (keys ``1``, ``2``, ``t``); which was which shows once answered.
        Each answer is a :meth:`prefer`; :meth:`win_rates` sums them up.

        Raises:
            ConfigError: an unknown output or variant, or a pair that is not two variants.
        """
        if pairwise is not None:
            from ..labels.pairwise import PairwiseReview

            return PairwiseReview(self, self._pair(pairwise), output)
        from ..labels.review import LabelReview

        return LabelReview(self, output, variants)

    def to_mlflow(self, experiment: str | None = None) -> dict[str, str]:
        """Log this evaluation to MLflow (``pip install flownb[mlflow]``): one run per variant
        in ``experiment`` (default: MLflow's active one) with its set-up as parameters (provider,
        model, prompts, model parameters), its summary as metrics (means, pass rates, cost when
        known) and the results and the HTML report as artifacts. Returns variant -> run id.

        Raises:
            ConfigError: MLflow is not installed, or cannot log where it is pointed.
        """
        from .tracking import to_mlflow

        return to_mlflow(self, experiment)

    def _repr_html_(self) -> str:
        from ..html.page import report_html

        return report_html(self)

    def __repr__(self) -> str:
        return (
            f"<EvalReport {self.id} variants={self.variants!r} "
            f"scorers={[s.name for s in self.scorers]!r} rows={len(self.results)}>"
        )


def _metric(column: pd.Series, name: str, kind: str) -> dict[str, float]:
    """Return a metric's figure over ``column`` (missing values left out) with its 95% interval:
    a rate with Wilson's for ``kind`` "bool", else a mean with Student t's."""
    values = column.dropna()
    if kind == "bool":
        k = int((values.astype(float) > 0.5).sum())
        low, high = stats.wilson(k, len(values))
        return {name: k / len(values) if len(values) else math.nan, f"{name}_low": low,
                f"{name}_high": high}  # fmt: skip
    mean, low, high = stats.mean_interval(values.astype(float).tolist())
    return {name: mean, f"{name}_low": low, f"{name}_high": high}


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Return JSON-ready records: missing values (NaN, NA) as None."""
    clean = frame.astype(object).where(frame.notna(), None)
    return clean.to_dict("records")
