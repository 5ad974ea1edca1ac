"""``report.review(pairwise=(a, b))``: blind pairwise review, an ipywidgets widget asking row by
row which of two variants' outputs is better.

Each row shows its inputs and the two outputs as "A" and "B", in an order shuffled per row:
seeded by the evaluation's id and the row (the same order every time the widget is opened) and
recorded with the answer (``shown_first``). Buttons "A better", "B better", "tie" and a note;
keyboard shortcuts typed into the keys box (``1`` A better, ``2`` B better, ``t`` tie, ``n`` /
``b`` next and back); a progress count. Which variant was A stays hidden until the row is
answered, so the names cannot sway the choice. Every answer is a ``report.prefer(...)``: kept in
the run log at once.

Stable CSS classes for tests and styling: ``flownb-pairwise`` (the widget), ``flownb-progress``,
``flownb-review-inputs``, ``flownb-side`` (one per side, A first), ``flownb-prefer-a``,
``flownb-prefer-b``, ``flownb-tie``, ``flownb-note``, ``flownb-reveal``, ``flownb-keys``,
``flownb-prev``, ``flownb-next``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets

from ...show.escape import html_text
from ...show.fallback import StaticFallback
from .preferences import TIE
from .review import (
    _chosen_outputs,
    _inputs_table,
    _navigation,
    _outputs_html,
    _plain,
    _rows_of,
    static_review,
)

__all__ = ["PairwiseReview", "shown_order"]


def shown_order(eval_id: str, row: Any, pair: tuple[str, str]) -> tuple[str, str]:
    """Return ``pair`` in the order a blind review shows it for ``row`` (A first): a coin flip
    seeded by the evaluation's id and the row, so the same every time."""
    seed = hashlib.sha256(f"{eval_id}\0{row}\0{pair[0]}\0{pair[1]}".encode()).digest()
    flip = random.Random(seed).random() < 0.5
    return (pair[1], pair[0]) if flip else pair


