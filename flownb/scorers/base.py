"""What every scorer is: a :class:`Scorer` grades one output over a :class:`Block` of rows (the
outputs of one variant with their input rows), and :func:`col` names a column of the input row
where a scorer takes a literal. A scorer factory wrapped in :func:`_recorded` remembers the
call that made the scorer, shown in reports.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, ParamSpec, TypeVar

from ..errors import ConfigError

Kind = Literal["bool", "float"]


P = ParamSpec("P")


S_ = TypeVar("S_", bound="Scorer")


Row = Mapping[str, Any]


# What scoring a block of rows returns: one score per row (None: missing), and reasons (or None).
Scores = tuple[list[Any], list[str | None] | None]


class Block:
    """The rows of one variant, held as columns (name -> one value per row): the input columns,
    then the outputs (``None`` where the run failed). Row dicts are made only when asked for."""

    def __init__(
        self, columns: Mapping[str, Sequence[Any]], n: int, failed: Sequence[bool] | None = None
    ) -> None:
        self.data = dict(columns)
        self.n = n
        self.failed = failed if failed is not None else [False] * n

    def column(self, name: str) -> Sequence[Any]:
        """Return column ``name`` (all ``None`` when this variant lacks it)."""
        values = self.data.get(name)
        return values if values is not None else [None] * self.n

    def rows(self) -> Iterator[dict[str, Any]]:
        """Yield each row as a dict (column name -> value)."""
        names = list(self.data)
        for values in zip(*self.data.values(), strict=True):
            yield dict(zip(names, values, strict=True))


@dataclass(frozen=True)
class Col:
    """A reference to a column of the input row (``col("answer")``)."""

    name: str

    def __repr__(self) -> str:
        return f"col({self.name!r})"


def col(name: str) -> Col:
    """Return a reference to the input row's column ``name``, for ``expected`` / ``text``."""
    if not isinstance(name, str) or not name:
        raise ConfigError("col() takes a column name")
    return Col(name)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


class Scorer:
    """Base class: ``name`` (its column), ``kind`` and an optional ``threshold``.

    Subclasses implement :meth:`score`, called with the rows of one variant (each row a mapping
    of the input columns and the outputs; ``None`` for a failed run's outputs).
    """

    name: str
    kind: Kind = "bool"
    threshold: float | None = None
    output: str = ""
    # How it was defined, as a call (``contains('intro', col('topic'))``): shown in reports.
    definition: str = ""
    # A float scorer whose scores are 0 or 1 and whose mean is a rate (pick_best's win rate).
    rate: bool = False

    def columns(self) -> list[str]:
        """Return the input or output columns this scorer reads (checked before a run)."""
        return [self.output] if self.output else []

    def score(self, block: Block) -> Scores:
        """Return one score per row of ``block`` and the reasons (or ``None`` when it gives
        none)."""
        raise NotImplementedError

    @property
    def pass_fail(self) -> bool:
        """Whether this scorer contributes to ``passed``."""
        return self.kind == "bool" or self.threshold is not None

    def describe(self) -> str:
        """Return how this scorer was defined (its call), for reports."""
        return self.definition or f"{type(self).__name__}(name={self.name!r})"

    def __repr__(self) -> str:
        return f"<scorer {self.name!r} ({self.kind})>"


def _show(value: Any) -> str:
    if hasattr(value, "columns") and hasattr(value, "__len__"):  # a frame: the labels given
        return f"<{len(value)} labels>"
    if isinstance(value, str | int | float | bool | Col | list | tuple | dict) or value is None:
        return repr(value)
    if callable(value):
        return str(getattr(value, "__qualname__", None) or getattr(value, "__name__", "function"))
    return repr(getattr(value, "name", None) or type(value).__name__)  # a provider: its name


def _call(function: str, *args: Any, **options: Any) -> str:
    """Return ``function(args, key=value)`` as it was called (values shown as written)."""
    parts = [_show(a) for a in args] + [f"{k}={_show(v)}" for k, v in options.items()]
    return f"{function}({', '.join(parts)})"


def _recorded(make: Callable[P, S_]) -> Callable[P, S_]:
    """Wrap a scorer factory so each scorer it makes remembers the call that made it (its
    ``definition``, shown in reports)."""

    @functools.wraps(make)
    def recorded(*args: P.args, **kwargs: P.kwargs) -> S_:
        scorer = make(*args, **kwargs)
        scorer.definition = _call(make.__name__, *args, **kwargs)
        return scorer

    return recorded


def _text(value: Any) -> str:
    return "" if _missing(value) else str(value)
