"""The run log's view of provider batches: the run that reads a batch's answers shows them as
paid calls (``cached`` false, the batch price as spent, their tokens), once; every later run of
the same calls shows cache hits, as after a live run.

The answers are in the cache before the final pass runs (that is how the pass finds them), so
without this they would all read as cache hits that cost nothing. :func:`paid_once` wraps the
caches of the flows of that pass: each answer of a batch not yet shown is served once as a fresh
call, and afterwards its batch record is marked as shown (``BatchRecord.logged``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...providers.base import BatchAPI, Generation
from .store import BatchRecord, load_records, save_record

if TYPE_CHECKING:
    from ...runtime.cache import CallCache, Place

__all__ = ["claim_paid", "paid_once"]


class _PaidOnce:
    """A run's cache that serves an answer a batch brought in, not yet shown by the run log,
    once as a fresh call (``cached=False``, its batch price as spent), so the run log and cost
    totals count what the batch cost; every later lookup is an ordinary cache hit. ``paid`` and
    ``used`` are shared by the flows of one home and endpoint (under ``lock``: several runs may
    look up at once), so an answer is counted once whichever flow reads it first."""

    def __init__(
        self, cache: CallCache, paid: set[str], used: set[str], lock: threading.Lock
    ) -> None:
        self.cache = cache
        self.paid = paid
        self.used = used
        self.lock = lock

    def get(self, key: str) -> Generation | None:
        gen = self.cache.get(key)
        if gen is None or key not in self.paid:
            return gen
        with self.lock:
            if key not in self.paid:
                return gen
            self.paid.discard(key)
            self.used.add(key)
        return dataclasses.replace(gen, cached=False)

    def get_many(self, keys: Iterable[str], place: Place | None = None) -> dict[str, Generation]:
        """Return :meth:`CallCache.get_many`'s generations, each answer a batch brought in
        served as :meth:`get` serves it the first time (the engine looks a batch's calls up in
        bulk: the accounting must not depend on which lookup finds an answer)."""
        found = self.cache.get_many(keys, place)
        fresh = [key for key in found if key in self.paid]
        if fresh:
            with self.lock:
                for key in fresh:
                    if key in self.paid:
                        self.paid.discard(key)
                        self.used.add(key)
                        found[key] = dataclasses.replace(found[key], cached=False)
        return found

    def claim(self, keys: Iterable[str]) -> set[str]:
        """Return the ``keys`` not shown yet, marking them shown (one lock for them all): what
        :meth:`get` would serve as paid, for rows assembled without looking each call up."""
        with self.lock:
            fresh = self.paid.intersection(keys)
            self.paid -= fresh
            self.used |= fresh
        return fresh

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cache, name)


@contextlib.contextmanager
def paid_once(flows: Iterable[Any]) -> Iterator[None]:
    """Within the block, ``flows`` (local flows whose provider has a batch API) serve each
    answer that provider batches brought in and the run log has not shown yet as a paid call,
    once (see :class:`_PaidOnce`); afterwards the batches whose answers were served are marked
    as shown, so later runs log them as cache hits.

    Raises:
        ConfigError: a batch record cannot be written.
    """
    shared: dict[tuple[str, str], tuple[list[BatchRecord], set[str], set[str], threading.Lock]]
    shared = {}
    wrapped: list[tuple[Any, CallCache]] = []
    for flow in flows:
        engine = getattr(flow, "engine", None)  # a served flow has none: nothing to log here
        cache = getattr(engine, "cache", None)
        if engine is None or cache is None or not flow.provider.supports_batches:
            continue
        if getattr(flow, "runlog", None) is None:
            continue  # this flow logs nothing: its batches stay to be shown by one that does
        api = flow.provider.batch_api()
        if api is None:
            continue
        slot = (str(flow.config.home), api.base_url)
        if slot not in shared:
            records, keys = _unlogged(flow.config.home, api)
            shared[slot] = (records, keys, set(), threading.Lock())
        records, keys, used, lock = shared[slot]
        if keys:
            engine.cache = _PaidOnce(cache, keys, used, lock)
            wrapped.append((flow, cache))
    try:
        yield
    finally:
        for flow, cache in wrapped:
            flow.engine.cache = cache
        for (home, _), (records, _, used, _) in shared.items():
            for record in records:
                if not used.isdisjoint(record.keys):
                    record.logged = True
                    save_record(record, Path(home))


def _unlogged(home: Any, api: BatchAPI) -> tuple[list[BatchRecord], set[str]]:
    """Return the collected batches whose answers the run log has not shown as paid yet, and
    the keys of those answers."""
    records = [
        r for r in load_records(home) if r.collected and not r.logged and r.base_url == api.base_url
    ]
    keys = {k for r in records for k in r.keys if k not in r.failures}
    return records, keys


def claim_paid(cache: Any, keys: Iterable[str]) -> set[str]:
    """Return which of ``keys`` (in the order rows read them) ``cache`` would serve as paid
    (a batch's answer the run log has not shown yet: see :class:`_PaidOnce`), marking them
    served; empty when ``cache`` is not wrapped by :func:`paid_once`."""
    if not isinstance(cache, _PaidOnce):
        return set()
    return cache.claim(keys)
