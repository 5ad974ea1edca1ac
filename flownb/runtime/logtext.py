"""The run log's rows for a batch answered at once, made as JSON text column by column.

A row is ``[index, *head, {input: value, ...}, {output: value, ...}, *tail]`` (see
:mod:`flownb.runtime.runlog` for the fields), where only the index and the strings vary from
row to row. Each column of strings is encoded once (one ``orjson`` call) and split back into
its elements; the rows are then the elements and the fixed JSON between them put side by side
and joined once: no list, dict or encoder call per row, so 10,000 rows take milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson

__all__ = ["json_strings", "rows_text"]


def rows_text(
    groups: Sequence[Mapping[str, Sequence[str]]],
    head: list[Any],
    tail: list[Any],
    *,
    rows: int,
    chunk: int,
) -> Iterator[bytes]:
    """Yield the UTF-8 JSON text of the list of ``rows`` rows, ``chunk`` rows at a time: row
    ``i`` is ``[i, *head, {name: column[i] for each column of a group}..., *tail]``; each
    column of ``groups`` (name -> one string per row) holds at least ``rows`` strings.

    Raises:
        TypeError: a column holds something other than strings.
    """
    columns = [column for group in groups for column in group.values()]
    glue = _glue(groups, head, tail)
    width = 2 * len(columns) + 2  # a row's pieces: index, then glue and string per column, glue
    for start in range(0, rows, chunk):
        size = min(rows, start + chunk) - start
        # Row i is i + glue[0] + its first string + glue[1] + ... + glue[-1]: every row's
        # pieces put side by side with slice assignments, then joined once.
        pieces = [b""] * (size * width)
        pieces[0::width] = orjson.dumps(list(range(start, start + size)))[1:-1].split(b",")
        for k, column in enumerate(columns):
            pieces[2 * k + 1 :: width] = [glue[k]] * size
            pieces[2 * k + 2 :: width] = json_strings(column[start : start + size])
        pieces[width - 1 :: width] = [glue[-1]] * size
        pieces[0] = b"[[" + pieces[0]  # the list, then its first row
        pieces[-1] = glue[-1][:-2] + b"]"  # the last row opens no next one, the list ends
        yield b"".join(pieces)


def _glue(
    groups: Sequence[Mapping[str, Sequence[str]]], head: list[Any], tail: list[Any]
) -> list[bytes]:
    """Return the JSON text between a row's varying fields: after the index and before the
    first string, between consecutive strings, and after the last (closing the row and
    opening the next: ``],[``)."""

    def inner(values: list[Any]) -> bytes:
        return orjson.dumps(values)[1:-1]

    glue: list[bytes] = []
    before = b"," + inner(head) + b","
    for group in groups:
        keys = [orjson.dumps(str(name)) for name in group]
        if not keys:
            before += b"{},"
            continue
        for k, key in enumerate(keys):
            glue.append(before + (b"{" if k == 0 else b"") + key + b':"')
            before = b'",'
        before = b'"},'
    glue.append(before + inner(tail) + b"],[")
    return glue


def json_strings(values: Sequence[str]) -> list[bytes]:
    """Return each of ``values`` as JSON text without its quotes, in one encoding pass: in the
    encoded list, ``","`` occurs only between elements (a quote inside a string is escaped, so
    an unescaped quote right after a comma starts the next element).

    Raises:
        TypeError: a value is not a string.
    """
    if not values:
        return []
    strings = orjson.dumps(list(values))[2:-2].split(b'","')
    if len(strings) != len(values):  # a value that is no string: encoded without quotes
        raise TypeError("the run log's columns hold strings only")
    return strings
