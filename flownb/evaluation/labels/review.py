"""``report.review()``: an ipywidgets widget to label an evaluation's outputs row by row.

Each row shows its inputs and every variant's output side by side (images inline), with pass /
fail buttons, a 1-5 score, a note per variant, a progress count, and keyboard shortcuts typed
into the keys box (``p`` pass, ``f`` fail, ``1``-``5`` score, ``v`` next variant, ``n`` / ``b``
next and back). The scorers' values and reasons (a judge's, above all) stay hidden for a
variant until it has a label, so they cannot anchor the person labelling. Every answer is a
``report.label(...)``: kept in the run log at once.

Stable CSS classes for tests and styling: ``flownb-review`` (the widget), ``flownb-progress``,
``flownb-review-inputs``, ``flownb-review-variant`` (one per variant), ``flownb-pass``,
``flownb-fail``, ``flownb-score``, ``flownb-note``, ``flownb-judge`` (the hidden scores),
``flownb-keys``, ``flownb-prev``, ``flownb-next``, and ``flownb-review-grid``: for image outputs, a
grid of thumbnails (variants by rows, the page of rows around the one shown) with the labels
given so far.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as widgets

from ...errors import ConfigError
from ...show.escape import html_attr, html_block, html_text
from ...show.fallback import StaticFallback
from ..html.report import thumbnail
from .labelling import HUMAN_OUTPUT

__all__ = ["LabelReview"]


def _missing(value: Any) -> bool:
    """Whether ``value`` is missing (None, NaN, NA); a list or other non-scalar is not."""
    import pandas as pd

    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _shown(value: Any, image: bool) -> str:
    if _missing(value):
        return "<i>no output</i>"
    text = str(value)
    if image:  # only an image node's output: a text that looks like a URL stays text
        src = thumbnail(text, REVIEW_SIZE)
        if src is not None:
            return f'<img src="{src}" alt="image output" style="max-width:100%">'
    return html_block(text)


def static_review(progress: str, inputs: str, panes: Sequence[str]) -> str:
    """Return a review widget's static copy: its count line, its inputs and its panes side by
    side (each already HTML the widget shows)."""
    cells = "".join(
        f'<td style="vertical-align:top;text-align:left !important">{p}</td>' for p in panes
    )
    return (
        f"<p>{progress} <i>(a review: run the notebook to answer)</i></p>{inputs}"
        f'<table style="width:100%;table-layout:fixed"><tr>{cells}</tr></table>'
    )


def _plain(markup: str) -> str:
    """The text of a line of the widget's own HTML (its tags dropped, entities read)."""
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", markup))


# The longest side, in pixels, of the image being labelled (large enough to judge by).
REVIEW_SIZE = 512
# Rows of the image overview grid shown at once (the page holding the row being labelled).
GRID_ROWS = 8


def _thumb(value: Any) -> str:
    """Return one small image of the overview grid (nothing when there is none)."""
    if _missing(value):
        return "–"
    src = thumbnail(str(value))
    if src is None:
        return html_text(str(value)[:40])
    style = "max-width:96px;max-height:96px;display:block"
    return f'<img src="{src}" alt="image output" style="{style}">'


def _chosen_outputs(report: Any, output: str | Sequence[str] | None) -> list[str]:
    """Return the outputs a review shows: ``output`` (one name or several), or all.

    Raises:
        ConfigError: a name is not one of the report's outputs.
    """
    outputs = [output] if isinstance(output, str) else list(output or report.outputs)
    unknown = [o for o in outputs if o not in report.outputs]
    if unknown:
        raise ConfigError(f"no output {unknown[0]!r}; the outputs are {report.outputs}")
    return outputs


def _rows_of(report: Any, variant: str) -> list[Any]:
    """Return the input rows' index labels, in order (those ``variant`` ran)."""
    res = report.results
    return list(dict.fromkeys(res[res["variant"] == variant][report.index_name]))


