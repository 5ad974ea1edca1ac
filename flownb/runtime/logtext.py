"""The run log's rows for rows answered at once, stored as columns.

A chunk of rows answered at once (see :mod:`flownb.runtime.columns`) differs from row to row
only in its index and its strings: every row is ``[index, *head, {input: value, ...},
{output: value, ...}, *tail]`` with one ``head`` and ``tail``. Such a chunk is stored as one
JSON object holding each column of strings once (``{"first": ..., "n": ..., "head": [...],
"tail": [...], "inputs": {name: [...]}, "outputs": {name: [...]}}``): made by one ``orjson``
call, with no list, dict or encoder call per row, and about half the text of the rows it
stands for. :func:`expand` turns it back into those rows when the log is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

__all__ = ["columns_text", "expand"]


def columns_text(
    inputs: Mapping[str, Sequence[str]],
    outputs: Mapping[str, Sequence[str]],
    head: list[Any],
    tail: list[Any],
    *,
    first: int,
    rows: int,
) -> bytes:
    """Return the UTF-8 JSON text of ``rows`` rows as columns: row ``i`` (from 0) is
    ``[first + i, *head, {name: inputs[name][i], ...}, {name: outputs[name][i], ...}, *tail]``
    (see :func:`expand`); each column holds ``rows`` strings.

    Raises:
        TypeError: a value cannot be encoded as JSON.
    """
    return orjson.dumps(
        {
            "first": first,
            "n": rows,
            "head": head,
            "tail": tail,
            "inputs": {str(k): _listed(v) for k, v in inputs.items()},
            "outputs": {str(k): _listed(v) for k, v in outputs.items()},
        }
    )


def _listed(values: Sequence[str]) -> list[str] | tuple[str, ...]:
    """Return ``values`` as orjson encodes them: itself when a list or tuple (no copy)."""
    return values if isinstance(values, list | tuple) else list(values)


def expand(chunk: dict[str, Any]) -> list[list[Any]]:
    """Return the rows a chunk of :func:`columns_text` stands for (each row's dicts its own)."""
    n, first, head, tail = chunk["n"], chunk["first"], chunk["head"], chunk["tail"]
    dicts = [_dicts(chunk["inputs"], n), _dicts(chunk["outputs"], n)]
    return [
        [first + i, *head, given, answered, *tail]
        for i, given, answered in zip(range(n), *dicts, strict=True)
    ]


def _dicts(columns: dict[str, list[str]], n: int) -> list[dict[str, str]]:
    """Return one dict per row of ``columns`` (name -> one value per row)."""
    if not columns:
        return [{} for _ in range(n)]
    names = tuple(columns)
    return [dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True)]
