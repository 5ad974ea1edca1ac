"""What the command line and the ``%flow`` magics share: turning what a user typed into flow
inputs, the same way on both surfaces.

- :func:`flow_location`: whether FLOW names a local flow file (a :class:`~pathlib.Path`) or a
  flow id on a server (a ``str``);
- :func:`read_csv` / :func:`read_json_batch`: batch files, read with one set of options;
- :func:`parse_values` / :func:`parse_map`: ``NAME=VALUE`` and ``VAR=COLUMN`` pairs;
- :data:`CLI` / :data:`MAGIC`: how each surface words the advice in an error (a
  :class:`~flownb.flowfile.inputs.Spelling`), so the command line never tells its users to pass
  ``fill=''``.

Errors here are :class:`~flownb.errors.ConfigError` (an argument that cannot work) or
:class:`~flownb.errors.FlowFileError`; each surface adds its own option name when it shows them.
"""

from __future__ import annotations

import io
import json
import shlex
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.settings import DEFAULT_INPUT_MAX
from ..errors import ConfigError, FlowFileError
from ..flowfile.inputs import Spelling
from ..infra.files import read_input
from ..infra.unicode import lone_surrogate, surrogates_in

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CLI",
    "CSV_OPTIONS",
    "INPUT_FILE_HELP",
    "MAGIC",
    "flow_location",
    "no_server",
    "parse_map",
    "parse_values",
    "read_csv",
    "read_json_batch",
]


def _quoted_map(var: str) -> str:
    return f"--map {shlex.quote(var + '=')}COLUMN"


CLI = Spelling(
    map_option="--map",
    map_example=_quoted_map,
    fill='give --fill "" (or another value)',
    server="give --base-url URL",
)
MAGIC = Spelling(
    map_option="--map",
    map_example=_quoted_map,
    fill="give --fill '' (or another value)",
    server="run %flow connect URL first",
)


# ---- FLOW ------------------------------------------------------------------------------------


def flow_location(ref: str) -> Path | str:
    """Return where FLOW points: a :class:`Path` for a local flow file, else the flow id.

    FLOW names a file when it ends in ``.json``, holds a ``/`` or ``\\`` (either separator, on
    every system, so a path copied from Windows is not sent to a server as an id), or exists
    here.

    Raises:
        FlowFileError: FLOW is a directory (no flow file to load).
    """
    path = Path(ref).expanduser()
    if path.is_dir():
        found = sorted(p.name for p in path.glob("*.json"))[:3]
        example = f" (it holds {', '.join(found)})" if found else ""
        raise FlowFileError(f"{ref} is a directory; give the path of a flow .json file{example}")
    if ref.endswith(".json") or "/" in ref or "\\" in ref or path.is_file():
        return path
    return ref


def no_server(flow_id: str, spelling: Spelling) -> ConfigError:
    """Return the error for a flow id with no server to send it to, worded for ``spelling``."""
    return ConfigError(
        f"{flow_id!r} is not a flow file here; to run a server flow by id, {spelling.server} "
        "(or set FLOWNB_BASE_URL)"
    )


# ---- batch files -----------------------------------------------------------------------------

# What --csv, --json, --data and --scorers say of their file in --help: the cap and its default.
INPUT_FILE_HELP = (
    f"a regular file of at most FLOWNB_INPUT_MAX bytes, default {DEFAULT_INPUT_MAX // 1024**2}M"
)

CSV_OPTIONS: dict[str, Any] = {"dtype": str, "keep_default_na": False, "na_values": [""]}
"""How flownb reads a CSV: every cell as text, and only truly empty cells are missing ("NA" or
"null" may be real text)."""


def read_csv(path: str | Path) -> pd.DataFrame:
    """Return the rows of a CSV file, every cell a string (empty cells NaN).

    Raises:
        ConfigError: no such file, a directory, not a regular file or over ``FLOWNB_INPUT_MAX``
            (see :func:`flownb.infra.files.read_input`), unreadable, or not CSV.
    """
    import pandas as pd

    raw = read_input(path, "the CSV file")
    try:
        return pd.read_csv(io.BytesIO(raw), **CSV_OPTIONS)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not a readable CSV: {exc}") from None


def read_json_batch(path: str | Path) -> list[Any]:
    """Return the elements of a JSON batch file: an array of variable objects, one object, or a
    run request body (``{"variables": ...}``).

    Raises:
        ConfigError: the file cannot be read (see :func:`flownb.infra.files.read_input`), is
            not JSON, holds text that is not valid Unicode (a lone surrogate such as
            ``"\\ud800"``), or holds something else.
    """
    raw = read_input(path, "the JSON file")
    try:
        data = json.loads(raw.decode("utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path} is not JSON (line {exc.lineno} column {exc.colno}: {exc.msg})"
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc.reason})") from None
    for where, bad in surrogates_in(data):
        raise ConfigError(
            f"{path}: {where} holds text that is not valid Unicode (a lone surrogate {bad})"
        )
    if isinstance(data, dict) and "variables" in data:
        data = data["variables"]  # a contract request body works too
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise ConfigError(f"{path} must hold a JSON array of variable objects")
    return data


# ---- pairs -----------------------------------------------------------------------------------


def _checked_pair(pair: str) -> str:
    """Return ``pair`` when it is valid Unicode text.

    Raises:
        ConfigError: it holds a lone surrogate: bytes a command line could not decode as UTF-8
            (Python keeps each as a surrogate), or one a Python string was given.
    """
    bad = lone_surrogate(pair)
    if bad is not None:
        raise ConfigError(
            f"{pair!r} holds bytes that are not UTF-8 text ({bad}); give text in UTF-8"
        )
    return pair


def parse_values(
    pairs: Iterable[str],
    *,
    form: str = "NAME=VALUE",
    convert: Callable[[str, str], str] | None = None,
) -> dict[str, str]:
    """Return the variables ``NAME=VALUE`` pairs set (a value may hold ``=``).

    ``convert(name, raw)`` turns each raw value into the text passed (the magic expands
    ``$name`` there); by default the value is taken as written.

    Raises:
        ConfigError: a pair without ``=`` or a name, a variable given twice, or a pair holding
            bytes that are not UTF-8 text (see :func:`_checked_pair`).
    """
    values: dict[str, str] = {}
    for pair in map(_checked_pair, pairs):
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise ConfigError(f"expected {form}, got {pair!r}")
        if name in values:
            raise ConfigError(f"variable {name!r} is given twice")
        values[name] = convert(name, raw) if convert is not None else raw
    return values


def parse_map(pairs: Iterable[str], *, form: str = "VAR=COLUMN") -> dict[str, str]:
    """Return the variable -> column mapping ``VAR=COLUMN`` pairs give.

    Raises:
        ConfigError: a pair without a variable, ``=`` or column, a variable mapped twice, or a
            pair holding bytes that are not UTF-8 text.
    """
    mapping: dict[str, str] = {}
    for pair in map(_checked_pair, pairs):
        var, sep, col = pair.partition("=")
        if not sep or not var or not col:
            raise ConfigError(f"expected {form}, got {pair!r}")
        if var in mapping:
            raise ConfigError(f"variable {var!r} is mapped twice")
        mapping[var] = col
    return mapping
