"""Checking run variables against a flow's variables (DESIGN.md section 1).

Every variable must be supplied, only known variables, and strings only; every problem is
reported at once (each with its element index and variable name), and a batch is checked whole
before anything runs.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InputError, Problem

__all__ = ["VariableSpec", "json_type", "unknown_advice"]

_JSON_TYPES: Mapping[type, str] = {
    dict: "an object",
    list: "an array",
    tuple: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
}


def json_type(value: Any) -> str:
    """Return the JSON word for ``value``'s type ("a string", "a number", "null", ...): the one
    vocabulary every error message uses (the Python type name for anything else)."""
    if value is None:
        return "null"
    return _JSON_TYPES.get(type(value)) or (
        "an object" if isinstance(value, Mapping) else type(value).__name__
    )


def unknown_advice(name: str, names: Sequence[str]) -> str:
    """Return advice for an unknown variable ``name``: the closest of ``names`` (a typo, about
    50 us to find), else the list of ``names``."""
    close = difflib.get_close_matches(name, names, n=1) if len(name) <= 200 else []
    if close:
        return f"did you mean {close[0]!r}?"
    return f"the flow's variables: {', '.join(map(repr, names)) or 'none'}"


class VariableSpec:
    """The variables a flow takes, in order."""

    __slots__ = ("known", "listing", "names")

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(dict.fromkeys(names))
        self.known = frozenset(self.names)
        self.listing = f"the flow's variables: {', '.join(map(repr, self.names)) or 'none'}"

    def problems(
        self, values: Any, index: int | None = None, advice: _Advice | None = None
    ) -> list[Problem]:
        """Return every problem with one element's variables (empty when it can run).

        ``advice`` carries the did-you-mean answers of a whole batch (see :class:`_Advice`).
        """
        # Fast path: the shape every well-formed row has.
        if (
            type(values) is dict
            and values.keys() == self.known
            and all(type(v) is str for v in values.values())
        ):
            return []
        if not isinstance(values, Mapping):
            where = "" if index is None else f"element {index}: "
            return [
                Problem(
                    "invalid_request",
                    f"{where}variables must be an object mapping names to strings, "
                    f"got {json_type(values)}",
                    index=index,
                )
            ]
        where = "" if index is None else f"element {index}: "
        advice = advice or _Advice(self)
        problems = [
            Problem("missing_variable", f"{where}missing variable {name!r}", index, name)
            for name in self.names
            if name not in values
        ]
        for name, value in values.items():
            if name not in self.known:
                problems.append(
                    Problem(
                        "unknown_variable",
                        f"{where}unknown variable {name!r} ({advice(str(name))})",
                        index,
                        str(name),
                    )
                )
            elif not isinstance(value, str):
                problems.append(
                    Problem(
                        "invalid_variable_type",
                        f"{where}variable {name!r} must be a string, got {json_type(value)}",
                        index,
                        name,
                    )
                )
        return problems

    def check_one(self, values: Any) -> None:
        """Validate one run's variables.

        Raises:
            InputError: listing every problem.
        """
        problems = self.problems(values)
        if problems:
            raise InputError(problems)

    def check_batch(self, batch: Sequence[Any], *, limit: int | None = None) -> None:
        """Validate a whole batch before anything runs.

        ``limit`` caps how many problems are built (the rest are only counted, into the error's
        ``total``): a server bounds the memory a hostile batch can make it spend.

        Raises:
            InputError: listing every problem of every element (up to ``limit``), each with its
                index.
        """
        problems: list[Problem] = []
        known = self.known
        advice = _Advice(self)
        counted = 0  # problems past the limit
        for i, values in enumerate(batch):
            # The common well-formed row, checked inline: this loop runs once per batch row.
            if type(values) is dict and values.keys() == known:
                for v in values.values():
                    if type(v) is not str:
                        break
                else:
                    continue
            if limit is not None and len(problems) >= limit:
                counted += self._count(values)
            else:
                problems.extend(self.problems(values, i, advice))
        if problems:
            raise InputError(problems, total=len(problems) + counted)

    def _count(self, values: Any) -> int:
        """Return how many problems :meth:`problems` would list for ``values``, cheaply."""
        if not isinstance(values, Mapping):
            return 1
        known = self.known
        n = sum(1 for name in self.names if name not in values)
        return n + sum(
            1 for name, v in values.items() if name not in known or not isinstance(v, str)
        )


class _Advice:
    """:func:`unknown_advice` for one check: answers are kept per name, and only the first
    :attr:`LIMIT` distinct names get a did-you-mean search, so a request with a million unknown
    names costs little more than listing them."""

    LIMIT = 100

    def __init__(self, spec: VariableSpec) -> None:
        self.spec = spec
        self.answers: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        answer = self.answers.get(name)
        if answer is not None:
            return answer
        if len(self.answers) >= self.LIMIT:
            return self.spec.listing
        answer = self.answers[name] = unknown_advice(name, self.spec.names)
        return answer
