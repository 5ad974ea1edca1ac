"""What ``flownb endpoints`` and ``flownb.endpoints()`` show: every endpoint declared in the
``flownb.toml`` files seen from a folder, where each comes from, where its calls go and which
key variable is sent there."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from .endpoints import Endpoint, declarations, endpoint_files, table_endpoint

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["COLUMNS", "endpoint_table", "endpoints"]

COLUMNS = ("name", "provider", "host", "key_env", "file", "status")


def endpoints(*, home: str | Path | None = None, cwd: str | Path | None = None) -> pd.DataFrame:
    """Return the endpoints declared in the ``flownb.toml`` files seen from ``cwd`` (default:
    the working folder; then its parents, then ``home``, default FLOWNB_HOME), one row per
    declaration, nearest file first: ``name``, ``provider``, ``host`` where its calls go,
    ``key_env`` the variable whose key is sent there (``-``: none), ``file`` it came from and
    ``status`` (``used``, or ``hidden by FILE`` when a nearer file declares the same name).

    Raises:
        ConfigError: a file is not TOML, or an endpoint table is wrong.
    """
    import pandas as pd

    from .settings import resolve_run_config

    where = resolve_run_config(home=home, local=False).home
    rows = endpoint_table(Path(cwd) if cwd is not None else Path.cwd(), where)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def endpoint_table(cwd: Path, home: Path) -> list[dict[str, str]]:
    """Return one row per declaration in the ``flownb.toml`` files seen from ``cwd``, nearest
    file first: ``name``, ``provider``, ``host`` (the provider's default when empty),
    ``key_env`` (the variable whose key is sent there; ``-``: none), ``file`` and ``status``
    (``used``, or ``hidden by FILE`` for a declaration a nearer file hides).

    Raises:
        ConfigError: a file is not TOML, or an endpoint table is wrong.
    """
    declared = declarations(cwd, home)
    rows: list[dict[str, str]] = []
    for name, entry in declared.items():
        rows.append(_row(name, entry.endpoint, entry.file, "used"))
        for hidden in entry.shadows:
            data = tomllib.loads(hidden.read_text(encoding="utf-8"))
            endpoint = table_endpoint(name, data["endpoints"][name], hidden)
            rows.append(_row(name, endpoint, hidden, f"hidden by {entry.file}"))
    order = {path: i for i, path in enumerate(endpoint_files(cwd, home))}
    return sorted(rows, key=lambda r: (order[Path(r["file"])], r["name"]))


def _row(name: str, endpoint: Endpoint, file: Path, status: str) -> dict[str, str]:
    return {
        "name": name,
        "provider": endpoint.provider,
        "host": endpoint.host or f"({endpoint.provider} default)",
        "key_env": endpoint.key_env or "-",
        "file": str(file),
        "status": status,
    }
