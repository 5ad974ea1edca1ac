"""The ``df.flownb`` pandas accessor: run a flow over a DataFrame's rows, show thumbnails.

Registered by ``%load_ext flownb`` (or ``import flownb.notebook.accessor``); ``import flownb``
alone does not import pandas::

    out = df.flownb.run(flow, columns={"topic": "subject"})
    out.flownb.show()            # image columns as thumbnails
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Unpack

import pandas as pd

from ..frames.options import DataFrameOptions

if TYPE_CHECKING:
    from ..flows.base import BaseFlow
    from ..show.display import FrameView

__all__ = ["FlownbAccessor"]


@pd.api.extensions.register_dataframe_accessor("flownb")
class FlownbAccessor:
    """``df.flownb``: flownb operations on a DataFrame."""

    def __init__(self, df: pd.DataFrame) -> None:
        self._df = df

    def run(
        self,
        flow: BaseFlow | str,
        columns: Mapping[str, str] | None = None,
        **options: Unpack[DataFrameOptions],
    ) -> pd.DataFrame:
        """Run ``flow`` (a flow object, or a path to a flow file) once per row.

        Takes the keyword arguments of :meth:`flownb.BaseFlow.run_dataframe` (``fill``,
        ``progress``, ``concurrency``, ``error_column``, ...; see
        :class:`~flownb.frames.options.DataFrameOptions`).

        Returns:
            A copy of the DataFrame with one column per output (and an error column if rows
            failed).

        Raises:
            InputError: columns missing, or empty cells without ``fill``.
        """
        if isinstance(flow, str):
            from ..flows.local import load_flow

            flow = load_flow(flow)
        return flow.run_dataframe(self._df, columns, **options)

    def show(self, columns: Iterable[str] | None = None, *, size: int = 96) -> FrameView:
        """Return the DataFrame for display with image columns as thumbnails ``size`` px wide."""
        from ..show.display import display_frame

        return display_frame(self._df, columns, size=size)

    def image_columns(self) -> list[str]:
        """Return the names of the columns that hold image URLs."""
        from ..show.display import image_columns

        return image_columns(self._df)
