"""Scorers for :func:`flownb.evaluate`: each grades one output of every (variant, input row).

Every scorer has a stable ``name`` (its column in ``report.results``) and a ``kind``:

- ``"bool"``: pass or fail (``equals``, ``contains``, ``regex``, ``is_json``, ``length`` with
  bounds, a ``python`` function returning bools);
- ``"float"``: a number (``judge`` and ``pick_best`` in 0..1, ``length`` without bounds, a
  ``python`` function returning numbers); with a ``threshold`` it also passes or fails
  (score >= threshold).

``output`` names the flow output (or any column of the results) a scorer grades. ``expected`` /
``text`` is a literal or :func:`col` naming a column of the input row. A row whose run failed
scores missing (NaN / NA) and does not pass.

``judge`` and ``pick_best`` ask a model (through flownb's providers: cached, limited and logged
like every call); an answer they cannot parse scores NaN with the raw answer as the reason,
never an exception. An image output is shown to the model as an image (see
:mod:`flownb.providers.images`); ``judge(..., examples=report.labels)`` adds people's labels to
the prompt as few-shot examples.
"""

from __future__ import annotations

from .base import Block, Col, Scorer, col
from .basic import contains, equals, human, is_json, length, python, regex
from .judge import JUDGE_MARKER, PICK_MARKER, judge, pick_best

__all__ = [
    "JUDGE_MARKER",
    "PICK_MARKER",
    "Block",
    "Col",
    "Scorer",
    "col",
    "contains",
    "equals",
    "human",
    "is_json",
    "judge",
    "length",
    "pick_best",
    "python",
    "regex",
]


def __dir__() -> list[str]:
    # What a user sees (``dir(S)``, tab completion): the scorers, not this module's imports.
    return sorted(__all__)
