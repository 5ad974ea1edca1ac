"""Evaluations in the run log: each evaluation's scores, kept under its id in a table of
``FLOWNB_HOME/runs.sqlite`` (next to the runs it made), so a later evaluation can be diffed
against it by id."""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ..errors import ConfigError
from ..runlog import RUNLOG_FILE
from ..writable import folder_problem, unwritable

if TYPE_CHECKING:
    import pandas as pd

    from .report import EvalReport

__all__ = ["diff_frames", "load_scores", "save_scores"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS evaluations (
    id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    variants TEXT NOT NULL,
    scores TEXT NOT NULL
)
"""


def _connect(home: Path) -> sqlite3.Connection:
    path = Path(home) / RUNLOG_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(_SCHEMA)
    except (sqlite3.Error, OSError) as exc:
        if folder_problem(path.parent) is not None:
            raise unwritable(path.parent, exc, f"the run log ({path.name})") from exc
        raise ConfigError(f"the run log {path} cannot be used ({exc})") from exc
    return db


def _columns(frame: pd.DataFrame) -> dict[str, list[Any]]:
    clean = frame.astype(object).where(frame.notna(), None)
    return {str(c): clean[c].tolist() for c in clean.columns}


def save_scores(report: EvalReport, home: Path) -> None:
    """Store the report's score frame under its id (column-wise JSON: one list per column)."""
    data = orjson.dumps(_columns(report.score_frame()))
    with closing(_connect(home)) as db:
        db.execute(
            "INSERT OR REPLACE INTO evaluations VALUES (?, ?, ?, ?)",
            (report.id, time.time(), orjson.dumps(report.variants).decode(), data.decode()),
        )


def load_scores(eval_id: str, home: Path) -> pd.DataFrame:
    """Return a stored evaluation's score frame.

    Raises:
        ConfigError: no evaluation with that id.
    """
    import pandas as pd

    with closing(_connect(home)) as db:
        row = db.execute("SELECT scores FROM evaluations WHERE id = ?", (eval_id,)).fetchone()
        if row is None:
            known = [r[0] for r in db.execute("SELECT id FROM evaluations ORDER BY created")]
            shown = ", ".join(known[-5:]) or "none yet"
            raise ConfigError(f"no evaluation {eval_id!r} in the run log (latest: {shown})")
    return pd.DataFrame(orjson.loads(row[0]))


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) and isinstance(b, float | int):
        return abs(a - float(b)) <= 1e-12 or (a != a and b != b)
    return bool(a == b)


def diff_frames(before: pd.DataFrame, after: pd.DataFrame, index_name: str) -> pd.DataFrame:
    """Return the (variant, index) rows of ``after`` whose scores, pass or error differ from
    ``before``, with ``<column>_before`` / ``<column>_after`` for the columns compared."""
    import pandas as pd

    keys = ["variant", "index"]
    compared = [c for c in after.columns if c not in keys and c in before.columns]
    a = _columns(before.set_index(keys)[compared].reset_index())
    b = _columns(after.set_index(keys)[compared].reset_index())
    old = {
        (v, i): {c: a[c][k] for c in compared}
        for k, (v, i) in enumerate(zip(a["variant"], a["index"], strict=True))
    }
    rows = []
    for k, key in enumerate(zip(b["variant"], b["index"], strict=True)):
        prev = old.get(key)
        now = {c: b[c][k] for c in compared}
        if prev is None:
            changed = compared  # a row the earlier evaluation did not have
            prev = dict.fromkeys(compared)
        else:
            changed = [c for c in compared if not _same(prev[c], now[c])]
        if changed:
            row: dict[str, Any] = {"variant": key[0], index_name: key[1]}
            for c in compared:
                row[f"{c}_before"], row[f"{c}_after"] = prev[c], now[c]
            rows.append(row)
    columns = ["variant", index_name] + [f"{c}_{w}" for c in compared for w in ("before", "after")]
    return pd.DataFrame(rows, columns=columns)
