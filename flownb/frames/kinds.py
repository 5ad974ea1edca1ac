"""DataFrames of other libraries (polars, and any eager frame narwhals reads) through the frame
features, which work on pandas: each takes the caller's kind of frame and returns that kind.

:func:`takes_any_frame` wraps such a feature. A pandas frame goes straight through. Any other
eager frame is read into a pandas frame column by column (as Python values, so no pyarrow is
needed) and the feature runs on that; the columns it adds (outputs, errors) are then appended to
the caller's own frame as text columns, so its columns keep their types. An input column the
feature changed (``fill=`` puts text in its empty cells) comes back as the text the flow was
given. narwhals is imported only when a non-pandas frame arrives.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..flowfile.inputs import to_text
from ..show.polars_frame import mark_polars

if TYPE_CHECKING:
    import narwhals as nw
    import pandas as pd

__all__ = ["takes_any_frame"]

F = TypeVar("F", bound=Callable[..., Any])


def takes_any_frame(function: F) -> F:
    """Return ``function`` (called as ``function(flow, df, ...)`` with a pandas ``df``) made to
    also take a polars (or other narwhals-readable eager) DataFrame, returning the same kind.

    The wrapper raises:
        TypeError: ``df`` is not a DataFrame, or is a lazy frame (collect it first).
    """

    @functools.wraps(function)
    def wrapper(flow: Any, df: Any, *args: Any, **kwargs: Any) -> Any:
        import pandas as pd

        if isinstance(df, pd.DataFrame):
            return function(flow, df, *args, **kwargs)
        native = _eager(df, function.__name__)
        result = function(flow, _to_pandas(native), *args, **kwargs)
        return _back(native, result)

    return cast("F", wrapper)


def _eager(df: Any, name: str) -> nw.DataFrame[Any]:
    """Return ``df`` as a narwhals eager frame.

    Raises:
        TypeError: it is no DataFrame narwhals reads, or a lazy one.
    """
    import narwhals as nw

    found = nw.from_native(df, pass_through=True)
    if isinstance(found, nw.DataFrame):
        return found
    kind = f"{type(df).__module__.split('.')[0]} {type(df).__name__}"
    if isinstance(found, nw.LazyFrame):
        raise TypeError(
            f"{name} takes an eager DataFrame, got a lazy {kind}; collect it first "
            "(a Dask DataFrame runs through flow.run_dataframe)"
        )
    raise TypeError(f"{name} takes a pandas or polars DataFrame, got {type(df).__name__}")


def _to_pandas(native: nw.DataFrame[Any]) -> pd.DataFrame:
    """Return the frame's columns as a pandas frame (a fresh 0..n-1 index)."""
    import pandas as pd

    return pd.DataFrame(
        {name: native.get_column(name).to_list() for name in native.columns},
        index=pd.RangeIndex(len(native)),
    )


def _values(column: pd.Series[Any]) -> list[Any]:
    """Return a pandas column's cells as Python values, missing ones (NaN, <NA>) as None."""
    return column.astype(object).where(column.notna(), None).tolist()


def _back(native: nw.DataFrame[Any], result: pd.DataFrame) -> Any:
    """Return ``native`` with the columns ``result`` added (as text) and the input columns it
    filled (as the text the flow got), in the caller's library."""
    import narwhals as nw

    backend = native.implementation
    changed = []
    for name in native.columns:
        # An input column with fewer empty cells than it had was filled (fill=).
        if result[name].isna().sum() < native.get_column(name).null_count():
            cells = [to_text(v) for v in _values(result[name])]
            changed.append(nw.new_series(name, cells, nw.String(), backend=backend))
    for name in result.columns:
        if name not in native.columns:
            changed.append(nw.new_series(name, _values(result[name]), nw.String(), backend=backend))
    if not changed:
        return native.to_native()  # the caller's own frame: shown as its library shows it
    return mark_polars(native.with_columns(changed).to_native())
