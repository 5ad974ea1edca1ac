"""The runnable core of a flow: what a loaded flow is and runs (its spec, provider, run
configuration, cache, call plan; ``run``, ``run_batch``, ``run_each``), below every feature
built on it. The flows users hold are composed from it at the top, in :mod:`flownb.flows`."""
