"""Evaluations in the run log: each evaluation's scores, kept under its id in a table of
``FLOWNB_HOME/runs.sqlite`` (next to the runs it made), so a later evaluation can be diffed
against it by id.

What is kept is an :class:`EvalLog`, a pydantic model that reads and writes itself and carries
its schema version (:data:`EVAL_LOG_VERSION`) in its JSON and in the table's ``version``
column. Rows written before there was a version (no column, or ``NULL``) have the same layout
and are read as version 1; a version newer than this flownb knows is refused in one line.

Version 2 keeps the whole report, so :func:`flownb.load_report` can bring it back: its
scorers, outputs, input columns and variants' set-up (the ``report`` column), and its results
in ``eval_results``, in chunks of rows (so keeping 100,000 rows never holds a second copy of
them in memory); a version 1 log comes back with its scores only. Human labels go to their
own table, ``eval_labels``, one row per label as it was given (the latest for a (row, variant)
is the one in force); pairwise preferences (which of two variants' outputs is better) to
``eval_preferences`` alike (the latest for a (row, pair) is in force). Both tables were added
without changing the layout of a kept evaluation, so they need no new log version.

Version 3 adds ``repeats`` (``evaluate(..., repeats=k)``): with k > 1 the results kept are every
run (a ``repeat`` column), from which the report's per-row results are made again when it is
read; version 2 and 1 logs read as one repeat.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from ...errors import ConfigError
from ...infra.private import private_dir, private_file
from ...infra.writable import folder_problem, unwritable
from ...runtime.runlog import RUNLOG_FILE

if TYPE_CHECKING:
    import pandas as pd

    from .shape import ReportView

__all__ = [
    "EVAL_LOG_VERSION",
    "LABEL_COLUMNS",
    "PREFERENCE_COLUMNS",
    "EvalLog",
    "diff_frames",
    "list_logs",
    "load_scores",
    "read_labels",
    "read_preferences",
    "read_results",
    "save_labels",
    "save_preferences",
    "save_results",
    "save_scores",
]

# The layout of a kept evaluation; raise it when the layout changes, and read older ones.
# 1: scores only. 2: the whole report (results, scorers, outputs, inputs) as well. 3: repeats
# (the results kept are every run when there are several).
EVAL_LOG_VERSION = 3

# The columns of ``report.preferences``, in order.
PREFERENCE_COLUMNS = ["row", "a", "b", "winner", "shown_first", "note", "labelled_at"]

# The label columns of ``report.labels``, in order (the inputs and outputs labelled follow).
LABEL_COLUMNS = ["row", "variant", "passed", "score", "note", "labelled_at"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS evaluations (
    id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    variants TEXT NOT NULL,
    scores TEXT NOT NULL,
    version INTEGER
)
"""
_LABELS_SCHEMA = """
CREATE TABLE IF NOT EXISTS eval_labels (
    id INTEGER PRIMARY KEY,
    eval_id TEXT NOT NULL,
    row TEXT NOT NULL,
    variant TEXT NOT NULL,
    passed INTEGER,
    score REAL,
    note TEXT NOT NULL,
    labelled_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS eval_labels_eval ON eval_labels (eval_id);
CREATE TABLE IF NOT EXISTS eval_preferences (
    id INTEGER PRIMARY KEY,
    eval_id TEXT NOT NULL,
    row TEXT NOT NULL,
    a TEXT NOT NULL,
    b TEXT NOT NULL,
    winner TEXT NOT NULL,
    shown_first TEXT,
    note TEXT NOT NULL,
    labelled_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS eval_preferences_eval ON eval_preferences (eval_id);
CREATE TABLE IF NOT EXISTS eval_results (
    eval_id TEXT NOT NULL,
    chunk INTEGER NOT NULL,
    rows BLOB NOT NULL,
    PRIMARY KEY (eval_id, chunk)
);
"""
# Rows of the results frame per eval_results chunk: one small JSON document each.
_RESULT_CHUNK = 5_000