class PairwiseReview(StaticFallback, widgets.VBox):
    """Walks an evaluation's rows asking which of two variants is better (see the module
    docstring).

    Attributes:
        report: the evaluation (an ``EvalReport``); its ``prefer`` keeps every answer.
        pair: the two variants compared; ``rows``: the input rows' index labels, in order;
            ``position``: the row shown.
        sides: the variants shown as A and B for the row shown.
        choose: "a", "b", "tie" -> the button answering so; ``note``: the note field.
        shortcuts: the text box the keyboard shortcuts are typed into.
    """

    def __init__(
        self,
        report: Any,  # an EvalReport (not imported: report.py opens this module)
        pair: tuple[str, str],
        output: str | Sequence[str] | None = None,
    ) -> None:
        self.report = report
        self.pair = pair
        self.outputs = _chosen_outputs(report, output)
        self.rows = _rows_of(report, pair[0])
        self.position = 0
        self.sides = pair
        self.progress = widgets.HTML()
        self.progress.add_class("flownb-progress")
        self.inputs = widgets.HTML()
        self.inputs.add_class("flownb-review-inputs")
        self.panes = [widgets.HTML(), widgets.HTML()]
        for pane in self.panes:
            pane.add_class("flownb-side")
            pane.layout = widgets.Layout(flex="1 1 0", border="1px solid #ddd", padding="4px")
        self.choose = {
            "a": widgets.Button(description="A better (1)"),
            "b": widgets.Button(description="B better (2)"),
            "tie": widgets.Button(description="tie (t)"),
        }
        for side, button in self.choose.items():
            button.add_class("flownb-tie" if side == "tie" else f"flownb-prefer-{side}")
            button.on_click(lambda _b, side=side: self.answer(side))
        self.note = widgets.Text(placeholder="note (saved with the answer)")
        self.note.add_class("flownb-note")
        self.reveal = widgets.HTML()
        self.reveal.add_class("flownb-reveal")
        self.back, self.next, self.shortcuts = _navigation(
            self, self._typed, "keys: 1 2 t n b", "12em"
        )
        super().__init__(
            [
                widgets.HBox([self.back, self.next, self.shortcuts, self.progress]),
                self.inputs,
                widgets.HBox(self.panes),
                widgets.HBox([*self.choose.values(), self.note]),
                self.reveal,
            ]
        )
        self.add_class("flownb-pairwise")
        self._show()

    def static_html(self) -> str:
        """Return the row shown, as HTML for readers without a kernel: the count, the inputs,
        A and B (which variant is which stays hidden until answered, as in the widget)."""
        return (
            static_review(self.progress.value, self.inputs.value, [p.value for p in self.panes])
            + self.reveal.value
        )

    def static_text(self) -> str:
        """Return the row shown, as text: which row, how many are compared."""
        return f"pairwise review of {self.report.id}: {_plain(self.progress.value)}"

    # -- answering -------------------------------------------------------------------------------

    def answer(self, side: str) -> None:
        """Answer the shown row: ``side`` is ``"a"`` (the output shown as A is better), ``"b"``
        or ``"tie"``; kept as a ``report.prefer`` with the order shown."""
        row = self.rows[self.position]
        winner = {"a": self.sides[0], "b": self.sides[1]}.get(side, TIE)
        self.report.prefer(
            row, winner, pair=self.pair, note=self.note.value, shown_first=self.sides[0]
        )
        self._show()

    def go(self, position: int) -> None:
        """Show row number ``position`` (clipped to the rows)."""
        self.position = max(0, min(position, len(self.rows) - 1))
        self._show()

    def _typed(self, change: dict[str, Any]) -> None:
        text = change["new"]
        if not text:
            return
        key = text[-1].lower()
        self.shortcuts.value = ""  # one key, one action
        if key == "1":
            self.answer("a")
        elif key == "2":
            self.answer("b")
        elif key == "t":
            self.answer("tie")
        elif key == "n":
            self.go(self.position + 1)
        elif key == "b":
            self.go(self.position - 1)

    # -- showing ---------------------------------------------------------------------------------

    def _given(self) -> dict[str, dict[str, Any]]:
        """Row (as text) -> the preference in force for this pair."""
        given = self.report.preferences
        mine = given[
            ((given["a"] == self.pair[0]) & (given["b"] == self.pair[1]))
            | ((given["a"] == self.pair[1]) & (given["b"] == self.pair[0]))
        ]
        return {str(r["row"]): r for r in mine.to_dict("records")}

    def _show(self) -> None:
        report, row = self.report, self.rows[self.position]
        self.sides = shown_order(report.id, row, self.pair)
        given = self._given()
        self.progress.value = (
            f"row {self.position + 1} of {len(self.rows)} · "
            f"{sum(str(r) in given for r in self.rows)} of {len(self.rows)} compared"
        )
        res = report.results
        at = res[res[report.index_name].map(str) == str(row)]
        self.inputs.value = _inputs_table(report, at)
        for name, variant, pane in zip("AB", self.sides, self.panes, strict=True):
            mine = at[at["variant"] == variant]
            record = mine.iloc[0] if not mine.empty else None
            pane.value = f"<b>{name}</b>{_outputs_html(report, self.outputs, record)}"
        answer = given.get(str(row))
        for side, button in self.choose.items():
            chosen = answer is not None and (
                answer["winner"] == TIE
                if side == "tie"
                else answer["winner"] == self.sides[0 if side == "a" else 1]
            )
            button.button_style = "info" if chosen else ""
        self.note.value = "" if answer is None else str(answer["note"] or "")
        if answer is None:
            self.reveal.value = "<i>not compared yet: which is which shows once answered</i>"
        else:
            verdict = "tie" if answer["winner"] == TIE else f"{answer['winner']} better"
            self.reveal.value = (
                f"A was <b>{html_text(self.sides[0])}</b>, B was "
                f"<b>{html_text(self.sides[1])}</b> · answered: {html_text(verdict)}"
            )
