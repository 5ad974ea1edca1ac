"""Provider batches: a DataFrame's calls at half price through the provider's batch API
(:func:`run_dataframe_batched`, behind ``flow.run_dataframe(df, batch_api=True)``), remembered
in ``FLOWNB_HOME`` so any later process picks them up (:func:`list_batches`)."""

from __future__ import annotations

from .listing import cancel_batch, list_batches
from .run import run_dataframe_batched

__all__ = ["cancel_batch", "list_batches", "run_dataframe_batched"]
