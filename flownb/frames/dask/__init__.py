"""Running flows beyond one process: flows by value (:mod:`.spec`), cluster-wide limits
(:mod:`.limits`) and Dask DataFrames (:mod:`.dask`). Dask is imported only by :mod:`.dask` and
:mod:`.limits`, when used."""