def _navigation(
    review: Any, typed: Callable[[dict[str, Any]], None], keys: str, width: str
) -> tuple[Any, Any, Any]:
    """Return a review widget's back and next buttons and its keys box (placeholder ``keys``):
    the buttons move ``review`` (one with ``position`` and ``go``) by a row, and each change of
    the box goes to ``typed``."""
    back = widgets.Button(description="◀ back (b)")
    forward = widgets.Button(description="next (n) ▶")
    back.add_class("flownb-prev")
    forward.add_class("flownb-next")
    back.on_click(lambda _b: review.go(review.position - 1))
    forward.on_click(lambda _b: review.go(review.position + 1))
    shortcuts = widgets.Text(placeholder=keys, continuous_update=True, layout={"width": width})
    shortcuts.add_class("flownb-keys")
    shortcuts.observe(typed, names="value")
    return back, forward, shortcuts


def _inputs_table(report: Any, at: Any) -> str:
    """Return the HTML table of one row's inputs (``at``: that row's results)."""
    first = at.iloc[0]
    cells = "".join(
        f"<tr><th style='text-align:left'>{html_text(c)}</th>"
        f"<td>{html_text(str(first[c]))}</td></tr>"
        for c in [report.index_name, *report.inputs]
        if c in at.columns
    )
    return f"<table>{cells}</table>"


def _outputs_html(report: Any, outputs: list[str], record: Any) -> str:
    """Return the HTML of one variant's ``outputs`` for a row (``record``: its result, or None
    when it has none), each headed by its name when there are several."""
    shown = []
    for out in outputs:
        value = None if record is None else record[out]
        head = f"<small>{html_text(out)}</small>" if len(outputs) > 1 else ""
        shown.append(head + _shown(value, report.kinds.get(out) == "image"))
    return "".join(shown)


def _said(passed: Any, score: Any) -> str:
    """Return the label a person gave, in short (``✓ pass 4``)."""
    parts = [] if _missing(passed) else ["✓ pass" if bool(passed) else "✗ fail"]
    if not _missing(score):
        parts.append(f"{float(score):g}")
    return " ".join(parts) or "note"


class _VariantPanel:
    """One variant's column: its output, the answer controls and its hidden scores."""

    def __init__(self, review: LabelReview, variant: str) -> None:
        self.variant = variant
        self.title = widgets.HTML(f"<b>{html_text(variant)}</b>")
        self.output = widgets.HTML()
        self.passed = widgets.Button(description="pass (p)", button_style="")
        self.failed = widgets.Button(description="fail (f)", button_style="")
        self.score = widgets.ToggleButtons(
            options=[("–", 0), ("1", 1), ("2", 2), ("3", 3), ("4", 4), ("5", 5)],
            value=0,
            style={"button_width": "2.2em"},
        )
        self.note = widgets.Text(placeholder="note (saved with the answer)")
        self.judge = widgets.HTML()
        self.state = widgets.HTML()
        self.passed.add_class("flownb-pass")
        self.failed.add_class("flownb-fail")
        self.score.add_class("flownb-score")
        self.note.add_class("flownb-note")
        self.judge.add_class("flownb-judge")
        self.passed.on_click(lambda _b: review.answer(variant, passed=True))
        self.failed.on_click(lambda _b: review.answer(variant, passed=False))
        self.score.observe(self._scored(review), names="value")
        self.box = widgets.VBox(
            [
                self.title,
                self.output,
                widgets.HBox([self.passed, self.failed]),
                self.score,
                self.note,
                self.state,
                self.judge,
            ],
            layout=widgets.Layout(flex="1 1 0", border="1px solid #ddd", padding="4px"),
        )
        self.box.add_class("flownb-review-variant")
        self.quiet = False  # set while the widget itself moves the score buttons

    def _scored(self, review: LabelReview) -> Any:
        def changed(change: dict[str, Any]) -> None:
            if not self.quiet and change["new"]:
                review.answer(self.variant, score=int(change["new"]))

        return changed


