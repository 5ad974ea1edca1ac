"""The scorers computed from the output alone: ``equals``, ``contains``, ``regex``,
``is_json``, ``length``, a ``python`` function, and ``human`` (the labels people gave).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Literal

import regex as regex_engine

from ..errors import ConfigError
from .base import Block, Col, Kind, Row, Scorer, Scores, _missing, _recorded, _text


def _expected_values(value: Any, block: Block) -> Sequence[Any]:
    if isinstance(value, Col):
        return block.column(value.name)
    return [value] * block.n


class _Compare(Scorer):
    """A bool scorer comparing an output with a literal or a column, row by row."""

    def __init__(
        self,
        prefix: str,
        output: str,
        value: Any,
        test: Callable[[str, Any], bool],
        name: str | None,
    ) -> None:
        self.output = output
        self.value = value
        self.test = test
        self.name = name or f"{prefix}_{output}"

    def columns(self) -> list[str]:
        extra = [self.value.name] if isinstance(self.value, Col) else []
        return [self.output, *extra]

    def score(self, block: Block) -> Scores:
        test = self.test
        got = block.column(self.output)
        expected = _expected_values(self.value, block)
        return [
            None if _missing(g) else bool(test(g, e)) for g, e in zip(got, expected, strict=True)
        ], None


@_recorded
def equals(output: str, expected: Any, *, strip: bool = True, name: str | None = None) -> Scorer:
    """Pass when the output equals ``expected`` (a literal or ``col(...)``), surrounding
    whitespace ignored unless ``strip=False``. Column ``equals_<output>``."""
    if strip:
        return _Compare(
            "equals", output, expected, lambda a, b: a.strip() == _text(b).strip(), name
        )
    return _Compare("equals", output, expected, lambda a, b: a == _text(b), name)


@_recorded
def contains(output: str, text: Any, *, case: bool = True, name: str | None = None) -> Scorer:
    """Pass when the output contains ``text`` (a literal or ``col(...)``); ``case=False``
    ignores case. Column ``contains_<output>``."""
    if case:
        return _Compare("contains", output, text, lambda a, b: _text(b) in a, name)
    return _Compare("contains", output, text, lambda a, b: _text(b).lower() in a.lower(), name)


# Seconds one regex match may take. Model output is untrusted input: a pattern that backtracks
# catastrophically on it (``(a+)+$`` over a long run of ``a``) must not hang an evaluation.
REGEX_TIMEOUT = 1.0


class _Regex(Scorer):
    """Pass when a pattern matches somewhere in the output, each match bounded in time."""

    def __init__(self, output: str, compiled: Any, name: str | None) -> None:
        self.output = output
        self.compiled = compiled
        self.name = name or f"regex_{output}"

    def score(self, block: Block) -> Scores:
        search = self.compiled.search
        scores: list[Any] = []
        reasons: list[str | None] = []
        for got in block.column(self.output):
            if _missing(got):
                scores.append(None)
                reasons.append(None)
                continue
            text = str(got)
            try:
                scores.append(search(text, timeout=REGEX_TIMEOUT) is not None)
                reasons.append(None)
            except TimeoutError:
                scores.append(None)  # an error, not a fail: scored missing, with the reason
                reasons.append(
                    f"error: the pattern did not finish matching this output ({len(text):,} "
                    f"characters) within {REGEX_TIMEOUT:g} s; it may backtrack catastrophically"
                )
        return scores, reasons if any(r is not None for r in reasons) else None


@_recorded
def regex(output: str, pattern: str, *, name: str | None = None) -> Scorer:
    """Pass when ``pattern`` matches somewhere in the output (a search, with the ``regex``
    package's syntax, a superset of ``re``'s). Column ``regex_<output>``.

    Each match may take at most :data:`REGEX_TIMEOUT` seconds: a row whose match runs longer
    (a pattern backtracking catastrophically on that output) scores missing, with the reason in
    column ``regex_<output>_reason``.

    Raises:
        ConfigError: the pattern does not compile.
    """
    try:
        compiled = regex_engine.compile(pattern)
    except regex_engine.error as exc:
        raise ConfigError(f"regex scorer: bad pattern {pattern!r}: {exc}") from None
    return _Regex(output, compiled, name)


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@_recorded
def is_json(output: str, *, name: str | None = None) -> Scorer:
    """Pass when the output is valid JSON. Column ``is_json_<output>``."""
    return _Compare("is_json", output, None, lambda a, _: _parses(a), name)


class _Length(Scorer):
    def __init__(self, output: str, lo: int | None, hi: int | None, name: str | None) -> None:
        self.output = output
        self.lo, self.hi = lo, hi
        self.kind = "float" if lo is None and hi is None else "bool"
        self.name = name or f"length_{output}"

    def score(self, block: Block) -> Scores:
        lo, hi = self.lo, self.hi
        scores: list[Any] = []
        for got in block.column(self.output):
            if _missing(got):
                scores.append(None)
                continue
            n = len(str(got))
            if self.kind == "float":
                scores.append(float(n))
            else:
                scores.append((lo is None or n >= lo) and (hi is None or n <= hi))
        return scores, None


@_recorded
def length(
    output: str, min: int | None = None, max: int | None = None, *, name: str | None = None
) -> Scorer:
    """The output's length in characters: a float score without bounds; with ``min`` and/or
    ``max``, pass when the length lies within them (inclusive). Column ``length_<output>``."""
    return _Length(output, min, max, name)


class _Python(Scorer):
    def __init__(self, fn: Callable[[Row], Any], name: str | None, threshold: float | None) -> None:
        if not callable(fn):
            raise ConfigError(f"python() takes a function of the row, got {type(fn).__name__}")
        self.fn = fn
        self.name: str = name or str(getattr(fn, "__name__", "python"))
        if self.name == "<lambda>":
            raise ConfigError("python(lambda ...) needs name=: the name is the score's column")
        self.threshold = threshold
        self.kind = "bool" if threshold is None else "float"

    def columns(self) -> list[str]:
        return []

    def score(self, block: Block) -> Scores:
        scores: list[Any] = []
        reasons: list[str | None] = []
        any_reason = False
        kinds: set[str] = set()
        for row, failed in zip(block.rows(), block.failed, strict=True):
            if failed:  # the run failed: nothing to grade
                scores.append(None)
                reasons.append(None)
                continue
            value = self.fn(row)
            reason = None
            if isinstance(value, tuple):
                if len(value) != 2:
                    raise ConfigError(
                        f"scorer {self.name!r} returned a tuple of {len(value)}; "
                        "return a bool, a number, or (score, reason)"
                    )
                value, reason = value
                any_reason = True
            if isinstance(value, bool):
                kinds.add("bool")
            elif isinstance(value, int | float):
                kinds.add("float")
                value = float(value)
            elif value is not None:
                raise ConfigError(
                    f"scorer {self.name!r} returned {type(value).__name__}; "
                    "return a bool, a number, or (score, reason)"
                )
            scores.append(value)
            reasons.append(None if reason is None else str(reason))
        # The function decides the kind: numbers make a float scorer (with its threshold).
        if "float" in kinds or self.threshold is not None:
            self.kind = "float"
            scores = [None if s is None else float(s) for s in scores]
        return scores, reasons if any_reason else None


@_recorded
def python(
    fn: Callable[[Row], Any], name: str | None = None, *, threshold: float | None = None
) -> Scorer:
    """Score with ``fn(row)``, where ``row`` maps the input columns and the outputs (``None``
    where the run failed). ``fn`` returns a bool (pass/fail), a number (a float score; with
    ``threshold`` it passes at or above it), or ``(score, reason)``. The column is ``name``,
    else the function's name."""
    return _Python(fn, name, threshold)


class _Human(Scorer):
    """A column read from the evaluation's human labels (see ``report.label``), not computed:
    NaN until a row is labelled. No threshold, so it never decides ``passed``."""

    kind: Kind = "float"

    def __init__(self, field: Literal["passed", "score"], name: str | None) -> None:
        if field not in ("passed", "score"):
            raise ConfigError(f"human() reads 'passed' or 'score', not {field!r}")
        self.name = name or ("human" if field == "passed" else "human_score")
        # The report fills the column from its labels; this marks which field it reads.
        self.output = f"labels:{field}"

    def columns(self) -> list[str]:
        return []

    def score(self, block: Block) -> Scores:
        return [None] * block.n, None


def human(field: Literal["passed", "score"] = "passed", *, name: str | None = None) -> Scorer:
    """The human labels as a scorer column (``human``, or ``human_score`` for
    ``field="score"``): 1.0 / 0.0 for a pass / fail label, or the label's score; NaN where the
    row is not labelled. It follows ``report.label`` and ``report.review``."""
    return _Human(field, name)
