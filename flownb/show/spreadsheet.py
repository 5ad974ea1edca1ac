"""CSV files written for people: cells a spreadsheet would run as formulas are neutralised.

A model output or an input cell such as ``=HYPERLINK("http://...", "click")`` is a formula to
Excel, LibreOffice or Google Sheets when the CSV is opened there. As OWASP recommends for CSV
injection, every text cell (and column name) that starts with ``=``, ``+``, ``-``, ``@``, a tab
or a carriage return gets a leading ``'``, which spreadsheets show as text. Every CSV flownb
writes (``EvalReport.save``, ``flownb eval --out``, ``flownb run --out``) goes through
:func:`csv_text`; pipelines that need the text exactly as produced opt out (``safe_csv=False``,
``--raw-csv``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FORMULA_START", "csv_text", "neutralise"]

# What a spreadsheet takes as the start of a formula (OWASP's list for CSV injection).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralise(value: Any) -> Any:
    """Return ``value`` with a ``'`` put before it when it is text a spreadsheet would run as a
    formula; anything else (numbers, missing values, other text) is returned as it is."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_text(df: pd.DataFrame, *, safe: bool = True) -> str:
    """Return ``df`` as CSV text without its index, rows ended by CRLF; with ``safe`` (the
    default) every text cell and column name that would start a formula is neutralised (see
    :func:`neutralise`)."""
    if safe:
        df = _neutralised(df)
    # CRLF ends rows (RFC 4180), and so a carriage return inside a cell is quoted: with "\n"
    # alone, pandas leaves "a\r=1+1" bare, and a spreadsheet starts a new row, and a formula, there.
    return df.to_csv(index=False, lineterminator="\r\n")


def _neutralised(df: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    if df.shape[1] == 0:
        return df
    # By position: column names may repeat. Numeric columns hold no text and are kept as is.
    columns: dict[int, pd.Series] = {}
    for i in range(df.shape[1]):
        column = df.iloc[:, i]
        if column.dtype == object or pd.api.types.is_string_dtype(column.dtype):
            column = column.map(neutralise, na_action="ignore")
        columns[i] = column
    out = pd.DataFrame(columns, index=df.index)
    out.columns = pd.Index([neutralise(c) for c in df.columns], dtype=object)
    return out
