"""DataFrames through flows: the pandas path, polars at the edges, previews, the providers'
batch APIs, and Dask."""
