"""What a notebook shows, and keeps, of a polars frame: polars' own views (its text and its HTML
table), with the cells of its image columns read as
:func:`~flownb.show.display.image_label` says (``[image: 256x256 PNG, sha256 9537ec4408f1]``)
instead of the ``file://`` URLs of this machine's media store.

``run_dataframe`` hands a polars frame back as polars, and polars frames carry no ``attrs``, so
which columns are images is read from the cells, as for a pandas frame that lost flownb's mark
(:func:`~flownb.show.display.image_columns`): a text column whose first non-empty cells all
name files of flownb's media store. Only the rows polars shows are read (its
``POLARS_FMT_MAX_ROWS``: the first and last rows of a longer frame), so showing a long frame
does not read every image; each label is shown whole (polars would cut it at
``POLARS_FMT_STR_LEN`` characters). :mod:`flownb.show.frame_views` registers these views with
the pandas ones.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from .display import edge_rows, image_label, is_media_file_url, names_media_files
from .escape import no_math

__all__ = ["mark_polars", "polars_html", "polars_text", "with_image_labels"]

# How many non-empty cells of a text column are read to tell an image column (as for pandas).
SAMPLE = 200
# The rows polars shows when POLARS_FMT_MAX_ROWS is not set (its documented default).
POLARS_ROWS = 10


# id -> weak reference of each polars frame flownb handed back (polars frames are unhashable,
# so no WeakSet); an entry leaves as its frame is collected.
_HANDED_BACK: dict[int, weakref.ref[Any]] = {}


def mark_polars(df: Any) -> Any:
    """Return ``df`` (the same object), marked as a frame flownb handed back: its HTML view
    shows every ``$`` as written."""
    key = id(df)

    def forget(_gone: weakref.ref[Any]) -> None:
        _HANDED_BACK.pop(key, None)

    _HANDED_BACK[key] = weakref.ref(df, forget)
    return df


def _handed_back(df: Any) -> bool:
    ref = _HANDED_BACK.get(id(df))
    return ref is not None and ref() is df


def with_image_labels(df: Any) -> Any:
    """Return polars frame ``df`` with the cells of its image columns that polars would show
    read as their :func:`~flownb.show.display.image_label`, or ``df`` itself when it has no
    image column (a copy is made only then: ``df`` is never changed)."""
    return _labelled(df)[0]


def polars_text(df: Any, p: Any, cycle: bool) -> None:
    """Write polars' own text of ``df`` with image cells described (IPython's pretty-printer
    protocol, for ``text/plain``: what a saved notebook and a terminal keep)."""
    try:
        p.text(_shown(df, repr))
    except Exception:  # a frame we do not handle: polars' own text, never a broken cell
        p.text(repr(df))


def polars_html(df: Any) -> str | None:
    """Return polars' own HTML table of ``df`` with image cells described; for a frame flownb
    handed back (:func:`mark_polars`), with every ``$`` shown as written."""
    try:
        shown: str | None = _shown(df, lambda frame: frame._repr_html_())
    except Exception:  # a frame we do not handle: polars' own table, never a broken cell
        return df._repr_html_()
    if shown is None or not _handed_back(df):
        return shown
    # polars writes no "$" of its own (its tags and style have none, and it escapes the
    # cells), so every one is a cell's or a column name's: each in a span of its own, in an
    # element the front ends' math typesetters skip, as flownb's pandas view does.
    return no_math(shown.replace("$", "<span>$</span>"), css="flownb-frame")


def _shown(df: Any, view: Callable[[Any], Any]) -> Any:
    """Return ``view`` of ``df`` with its image cells described, each label whole: polars cuts
    text cells to ``POLARS_FMT_STR_LEN`` characters, which would cut a label's digest, so that
    length is raised to the longest label's while the view is made (other text cells of the
    frame are then cut there too)."""
    labelled, width = _labelled(df)
    if width == 0:
        return view(df)
    import polars as pl

    if _setting("POLARS_FMT_STR_LEN", 0) >= width:
        return view(labelled)
    with pl.Config(fmt_str_lengths=width):
        return view(labelled)


def _labelled(df: Any) -> tuple[Any, int]:
    """Return ``df`` with the image cells polars would show labelled (``df`` itself when it
    has no image column), and the length of the longest label (0: none)."""
    import polars as pl

    columns = [
        name
        for name, dtype in df.schema.items()
        if dtype == pl.String and _images_only(df.get_column(name))
    ]
    if not columns:
        return df, 0
    shown = _shown_rows(df.height)
    width = 0
    labelled = []
    for name in columns:
        cells = df.get_column(name).to_list()
        for i in shown:
            cells[i] = _label(cells[i])
            width = max(width, len(cells[i]) if isinstance(cells[i], str) else 0)
        labelled.append(pl.Series(name, cells, dtype=pl.String))
    return df.with_columns(labelled), width


def _images_only(column: Any) -> bool:
    """Whether the first :data:`SAMPLE` non-empty cells of ``column`` all name media-store
    files (and there is one), as for a pandas frame without flownb's mark."""
    return names_media_files(column.drop_nulls().head(SAMPLE).to_list(), SAMPLE)


def _shown_rows(height: int) -> set[int]:
    """Return the rows polars' views of a frame of ``height`` rows show: all, or the first and
    last ones (POLARS_FMT_MAX_ROWS, negative: all)."""
    limit = _setting("POLARS_FMT_MAX_ROWS", POLARS_ROWS)
    return edge_rows(height, None if limit < 0 else limit)


def _setting(name: str, default: int) -> int:
    """Return polars' display setting ``name`` (``pl.Config``'s), ``default`` when not set."""
    import polars as pl

    value = pl.Config.state(if_set=True, env_only=True).get(name)
    try:
        return default if value is None else int(value)
    except (TypeError, ValueError):
        return default


def _label(value: Any) -> Any:
    """Return a cell as it is shown: an image's label, an empty cell as it is."""
    return image_label(value) if isinstance(value, str) and is_media_file_url(value) else value
