"""``flownb gc``: prune what flownb keeps under FLOWNB_HOME, by age and/or size.

What grows there without bound:

- ``media/``: every generated image (offline drawings, provider images), one file each;
- ``cache.sqlite``: the call cache, one row per distinct call;
- ``runs.sqlite``: the run log, one row per run.

By age (``older_than`` seconds), images older than that are deleted, cache rows created before
it, and run-log chunks whose last run finished before it. By size (``max_size`` bytes), the
oldest images are deleted until the media folder fits. A cache row whose image is gone is a miss
(the call is made again); a server re-draws an offline image on its next request. The key files
and the media naming secret are never touched.
"""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from ..config.settings import parse_size
from ..errors import ConfigError
from ..infra.media import MEDIA_NAME
from ..runtime.cache import CACHE_FILE
from ..runtime.runlog import RUNLOG_FILE

__all__ = ["Pruned", "parse_age", "parse_size", "prune"]

_AGE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", re.IGNORECASE)
_AGE_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """Return the seconds in an age like ``30d``, ``12h``, ``45m``, ``90s``, ``2w`` or ``3600``.

    Raises:
        ConfigError: not such an age.
    """
    match = _AGE.fullmatch(text)
    if match is None:
        raise ConfigError(f"{text!r} is not an age; write e.g. 30d, 12h, 45m or 90s")
    return float(match.group(1)) * _AGE_UNITS[match.group(2).lower()]


@dataclass
class Pruned:
    """What a prune removed (or, in a dry run, would remove) and what it kept."""

    media_removed: int = 0
    media_removed_bytes: int = 0
    media_kept: int = 0
    media_kept_bytes: int = 0
    cache_rows_removed: int = 0
    runs_removed: int = 0

    def lines(self, dry_run: bool) -> list[str]:
        """Return a human summary, one line per store."""
        verb = "would remove" if dry_run else "removed"
        return [
            f"media: {verb} {self.media_removed} image(s) ({_mib(self.media_removed_bytes)}), "
            f"kept {self.media_kept} ({_mib(self.media_kept_bytes)})",
            f"cache: {verb} {self.cache_rows_removed} entry(ies)",
            f"run log: {verb} {self.runs_removed} run(s)",
        ]


def _mib(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB"


def prune(
    home: str | Path,
    *,
    older_than: float | None = None,
    max_size: int | None = None,
    dry_run: bool = False,
    now: float | None = None,
) -> Pruned:
    """Prune FLOWNB_HOME ``home``; return what was (or would be) removed.

    Raises:
        ConfigError: neither ``older_than`` nor ``max_size`` given, or a store cannot be read.
    """
    if older_than is None and max_size is None:
        raise ConfigError("say what to prune: --older-than AGE and/or --max-size SIZE")
    home = Path(home)
    cutoff = (now if now is not None else time.time()) - older_than if older_than else None
    out = Pruned()
    _prune_media(home / "media", cutoff, max_size, dry_run, out)
    if cutoff is not None:
        out.cache_rows_removed = _prune_db(
            home / CACHE_FILE,
            "SELECT count(*) FROM calls WHERE created < ?",
            "DELETE FROM calls WHERE created < ?",
            cutoff,
            dry_run,
        )
        # A chunk holds one batch's rows: it goes when its last run finished before the cutoff
        # (kept beside a compressed chunk; read from the rows of one stored as JSON text).
        last = (
            "(CASE WHEN finished IS NOT NULL THEN finished ELSE (SELECT max(json_extract("
            "r.value, '$[1]')) FROM json_each(chunks.rows) AS r) END)"
        )
        count = "coalesce(n, json_array_length(rows))"
        out.runs_removed = _prune_db(
            home / RUNLOG_FILE,
            f"SELECT coalesce(sum({count}), 0) FROM chunks WHERE {last} < ?",
            f"DELETE FROM chunks WHERE {last} < ?",
            cutoff,
            dry_run,
        )
    return out


def _prune_media(
    directory: Path, cutoff: float | None, max_size: int | None, dry_run: bool, out: Pruned
) -> None:
    files: list[tuple[float, int, Path]] = []
    try:
        entries = list(directory.iterdir())
    except FileNotFoundError:
        return
    for path in entries:
        if not MEDIA_NAME.fullmatch(path.name):
            continue  # not an image flownb named (temp files, anything else): left alone
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        files.append((st.st_mtime, st.st_size, path))
    files.sort()  # oldest first
    doomed = [f for f in files if cutoff is not None and f[0] < cutoff]
    kept = files[len(doomed) :]
    if max_size is not None:
        total = sum(size for _, size, _ in kept)
        while kept and total > max_size:
            oldest = kept.pop(0)
            doomed.append(oldest)
            total -= oldest[1]
    for _, size, path in doomed:
        if not dry_run:
            path.unlink(missing_ok=True)
        out.media_removed += 1
        out.media_removed_bytes += size
    out.media_kept = len(kept)
    out.media_kept_bytes = sum(size for _, size, _ in kept)


def _prune_db(path: Path, count_sql: str, delete_sql: str, cutoff: float, dry_run: bool) -> int:
    if not path.exists():
        return 0
    try:
        db = sqlite3.connect(path, timeout=30, isolation_level=None)
        try:
            n = int(db.execute(count_sql, (cutoff,)).fetchone()[0])
            if n and not dry_run:
                db.execute(delete_sql, (cutoff,))
                db.execute("VACUUM")  # give the space back to the disk
            return n
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise ConfigError(f"{path} cannot be pruned ({exc}); is it a flownb file?") from None
