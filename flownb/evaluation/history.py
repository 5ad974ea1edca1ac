"""Moved to :mod:`flownb.evaluation.reports.history`: this old path still works, with a
DeprecationWarning (see :mod:`flownb.evaluation.moved`)."""

from __future__ import annotations

from typing import Any

from .moved import forwarded
from .reports import history as _new


def __getattr__(name: str) -> Any:
    return forwarded(__name__, _new, name)
