"""What a flow's variables take from the caller, as the library words it: :func:`to_text` (a
Python value as the text a variable takes, also per DataFrame cell) and :class:`Spelling`, how
each surface words the advice in an error; :data:`PYTHON` is the library's own wording (so the
DataFrame path never tells a Python user to pass ``--map``). The command line's and the magics'
spellings, and the parsing of what they type (FLOW, CSV/JSON batch files, ``NAME=VALUE``
pairs), are in :mod:`flownb.cli.inputs`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["PYTHON", "Spelling", "to_text"]


@dataclass(frozen=True)
class Spelling:
    """How one surface words its advice: mapping a column, filling empty cells, naming a server."""

    map_option: str
    """What sets a variable's column: ``columns`` (Python) or ``--map`` (CLI, magic)."""
    map_example: Callable[[str], str]
    """Returns the way to map variable ``var`` to a column."""
    fill: str
    """How to run empty cells anyway."""
    server: str
    """How to name a flow server when FLOW is a flow id."""


PYTHON = Spelling(
    map_option="columns",
    map_example=lambda var: f"columns={{{var!r}: 'column'}}",
    fill="pass fill='' (or another value)",
    server="pass base_url=...",
)


# ---- values ----------------------------------------------------------------------------------


def to_text(value: Any) -> str | None:
    """Return the text a variable takes for ``value``, or ``None`` when it is missing.

    Strings as they are; ``True``/``False`` as words; integers in decimal; a float holding a
    whole number without its ``.0`` (pandas turns an integer column with gaps into floats, so
    ``3.0`` is usually a ``3``), other floats as ``repr`` gives them. ``None``, NaN, ``pd.NA``
    and ``NaT`` are missing. Anything else: ``str(value)``.
    """
    if type(value) is str:  # the common case first: this runs once per DataFrame cell
        return value
    if value is None:
        return None
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        f = float(value)
        if math.isnan(f):
            return None
        return str(int(f)) if f.is_integer() and abs(f) < 2**53 else repr(f)
    try:
        import pandas as pd

        if pd.isna(value):
            return None
    except (TypeError, ValueError):  # arrays and other values pd.isna does not answer for
        pass
    return str(value)
