"""The scorers file of an evaluation (JSON or TOML), read into scorers: what ``flownb eval
--scorers`` and ``%flow eval --scorers`` share.

A file lists scorers, each a ``type`` (a :mod:`flownb.scorers` function) and that function's
arguments; ``{ col = "topic" }`` names a column of the row, a plain value is a literal.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ... import scorers
from ...errors import ConfigError
from ...infra.files import read_input
from ...scorers import Scorer, col

__all__ = ["load_config", "make_scorer"]

_SCORERS = {
    "equals": ("output", "expected"),
    "contains": ("output", "text"),
    "regex": ("output", "pattern"),
    "is_json": ("output",),
    "length": ("output",),
    "judge": ("output", "rubric"),
    "pick_best": ("output", "rubric"),
}


def load_config(path: str) -> dict[str, Any]:
    """Return the decoded scorers file (``.toml``, else JSON).

    Raises:
        ConfigError: not a regular file, over ``FLOWNB_INPUT_MAX`` or unreadable (see
            :func:`flownb.infra.files.read_input`), not TOML/JSON, or not a table/object.
    """
    p = Path(path)
    is_toml = p.suffix.lower() == ".toml"
    raw = read_input(path, "the scorers file")
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text) if is_toml else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path} is not valid {p.suffix.lstrip('.') or 'JSON'}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold an object with 'scorers' (and 'variants')")
    return data


def _value(raw: Any) -> Any:
    if isinstance(raw, Mapping) and set(raw) == {"col"}:
        return col(raw["col"])
    return raw


def make_scorer(spec: Mapping[str, Any]) -> Scorer:
    """Return the scorer a config entry describes (``type`` plus the function's arguments).

    Raises:
        ConfigError: unknown type, missing or unknown argument.
    """
    kind = spec.get("type")
    if kind not in _SCORERS:
        raise ConfigError(
            f"scorer type {kind!r} is not one of {', '.join(_SCORERS)} "
            "(python scorers need Python: use flownb.evaluate)"
        )
    args = {k: _value(v) for k, v in spec.items() if k != "type"}
    missing = [a for a in _SCORERS[kind] if a not in args]
    if missing:
        raise ConfigError(f"scorer {kind!r} needs {', '.join(missing)}")
    try:
        return getattr(scorers, kind)(**args)
    except TypeError as exc:
        raise ConfigError(f"scorer {kind!r}: {exc}") from None
