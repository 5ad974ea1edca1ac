"""The labelled examples a judge shows its model (``judge(examples=report.labels)``): which
of people's labels are usable for an output, and which few of them go in the prompt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

_LABEL_FIELDS = frozenset({"row", "variant", "passed", "score", "note", "labelled_at"})


@dataclass(frozen=True)
class Example:
    """One human-labelled output a judge shows the model as a few-shot example."""

    inputs: tuple[tuple[str, str], ...]
    output: str
    passed: bool | None
    score: float | None
    note: str

    def verdict(self) -> str:
        """Return the person's label in words (``pass, score 4, note: "..."``)."""
        said = [] if self.passed is None else ["pass" if self.passed else "fail"]
        if self.score is not None:
            said.append(f"score {self.score:g}")
        if self.note:
            said.append(f"note: {json.dumps(self.note, ensure_ascii=False)}")
        return ", ".join(said)


def _cell(value: Any) -> Any:
    """Return a frame cell as a Python value, ``None`` where it is missing (NaN, NA, None)."""
    import pandas as pd

    if value is None or (not isinstance(value, list | tuple | dict) and pd.isna(value)):
        return None
    item = getattr(value, "item", None)
    return item() if callable(item) and not isinstance(value, str | bytes) else value


def select_examples(examples: Any, output: str, limit: int) -> tuple[list[Example], int]:
    """Return the labelled examples a judge of ``output`` shows (at most ``limit``) and how many
    usable labels ``examples`` holds.

    ``examples`` is a labels frame (``report.labels``: ``row``, ``variant``, ``passed``,
    ``score``, ``note``, then the input and output columns). A usable label has a ``passed`` or
    ``score`` and the graded output. The choice is deterministic: labels sorted by (variant,
    row), then taken in turn from the passes, the fails and the score-only labels, so both
    verdicts are shown when both exist.

    Raises:
        ConfigError: not a frame, or one without the graded output's column or any verdict.
    """
    column = _graded_column(examples, output)
    names = examples.attrs.get("flownb_inputs") or [
        c for c in examples.columns if c not in _LABEL_FIELDS and c != column
    ]
    found: list[tuple[tuple[str, str], Example]] = []
    for rec in examples.to_dict("records"):
        example = _example_of(rec, names, column)
        if example is not None:
            found.append(((str(rec.get("variant", "")), str(rec.get("row", ""))), example))
    found.sort(key=lambda pair: pair[0])
    return _in_turn([e for _, e in found], limit), len(found)


def _graded_column(examples: Any, output: str) -> str:
    """Return the column of ``examples`` holding the graded output (``output``, else
    ``{output}_output``).

    Raises:
        ConfigError: not a frame, no such column, or neither a ``passed`` nor a ``score`` column.
    """
    import pandas as pd

    if not isinstance(examples, pd.DataFrame):
        raise ConfigError(
            f"examples= takes a labels frame (report.labels), not {type(examples).__name__}"
        )
    column = next((c for c in (output, f"{output}_output") if c in examples.columns), None)
    if column is None:
        raise ConfigError(
            f"examples= has no column {output!r} (the graded output): pass the labels of an "
            "evaluation of that output (report.labels)"
        )
    if not {"passed", "score"} & set(examples.columns):
        raise ConfigError("examples= needs a 'passed' or 'score' column (report.labels)")
    return column


def _example_of(rec: dict[str, Any], names: list[str], column: str) -> Example | None:
    """Return the example a labels row makes, ``None`` when it is unusable (no verdict, or no
    graded output)."""
    passed, score, got = (_cell(rec.get(k)) for k in ("passed", "score", column))
    if (passed is None and score is None) or got is None:
        return None
    inputs = tuple(
        (str(n), "" if (v := _cell(rec.get(n))) is None else str(v))
        for n in names
        if n in rec and n != column
    )
    return Example(
        inputs,
        str(got),
        None if passed is None else bool(passed),
        None if score is None else float(score),
        str(_cell(rec.get("note")) or ""),
    )


def _in_turn(examples: list[Example], limit: int) -> list[Example]:
    """Return at most ``limit`` of ``examples``, taken in turn from the passes, the fails and
    the score-only ones (each in the order given)."""
    groups = [
        [e for e in examples if e.passed is True],
        [e for e in examples if e.passed is False],
        [e for e in examples if e.passed is None],
    ]
    chosen: list[Example] = []
    while len(chosen) < limit and any(groups):
        for group in groups:
            if group and len(chosen) < limit:
                chosen.append(group.pop(0))
    return chosen