def _connect(home: Path) -> sqlite3.Connection:
    path = Path(home) / RUNLOG_FILE
    try:
        private_dir(path.parent)
        private_file(path)  # 0600 before SQLite opens it: its WAL files take its mode
        db = sqlite3.connect(path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(_SCHEMA)
        db.executescript(_LABELS_SCHEMA)
        columns = {row[1] for row in db.execute("PRAGMA table_info(evaluations)")}
        if "version" not in columns:  # a run log from before the version existed
            db.execute("ALTER TABLE evaluations ADD COLUMN version INTEGER")
        if "report" not in columns:  # a run log from before version 2
            db.execute("ALTER TABLE evaluations ADD COLUMN report TEXT")
    except (sqlite3.Error, OSError) as exc:
        if folder_problem(path.parent) is not None:
            raise unwritable(path.parent, exc, f"the run log ({path.name})") from exc
        raise ConfigError(f"the run log {path} cannot be used ({exc})") from exc
    return db


def _columns(frame: pd.DataFrame) -> dict[str, list[Any]]:
    clean = frame.astype(object).where(frame.notna(), None)
    return {str(c): clean[c].tolist() for c in clean.columns}


def _json(value: Any) -> str:
    # Input columns may hold anything a DataFrame can (dates, numpy scalars): kept as text then.
    return orjson.dumps(value, default=str, option=orjson.OPT_SERIALIZE_NUMPY).decode()


# What version 2 keeps besides the scores (the ``report`` column).
_REPORT_FIELDS = (
    "scorers",
    "outputs",
    "kinds",
    "index_name",
    "inputs",
    "variant_params",
    "repeats",
    "flows",
)


class EvalLog(BaseModel):
    """One evaluation as the run log keeps it: its id, when, its variants and its score frame
    column-wise (column -> one value per row), under a schema ``version``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    version: int = EVAL_LOG_VERSION
    id: str
    created: float = Field(default_factory=time.time)
    variants: list[str]
    scores: dict[str, list[Any]]
    # Version 2: what the report is made of (empty in a version 1 log; its results are kept
    # apart, see save_results).
    scorers: list[dict[str, Any]] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)
    kinds: dict[str, str] = Field(default_factory=dict)
    index_name: str = "index"
    inputs: list[str] = Field(default_factory=list)
    variant_params: dict[str, dict[str, str]] = Field(default_factory=dict)
    # Version 3: runs per (variant, row); the kept results hold every run when above 1.
    repeats: int = 1
    # Variant -> its flow as flow.save writes it (empty when kept by an older flownb, which
    # ignores this field: no new version needed).
    flows: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @classmethod
    def of(cls, report: ReportView) -> EvalLog:
        """Return the log of ``report``: its score frame and make-up, as of now."""
        created = getattr(report, "created", None)
        return cls(
            created=created if isinstance(created, float) else time.time(),
            id=report.id,
            variants=list(report.variants),
            scores=_columns(report.score_frame()),
            scorers=[dict(vars(s)) for s in report.scorers],
            outputs=list(report.outputs),
            kinds=dict(report.kinds),
            index_name=report.index_name,
            inputs=list(report.inputs),
            variant_params=dict(getattr(report, "variant_params", {})),
            repeats=int(getattr(report, "repeats", 1)),
            flows=dict(getattr(report, "flow_files", {})),
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
                "INSERT OR REPLACE INTO evaluations (id, created, variants, scores, version, "
                "report) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    self.id,
                    self.created,
                    orjson.dumps(self.variants).decode(),
                    _json(self.scores),
                    self.version,
                    _json({k: getattr(self, k) for k in _REPORT_FIELDS}),
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
                "SELECT id, created, variants, scores, version, report FROM evaluations "
                "WHERE id = ?",
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
                **(orjson.loads(row[5]) if row[5] else {}),
            }
        )


def save_scores(report: ReportView, home: Path) -> None:
    """Store the report under its id: an :class:`EvalLog`, and its results frame (every run,
    when the evaluation repeated its rows)."""
    log = EvalLog.of(report)
    log.write(home)
    save_results(report.id, report.runs if log.repeats > 1 else report.results, home)


def _chunks(frame: pd.DataFrame) -> Iterator[bytes]:
    for start in range(0, len(frame), _RESULT_CHUNK):
        yield _json(_columns(frame.iloc[start : start + _RESULT_CHUNK])).encode()


def save_results(eval_id: str, frame: pd.DataFrame, home: Path) -> None:
    """Keep ``frame`` (a report's results) under ``eval_id``, replacing any kept before: one
    transaction, one chunk of rows in memory at a time.

    Raises:
        ConfigError: the run log cannot be used.
    """
    with closing(_connect(home)) as db:
        try:
            db.execute("BEGIN")
            db.execute("DELETE FROM eval_results WHERE eval_id = ?", (eval_id,))
            db.executemany(
                "INSERT INTO eval_results (eval_id, chunk, rows) VALUES (?, ?, ?)",
                ((eval_id, k, rows) for k, rows in enumerate(_chunks(frame))),
            )
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            db.execute("ROLLBACK")
            raise ConfigError(f"the results could not be kept in the run log ({exc})") from exc


def read_results(eval_id: str, home: Path) -> pd.DataFrame | None:
    """Return the results frame kept under ``eval_id``, or None (kept by a version 1 log)."""
    import pandas as pd

    with closing(_connect(home)) as db:
        chunks = [
            pd.DataFrame(orjson.loads(rows))
            for (rows,) in db.execute(
                "SELECT rows FROM eval_results WHERE eval_id = ? ORDER BY chunk", (eval_id,)
            )
        ]
    if not chunks:
        return None
    return pd.concat(chunks, ignore_index=True) if len(chunks) > 1 else chunks[0]


def load_scores(eval_id: str, home: Path) -> pd.DataFrame:
    """Return a stored evaluation's score frame.

    Raises:
        ConfigError: no evaluation with that id, or one kept by a newer flownb.
    """
    return EvalLog.read(eval_id, home).frame()


def list_logs(home: Path) -> list[tuple[str, float, list[str], int, int]]:
    """Return every evaluation kept in the run log of ``home``, oldest first: its id, when, its
    variants, its input rows and how many (row, variant) pairs carry a label."""
    if not (Path(home) / RUNLOG_FILE).exists():
        return []
    with closing(_connect(home)) as db:
        labelled = dict(
            db.execute(
                "SELECT eval_id, COUNT(DISTINCT row || char(0) || variant) FROM eval_labels "
                "GROUP BY eval_id"
            ).fetchall()
        )
        found = []
        for eval_id, created, variants, scores in db.execute(
            "SELECT id, created, variants, scores FROM evaluations ORDER BY created"
        ):
            names = orjson.loads(variants)
            runs = len(orjson.loads(scores).get("variant", []))
            rows = runs // len(names) if names else 0
            found.append((eval_id, created, names, rows, int(labelled.get(eval_id, 0))))
    return found


def _append(home: Path, insert: str, rows: list[tuple[Any, ...]], what: str) -> None:
    """Insert ``rows`` with the statement ``insert`` into the run log of ``home``, in one
    transaction.

    Raises:
        ConfigError: the run log cannot be used (the message names ``what`` was not kept).
    """
    with closing(_connect(home)) as db:
        try:
            db.execute("BEGIN")
            db.executemany(insert, rows)
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            db.execute("ROLLBACK")
            raise ConfigError(f"the {what} could not be kept in the run log ({exc})") from exc


def _select(home: Path, query: str, eval_id: str) -> list[tuple[Any, ...]]:
    """Return the rows ``query`` finds for ``eval_id`` in the run log of ``home`` (none when
    there is no run log yet)."""
    if not (Path(home) / RUNLOG_FILE).exists():
        return []
    with closing(_connect(home)) as db:
        return db.execute(query, (eval_id,)).fetchall()


def save_labels(eval_id: str, labels: list[dict[str, Any]], home: Path) -> None:
    """Append ``labels`` (dicts with the :data:`LABEL_COLUMNS`) to the run log of ``home``
    under ``eval_id``, in one transaction.

    Raises:
        ConfigError: the run log cannot be used.
    """
    _append(
        home,
        "INSERT INTO eval_labels (eval_id, row, variant, passed, score, note, "
        "labelled_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (
                eval_id,
                _json(lab["row"]),
                lab["variant"],
                None if lab["passed"] is None else int(lab["passed"]),
                lab["score"],
                lab["note"],
                lab["labelled_at"],
            )
            for lab in labels
        ],
        "labels",
    )


def read_labels(eval_id: str, home: Path) -> list[dict[str, Any]]:
    """Return every label kept for ``eval_id`` in the run log of ``home``, in the order given."""
    rows = _select(
        home,
        "SELECT row, variant, passed, score, note, labelled_at FROM eval_labels "
        "WHERE eval_id = ? ORDER BY id",
        eval_id,
    )
    return [
        {
            "row": orjson.loads(row),
            "variant": variant,
            "passed": None if passed is None else bool(passed),
            "score": score,
            "note": note,
            "labelled_at": at,
        }
        for row, variant, passed, score, note, at in rows
    ]


def save_preferences(eval_id: str, given: list[dict[str, Any]], home: Path) -> None:
    """Append pairwise preferences (dicts with the :data:`PREFERENCE_COLUMNS`) to the run log of
    ``home`` under ``eval_id``, in one transaction.

    Raises:
        ConfigError: the run log cannot be used.
    """
    _append(
        home,
        "INSERT INTO eval_preferences (eval_id, row, a, b, winner, shown_first, note, "
        "labelled_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                eval_id,
                _json(p["row"]),
                p["a"],
                p["b"],
                p["winner"],
                p["shown_first"],
                p["note"],
                p["labelled_at"],
            )
            for p in given
        ],
        "preferences",
    )


def read_preferences(eval_id: str, home: Path) -> list[dict[str, Any]]:
    """Return every pairwise preference kept for ``eval_id`` in the run log of ``home``, in the
    order given."""
    rows = _select(
        home,
        "SELECT row, a, b, winner, shown_first, note, labelled_at FROM eval_preferences "
        "WHERE eval_id = ? ORDER BY id",
        eval_id,
    )
    return [
        dict(zip(PREFERENCE_COLUMNS, (orjson.loads(row), *rest), strict=True))
        for row, *rest in rows
    ]


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
