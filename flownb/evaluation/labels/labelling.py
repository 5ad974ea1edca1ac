"""Human labels on an evaluation: ``report.label(...)`` keeps each one in the run log as it is
given, ``report.labels`` shows the ones in force, ``S.human()`` columns read them, and
``report.agreement(scorer)`` checks a scorer (a judge, usually) against them.

:class:`Labelled` is mixed into :class:`~flownb.evaluation.reports.report.EvalReport`; it
reads the report's ``results``, ``variants``, ``scorers``, ``index_name``, ``id`` and ``home``.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError
from ..record.shape import ScorerInfo

if TYPE_CHECKING:
    import pandas as pd

    from .agreement import Agreement

__all__ = ["HUMAN_OUTPUT", "MAX_NOTE", "SCORE_RANGE", "Labelled"]

# The ``output`` of an ``S.human()`` scorer: ``labels:passed`` or ``labels:score``. Its column is
# filled from the labels, not from any output, so it marks the column as the labels' own.
HUMAN_OUTPUT = "labels:"
# A label's score is on the documented 1-5 scale (the review's buttons); its note is text of at
# most this many characters (a note is a remark, and every label is kept in the run log).
SCORE_RANGE = (1.0, 5.0)
MAX_NOTE = 10_000


def _native(value: Any) -> Any:
    """Return a numpy scalar as the Python value it holds (what JSON and sqlite keep)."""
    item = getattr(value, "item", None)
    return item() if callable(item) and not isinstance(value, str | bytes) else value


def _checked_note(note: Any) -> str:
    """Return a label's note as text ("" for None).

    Raises:
        ConfigError: not a string, over :data:`MAX_NOTE` characters, or not Unicode text (a lone
            surrogate, which cannot be stored as UTF-8).
    """
    if note is None:
        return ""
    if not isinstance(note, str):
        raise ConfigError(f"note is text, not {type(note).__name__}")
    if len(note) > MAX_NOTE:
        raise ConfigError(
            f"a note holds at most {MAX_NOTE:,} characters; this one has {len(note):,}"
        )
    try:
        note.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"the note is not valid Unicode text (a lone surrogate at character {exc.start})"
        ) from None
    return note


class Labelled:
    """Labels for a report: given in Python or through :meth:`review`, kept in the run log."""

    id: str
    results: pd.DataFrame
    variants: list[str]
    scorers: list[ScorerInfo]
    index_name: str
    inputs: list[str]
    outputs: list[str]
    home: Path | None

    # -- giving labels -----------------------------------------------------------------------------

    def label(
        self,
        row: Any,
        variant: str,
        passed: bool | None = None,
        score: float | None = None,
        note: str = "",
    ) -> None:
        """Label ``variant``'s output for input row ``row`` (the input row's index label): pass or
        fail, a score from 1 to 5 (fractions allowed), and/or a note (text, at most
        :data:`MAX_NOTE` characters). The label is kept
        in the run log at once (when the evaluation has one), so a kernel restart loses none;
        labelling a pair again replaces its label in :attr:`labels`.

        Raises:
            ConfigError: an unknown row or variant, a score that is not a number from 1 to 5, a
                note that is not text (not a string, a lone surrogate) or too long, or nothing
                given.
        """
        if variant not in self.variants:
            raise ConfigError(f"no variant {variant!r}; the variants are {self.variants}")
        key = self._row_key(row)
        passed = _native(passed)  # numpy's bool_ (a value read from a frame) is a bool here
        if passed is not None and not isinstance(passed, bool):
            raise ConfigError(f"passed is True, False or None, not {passed!r}")
        if score is not None:
            if isinstance(score, bool) or not isinstance(_native(score), int | float):
                raise ConfigError(f"score is a number or None, not {score!r}")
            score = float(score)
            low, high = SCORE_RANGE
            if not math.isfinite(score) or not low <= score <= high:
                raise ConfigError(f"score must be a number from {low:g} to {high:g}, not {score!r}")
        note = _checked_note(note)
        if passed is None and score is None and not note:
            raise ConfigError("a label needs passed=, score= or a note")
        given = {
            "row": key,
            "variant": variant,
            "passed": passed,
            "score": score,
            "note": note,
            "labelled_at": time.time(),
        }
        if self.home is not None:
            from ..record.store import save_labels

            save_labels(self.id, [given], self.home)  # first: a label the log refused is not shown
        else:
            self._label_state()[1].append(given)  # kept when the report is stored
        self._label_state()[0].append(given)
        self._labels_changed()

    @property
    def labels(self) -> pd.DataFrame:
        """The labels in force, one row per labelled (row, variant), in the order first given:
        ``row`` (the input row's index label), ``variant``, ``passed`` (True/False/NA),
        ``score`` (NaN when not given), ``note``, ``labelled_at`` (UTC), then what was labelled:
        the row's input columns and the variant's outputs (as in :attr:`results`; one whose name
        is a label column's is left out). This is what ``S.judge(..., examples=report.labels)``
        takes as few-shot examples."""
        import pandas as pd

        from ..record.store import LABEL_COLUMNS

        latest: dict[tuple[str, str], dict[str, Any]] = {}
        for given in self._label_state()[0]:
            latest[(str(given["row"]), given["variant"])] = given
        frame = pd.DataFrame(list(latest.values()), columns=LABEL_COLUMNS)
        frame["passed"] = frame["passed"].astype("boolean")
        frame["score"] = frame["score"].astype(float)
        frame["note"] = frame["note"].astype(object)
        at = frame["labelled_at"].astype(float)
        frame["labelled_at"] = pd.to_datetime(at, unit="s", utc=True)
        return self._with_context(frame)

    def _with_context(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Return the labels with the inputs and outputs of the (row, variant) each labels."""
        import pandas as pd

        from ..record.store import LABEL_COLUMNS

        inputs = [c for c in self.inputs if c not in LABEL_COLUMNS]
        outputs = [c for c in self.outputs if c not in LABEL_COLUMNS and c not in inputs]
        res = self.results
        if not (inputs or outputs) or self.index_name not in res.columns:
            return frame
        keyed = res.assign(_row=res[self.index_name].map(str)).drop_duplicates(["variant", "_row"])
        keyed = keyed.set_index(["variant", "_row"])[[*inputs, *outputs]]
        at = list(zip(frame["variant"], frame["row"].map(str), strict=True))
        found = keyed.reindex(pd.MultiIndex.from_tuples(at) if at else keyed.index[:0])
        for name in [*inputs, *outputs]:
            frame[name] = found[name].to_numpy(dtype=object) if at else pd.Series(dtype=object)
        # Which columns are inputs: a judge given these labels as examples shows them as such.
        frame.attrs["flownb_inputs"] = inputs
        return frame

    # -- checking a scorer against them -----------------------------------------------------------

    def agreement(self, scorer: Any, labels: Any = "human") -> Agreement:
        """Return how ``scorer`` (its column name, or the scorer) agrees with the labels: Cohen's
        kappa against the labels' ``passed`` for a pass/fail scorer, Spearman's rho against
        their ``score`` for a numeric one, each with its 95% interval, the confusion table and
        the rows where the two differ most. Only pairs that carry both count (``.n``).
        ``labels`` is ``"human"`` (this report's :attr:`labels`) or a frame shaped like it.

        Raises:
            ConfigError: an unknown scorer, no labels, or too few labelled rows.
        """
        import pandas as pd

        from .agreement import agreement

        name = scorer if isinstance(scorer, str) else getattr(scorer, "name", None)
        info = next((s for s in self.scorers if s.name == name), None)
        if info is None:
            known = [s.name for s in self.scorers]
            raise ConfigError(f"no scorer {name!r} in this evaluation; the scorers are {known}")
        if isinstance(labels, str):
            if labels != "human":
                raise ConfigError(f"labels is 'human' or a labels frame, not {labels!r}")
            given, source = self.labels, "human"
        elif isinstance(labels, pd.DataFrame) and {"row", "variant"} <= set(labels.columns):
            given, source = labels, "labels"
        else:
            raise ConfigError("labels is 'human' or a frame with row, variant, passed, score")
        kind = "pass_fail" if info.kind == "bool" else "score"
        field = "passed" if kind == "pass_fail" else "score"
        if field not in given.columns or given[field].notna().sum() == 0:
            how = "passed=True/False" if field == "passed" else "score=1..5"
            raise ConfigError(
                f"no labels with {field} to check {name!r} against; give some with "
                f"report.label(row, variant, {how}) or report.review()"
            )
        res = self.results
        keys = pd.MultiIndex.from_arrays(
            [res["variant"].to_numpy(), res[self.index_name].map(str).to_numpy()],
            names=["variant", "row"],
        )
        values = pd.Series(res[name].to_numpy(), index=keys)
        if kind == "pass_fail" and getattr(self, "repeats", 1) > 1:
            # With repeats the column is the share of repeats that passed: its majority verdict
            # (a tie passes) is what is checked against the person's.
            values = values.astype(float).ge(0.5).astype(object).where(values.notna())
        wanted = pd.MultiIndex.from_arrays(
            [given["variant"].to_numpy(), given["row"].map(str).to_numpy()],
            names=["variant", "row"],
        )
        people = pd.Series(given[field].to_numpy(dtype=object), index=wanted)
        people = people[~people.index.duplicated(keep="last")].reindex(keys)
        shown = [self.index_name, *self.inputs, *self.outputs]
        if f"{name}_reason" in res.columns:
            shown.append(f"{name}_reason")
        context = res[[c for c in dict.fromkeys(shown) if c in res.columns]].set_axis(keys)
        return agreement(
            values.where(values.notna(), None),
            people.where(people.notna(), None),
            kind=kind,  # type: ignore[arg-type]
            scorer=str(name),
            source=source,
            context=context,
        )

    # -- internals -------------------------------------------------------------------------------

    def _label_state(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Return every label as given (in order) and those not yet in a run log."""
        state = self.__dict__.get("_labels_given")
        if state is None:
            state = self.__dict__["_labels_given"] = ([], [])
        return state

    def _row_key(self, row: Any) -> Any:
        """Return the index label ``row`` names, as the results hold it.

        Raises:
            ConfigError: no input row has that label.
        """
        column = self.results[self.index_name]
        by_text = {str(v): _native(v) for v in column.drop_duplicates()}
        found = by_text.get(str(_native(row)))
        if found is None:
            shown = ", ".join(list(by_text)[:5])
            raise ConfigError(f"no input row {row!r} in this evaluation (rows: {shown}, ...)")
        return found

    def reload_labels(self) -> None:
        """Read this evaluation's labels from its run log again, replacing those in memory
        (another kernel or process may have added some); labels not yet kept are kept first.

        Raises:
            ConfigError: the evaluation has no run log.
        """
        from ..record.store import read_labels

        if self.home is None:
            raise ConfigError("this evaluation has no run log; store(home=...) it first")
        self._store_labels(self.home)
        given = self._label_state()[0]
        given[:] = read_labels(self.id, self.home)
        self._labels_changed()

    def _store_labels(self, home: Path) -> None:
        """Keep the labels given while the report had no run log in the one of ``home``."""
        pending = self._label_state()[1]
        if pending:
            from ..record.store import save_labels

            save_labels(self.id, list(pending), home)
            pending.clear()

    def _labels_changed(self) -> None:
        """Refresh the ``S.human()`` columns from the labels; the summary is computed anew."""
        import numpy as np

        humans = [s for s in self.scorers if s.output.startswith(HUMAN_OUTPUT)]
        if humans:
            latest = {
                (g["variant"], str(g["row"])): g for g in self._label_state()[0]
            }  # later labels win
            runs = getattr(self, "_runs", None)  # every repeat's rows carry the row's label
            for frame in [self.results] if runs is None else [self.results, runs]:
                pairs = list(zip(frame["variant"], frame[self.index_name].map(str), strict=True))
                for s in humans:
                    field = s.output[len(HUMAN_OUTPUT) :]
                    column = []
                    for pair in pairs:
                        value = latest.get(pair, {}).get(field)
                        column.append(math.nan if value is None else float(value))
                    frame[s.name] = np.array(column, dtype=float)
        self.__dict__.pop("summary", None)

    def _with_label_counts(self, summary: pd.DataFrame) -> pd.DataFrame:
        """Return ``summary`` with a ``labels`` column (labelled rows per variant) once there are
        labels: what every human-label figure rests on."""
        labels = self.labels
        if labels.empty:
            return summary
        counts = labels.groupby("variant").size()
        summary["labels"] = [int(counts.get(v, 0)) for v in summary.index]
        return summary
