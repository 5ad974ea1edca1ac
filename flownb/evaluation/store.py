"""Evaluations in the run log: each evaluation's scores, kept under its id in a table of
``FLOWNB_HOME/runs.sqlite`` (next to the runs it made), so a later evaluation can be diffed
against it by id.

What is kept is an :class:`EvalLog`, a pydantic model that reads and writes itself and carries
its schema version (:data:`EVAL_LOG_VERSION`) in its JSON and in the table's ``version``
column. Rows written before there was a version (no column, or ``NULL``) have the same layout
and are read as version 1; a version newer than this flownb knows is refused in one line.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from ..errors import ConfigError
from ..runlog import RUNLOG_FILE
from ..writable import folder_problem, unwritable

if TYPE_CHECKING:
    import pandas as pd

    from .shape import ReportView

__all__ = ["EVAL_LOG_VERSION", "EvalLog", "diff_frames", "load_scores", "save_scores"]

# The layout of a kept evaluation; raise it when the layout changes, and read older ones.
EVAL_LOG_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS evaluations (
    id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    variants TEXT NOT NULL,
    scores TEXT NOT NULL,
    version INTEGER
)
"""


def _connect(home: Path) -> sqlite3.Connection:
    path = Path(home) / RUNLOG_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(_SCHEMA)
        columns = {row[1] for row in db.execute("PRAGMA table_info(evaluations)")}
        if "version" not in columns:  # a run log from before the version existed
            db.execute("ALTER TABLE evaluations ADD COLUMN version INTEGER")
    except (sqlite3.Error, OSError) as exc:
        if folder_problem(path.parent) is not None:
            raise unwritable(path.parent, exc, f"the run log ({path.name})") from exc
        raise ConfigError(f"the run log {path} cannot be used ({exc})") from exc
    return db


def _columns(frame: pd.DataFrame) -> dict[str, list[Any]]:
    clean = frame.astype(object).where(frame.notna(), None)
    return {str(c): clean[c].tolist() for c in clean.columns}


class EvalLog(BaseModel):
    """One evaluation as the run log keeps it: its id, when, its variants and its score frame
    column-wise (column -> one value per row), under a schema ``version``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    version: int = EVAL_LOG_VERSION
    id: str
    created: float = Field(default_factory=time.time)
    variants: list[str]
    scores: dict[str, list[Any]]

    @classmethod
    def of(cls, report: ReportView) -> EvalLog:
        """Return the log of ``report``: its score frame, as of now."""
        return cls(
            id=report.id, variants=list(report.variants), scores=_columns(report.score_frame())
        )

    def frame(self) -> pd.DataFrame:
        """Return the score frame (variant, index, scorers, passed, error)."""
        import pandas as pd

        return pd.DataFrame(self.scores)

    def to_json(self) -> bytes:
        """Return the log as JSON (``version`` first)."""
        return orjson.dumps(self.model_dump())

    @classmethod
    def from_json(cls, data: bytes | str) -> EvalLog:
        """Return the log a :meth:`to_json` wrote (no ``version``: version 1).

        Raises:
            ConfigError: not an evaluation log, or written by a newer flownb.
        """
        try:
            raw = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"not an evaluation log: {exc}") from None
        if not isinstance(raw, dict):
            raise ConfigError("not an evaluation log: expected a JSON object")
        return cls._checked(raw)

    @classmethod
    def _checked(cls, raw: dict[str, Any]) -> EvalLog:
        version = raw.get("version") or 1  # kept before there was a version: the same layout
        if version > EVAL_LOG_VERSION:
            raise ConfigError(
                f"evaluation {raw.get('id')!r} was kept by a newer flownb (log version "
                f"{version}; this one reads up to {EVAL_LOG_VERSION})"
            )
        return cls.model_validate({**raw, "version": version})

    def write(self, home: Path) -> None:
        """Keep the log in the run log of ``home`` (replacing one with the same id).

        Raises:
            ConfigError: the run log cannot be used.
        """
        with closing(_connect(home)) as db:
            db.execute(
                "INSERT OR REPLACE INTO evaluations (id, created, variants, scores, version) "
                "VALUES (?, ?, ?, ?, ?)",
                (
                    self.id,
                    self.created,
                    orjson.dumps(self.variants).decode(),
                    orjson.dumps(self.scores).decode(),
                    self.version,
                ),
            )

    @classmethod
    def read(cls, eval_id: str, home: Path) -> EvalLog:
        """Return the evaluation ``eval_id`` kept in the run log of ``home``.

        Raises:
            ConfigError: no evaluation with that id, or one kept by a newer flownb.
        """
        with closing(_connect(home)) as db:
            row = db.execute(
                "SELECT id, created, variants, scores, version FROM evaluations WHERE id = ?",
                (eval_id,),
            ).fetchone()
            if row is None:
                known = [r[0] for r in db.execute("SELECT id FROM evaluations ORDER BY created")]
                shown = ", ".join(known[-5:]) or "none yet"
                raise ConfigError(f"no evaluation {eval_id!r} in the run log (latest: {shown})")
        return cls._checked(
            {
                "id": row[0],
                "created": row[1],
                "variants": orjson.loads(row[2]),
                "scores": orjson.loads(row[3]),
                "version": row[4],
            }
        )


def save_scores(report: ReportView, home: Path) -> None:
    """Store the report's score frame under its id, as an :class:`EvalLog`."""
    EvalLog.of(report).write(home)


def load_scores(eval_id: str, home: Path) -> pd.DataFrame:
    """Return a stored evaluation's score frame.

    Raises:
        ConfigError: no evaluation with that id, or one kept by a newer flownb.
    """
    return EvalLog.read(eval_id, home).frame()


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