class LabelReview(StaticFallback, widgets.VBox):
    """Walks an evaluation's rows for labelling (see the module docstring).

    Attributes:
        report: the evaluation (an ``EvalReport``); its ``label`` keeps every answer.
        rows: the input rows' index labels, in order; ``position``: the row shown.
        variants: the variants shown; ``active``: the one the keys answer for.
        panels: variant -> its controls (``passed``, ``failed``, ``score``, ``note``,
            ``judge``: buttons and fields a test can click or fill).
        shortcuts: the text box the keyboard shortcuts are typed into.
    """

    def __init__(
        self,
        report: Any,  # an EvalReport (not imported: report.py opens this module)
        output: str | Sequence[str] | None = None,
        variants: Sequence[str] | None = None,
    ) -> None:
        outputs = _chosen_outputs(report, output)
        chosen = list(variants or report.variants)
        wrong = [v for v in chosen if v not in report.variants]
        if wrong:
            raise ConfigError(f"no variant {wrong[0]!r}; the variants are {report.variants}")
        self.report = report
        self.outputs = outputs
        self.variants = chosen
        self.rows = _rows_of(report, chosen[0])
        self.position = 0
        self.active = 0
        self.progress = widgets.HTML()
        self.progress.add_class("flownb-progress")
        self.inputs = widgets.HTML()
        self.inputs.add_class("flownb-review-inputs")
        self.panels = {v: _VariantPanel(self, v) for v in chosen}
        self.back, self.next, self.shortcuts = _navigation(
            self, self._typed, "keys: p f 1-5 v n b", "14em"
        )
        # Image outputs also get an overview: a grid of thumbnails, variants by rows, around
        # the row shown (which is marked), with the person's own labels (never a scorer's).
        self.images = [o for o in outputs if report.kinds.get(o) == "image"]
        self.grid = widgets.HTML()
        self.grid.add_class("flownb-review-grid")
        super().__init__(
            [
                widgets.HBox([self.back, self.next, self.shortcuts, self.progress]),
                self.inputs,
                widgets.HBox([p.box for p in self.panels.values()]),
                *([self.grid] if self.images else []),
            ]
        )
        self.add_class("flownb-review")
        self._show()

    def static_html(self) -> str:
        """Return the row shown, as HTML for readers without a kernel: the count, the inputs
        and each variant's output (scores stay hidden, as in the widget)."""
        return static_review(self.progress.value, self.inputs.value, self._static_panels())

    def _static_panels(self) -> list[str]:
        return [
            f"<div>{p.title.value}</div><div>{p.output.value}</div><div>{p.state.value}</div>"
            for p in self.panels.values()
        ]

    def static_text(self) -> str:
        """Return the row shown, as text: which row, how many are labelled."""
        return f"label review of {self.report.id}: {_plain(self.progress.value)}"

    # -- answering -------------------------------------------------------------------------------

    def answer(
        self,
        variant: str,
        *,
        passed: bool | None = None,
        score: int | None = None,
    ) -> None:
        """Label the shown row for ``variant``: what is given now, with the note typed and what
        its label already held (a score after a pass keeps the pass)."""
        row = self.rows[self.position]
        before = self._label(row, variant)
        if passed is None and before is not None and not _missing(before["passed"]):
            passed = bool(before["passed"])
        if score is None and before is not None and not _missing(before["score"]):
            score = int(before["score"])
        note = self.panels[variant].note.value
        self.report.label(row, variant, passed=passed, score=score, note=note)
        if variant in self.variants:
            self.active = (self.variants.index(variant) + 1) % len(self.variants)
        self._show()

    def go(self, position: int) -> None:
        """Show row number ``position`` (clipped to the rows)."""
        self.position = max(0, min(position, len(self.rows) - 1))
        self.active = 0
        self._show()

    def _typed(self, change: dict[str, Any]) -> None:
        text = change["new"]
        if not text:
            return
        key, variant = text[-1].lower(), self.variants[self.active]
        self.shortcuts.value = ""  # one key, one action
        if key == "p":
            self.answer(variant, passed=True)
        elif key == "f":
            self.answer(variant, passed=False)
        elif key in "12345":
            self.answer(variant, score=int(key))
        elif key == "v":
            self.active = (self.active + 1) % len(self.variants)
            self._show()
        elif key == "n":
            self.go(self.position + 1)
        elif key == "b":
            self.go(self.position - 1)

    # -- showing ---------------------------------------------------------------------------------

    def _label(self, row: Any, variant: str) -> dict[str, Any] | None:
        labels = self.report.labels
        mine = labels[(labels["variant"] == variant) & (labels["row"].map(str) == str(row))]
        if mine.empty:
            return None
        return mine.iloc[-1].to_dict()

    def _show(self) -> None:
        report, row = self.report, self.rows[self.position]
        res = report.results
        at = res[res[report.index_name].map(str) == str(row)]
        labels = report.labels
        done = sum(
            1
            for r in self.rows
            for v in self.variants
            if ((labels["row"].map(str) == str(r)) & (labels["variant"] == v)).any()
        )
        total = len(self.rows) * len(self.variants)
        self.progress.value = (
            f"row {self.position + 1} of {len(self.rows)} · {done} of {total} labelled · "
            f"keys answer for <b>{html_text(self.variants[self.active])}</b>"
        )
        self.inputs.value = _inputs_table(report, at)
        if self.images:
            self.grid.value = self._grid(labels)
        for variant, panel in self.panels.items():
            mine = at[at["variant"] == variant]
            record = mine.iloc[0] if not mine.empty else None
            panel.output.value = _outputs_html(report, self.outputs, record)
            label = self._label(row, variant)
            panel.quiet = True
            score = label["score"] if label is not None else None
            panel.score.value = 0 if score is None or _missing(score) else int(score)
            panel.quiet = False
            passed = None if label is None or _missing(label["passed"]) else bool(label["passed"])
            panel.passed.button_style = "success" if passed is True else ""
            panel.failed.button_style = "danger" if passed is False else ""
            panel.note.value = "" if label is None else str(label["note"] or "")
            panel.state.value = "<i>labelled</i>" if label is not None else "<i>not labelled</i>"
            panel.judge.value = "" if label is None or record is None else self._scores(record)

    def _grid(self, labels: Any) -> str:
        """Return the overview grid of the image outputs: the :data:`GRID_ROWS` rows around the
        one shown, one column per variant, each cell its thumbnails and the label given."""
        report = self.report
        res = report.results
        start = self.position // GRID_ROWS * GRID_ROWS
        window = self.rows[start : start + GRID_ROWS]
        wanted = res[res[report.index_name].isin(window)]
        by_key = {(str(r[report.index_name]), r["variant"]): r for _, r in wanted.iterrows()}
        given = {
            (str(r), v): (p, s)
            for r, v, p, s in labels[["row", "variant", "passed", "score"]].itertuples(index=False)
        }
        head = "".join(f"<th>{html_text(v)}</th>" for v in self.variants)
        lines = []
        for k, row in enumerate(window, start=start):
            mark = " style='background:#fff3c4'" if k == self.position else ""
            cells = []
            for variant in self.variants:
                record = by_key.get((str(row), variant))
                images = "".join(_thumb(None if record is None else record[o]) for o in self.images)
                label = given.get((str(row), variant))
                said = "" if label is None else _said(*label)
                cells.append(
                    f"<td data-variant='{html_attr(variant)}' data-row='{html_attr(str(row))}'>"
                    f"{images}<small>{said}</small></td>"
                )
            lines.append(f"<tr{mark}><th>{html_text(str(row))}</th>{''.join(cells)}</tr>")
        return (
            f"<table style='border-collapse:collapse'><thead><tr><th>row</th>{head}</tr></thead>"
            f"<tbody>{''.join(lines)}</tbody></table>"
        )

    def _scores(self, record: Any) -> str:
        """The scorers' values and reasons for one output: shown only once it is labelled."""
        parts = []
        for s in self.report.scorers:
            if s.output.startswith(HUMAN_OUTPUT) or s.name not in record.index:
                continue
            value = record[s.name]
            text = "–" if _missing(value) else f"{value}"
            reason = record.get(f"{s.name}_reason")
            why = "" if _missing(reason) else f": {html_text(str(reason))}"
            parts.append(f"<div><small><b>{html_text(s.name)}</b> {text}{why}</small></div>")
        return "".join(parts)
