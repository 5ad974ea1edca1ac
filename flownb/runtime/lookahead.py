"""The cache looked up ahead of a batch's elements, a chunk at a time.

Before the elements of a chunk (about a thousand) of an async run start,
:meth:`Lookahead.chunk` renders the prompts of the nodes that read nothing but variables,
column by column, works out their cache keys and looks them all up in a few bulk queries
(:meth:`~flownb.runtime.cache.CallCache.get_many`). The :class:`Chunk` holds each node's
prompts and hits in columns: a row whose every call is a hit is answered from there in bulk
(:mod:`flownb.runtime.hitrows`), and every other element gets its prompts and hits
(:meth:`Chunk.ahead`), so a cached call is not rendered, hashed, built or queried again. The
nodes that read other nodes are looked up as they run (their prompts are known once their
upstream nodes answered).

What is not taken from here goes the usual way (the runner's ``hit`` and call): a miss (noted
with the runner, whose call then neither hashes nor queries it again unless the miss is no
longer trusted: see :meth:`~flownb.providers.calls.CallRunner.missing`), a prompt the
provider refuses (its call reports it), a cached answer without a price (the runner prices
it), the second of two elements with one prompt (each element gets an answer object of its
own), and every call of a traced run (whose hits are spans: the bulk lookup's answers are then
handed to the runner).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..infra import tracing
from ..providers.base import Call, Generation, Provider
from ..providers.callplan import NodeCalls
from .plan import step_calls

if TYPE_CHECKING:
    from ..providers.calls import CallRunner
    from .cache import CallCache
    from .plan import Step

__all__ = ["CHUNK", "Ahead", "Chunk", "Lookahead"]

# Elements looked up in one go: a few queries of a few hundred keys each, and little memory
# held for a long batch.
CHUNK = 1024

# An element's lookahead: step index -> (its prompt, the cache's answer or None).
Ahead = dict[int, tuple[str, Generation | None]]


class Chunk:
    """Elements ``start`` to ``end`` (excluded) of a batch, looked up: for each step of
    ``steps`` (those that read only variables, in plan order), ``prompts[k][r]`` is element
    ``start + r``'s prompt (``None``: it failed to render or is too long; its call reports it)
    and ``gens[k][r]`` the cache's answer (``None``: not found here). ``seconds`` is what the
    lookup took."""

    __slots__ = ("end", "gens", "prompts", "seconds", "start", "steps")

    def __init__(
        self,
        start: int,
        end: int,
        steps: Sequence[int],
        prompts: list[list[str | None]],
        gens: list[list[Generation | None]],
        seconds: float,
    ) -> None:
        self.start = start
        self.end = end
        self.steps = steps
        self.prompts = prompts
        self.gens = gens
        self.seconds = seconds

    def ahead(self, r: int) -> Ahead:
        """Return element ``start + r``'s prompts and hits, by step index."""
        found: Ahead = {}
        for index, prompts, gens in zip(self.steps, self.prompts, self.gens, strict=True):
            prompt = prompts[r]
            if prompt is not None:
                found[index] = (prompt, gens[r])
        return found


class Lookahead:
    """Bulk cache lookups for ``batch`` in ``cache``, of the calls of ``steps`` (a plan's, with
    the provider's prompt ``limits`` per step index and its ``identity``) that ``runner``
    makes: call :meth:`chunk` for each chunk of elements, in order, before they start (see
    the module docstring)."""

    def __init__(
        self,
        steps: Sequence[Step],
        limits: Sequence[int],
        provider: Provider,
        batch: Sequence[Mapping[str, str]],
        cache: CallCache,
        runner: CallRunner,
    ) -> None:
        self.batch = batch
        self.cache = cache
        self.runner = runner
        # Where the last chunk's answers lay in the cache's table: a re-run's next chunk is
        # read from right after them (see CallCache.get_many).
        from .cache import Place  # the cache module is loaded once a cache is open

        self.place = Place()
        # The nodes that read only variables, with their limits and calls (prompts and keys
        # made by the one author the runner's calls use too: flownb.providers.callplan).
        self.first = [
            (step, limits[step.index], step_calls(provider, step))
            for step in steps
            if not step.upstream
        ]
        self.hits = tracing.tracer() is None  # a traced run's hits are made by its calls
        # The variables the first nodes' prompts read, for rendering them column by column.
        self.names = tuple(
            dict.fromkeys(n for step, _, _ in self.first for n in step.template.names)
        )

    def chunk(self, start: int) -> Chunk:
        """Return elements ``start`` to ``start + CHUNK`` (or the batch's end), looked up."""
        begun = time.perf_counter()
        end = min(len(self.batch), start + CHUNK)
        columns = self._columns(start, end)
        prompts: list[list[str | None]] = []
        keys: list[list[str | None]] = []
        for _, limit, node in self.first:
            texts = self._render(node, start, end, columns)
            fits = [p if p is not None and len(p) <= limit else None for p in texts]
            prompts.append(fits)  # too long: its call reports it, costing nothing
            keys.append(node.keys(fits))
        gens: list[list[Generation | None]] = [[None] * (end - start) for _ in self.first]
        chunk = Chunk(start, end, [s.index for s, _, _ in self.first], prompts, gens, 0.0)
        if not self.hits:  # the runner keeps them, for its traced calls to find
            self.runner.prefetch(self._calls(prompts))
        else:
            stored = self.cache.get_many(
                (k for column in keys for k in column if k is not None), self.place
            )
            self._note_misses(prompts, keys, stored)
            if stored:
                for column, found in zip(keys, gens, strict=True):
                    for r, k in enumerate(column):
                        if k is not None:
                            # Popped: an answer object serves one element only.
                            gen = stored.pop(k, None)
                            if gen is None:
                                continue
                            # No price but the usage to work one out: the runner's call prices
                            # it (see flownb.providers.calls.CallRunner.hit).
                            cost = gen.cost
                            if (cost is None or cost != cost) and gen.usage:
                                continue
                            found[r] = gen
        chunk.seconds = time.perf_counter() - begun
        return chunk

    def _note_misses(
        self,
        prompts: list[list[str | None]],
        keys: list[list[str | None]],
        stored: Mapping[str, Generation],
    ) -> None:
        """Tell the runner which of the first nodes' calls the bulk lookup did not find in the
        cache (``stored``): their calls then neither hash nor query again (see
        :meth:`~flownb.providers.calls.CallRunner.missing`)."""
        missing = self.runner.missing
        for (_, _, node), texts, column in zip(self.first, prompts, keys, strict=True):
            missing(
                node.params,
                [
                    (p, k)
                    for p, k in zip(texts, column, strict=True)
                    if p is not None and k is not None and k not in stored
                ],
            )

    def _columns(self, start: int, end: int) -> dict[str, Sequence[str]] | None:
        """Return the variables the prompts read for elements ``start`` to ``end``, one list
        per variable (``None`` when some element lacks one: its prompts are rendered, and
        fail, one by one)."""
        batch = self.batch
        names = self.names
        held = getattr(batch, "columns", None)  # a frame's rows keep their columns
        if isinstance(held, Mapping) and all(n in held for n in names):
            return {name: held[name][start:end] for name in names}
        rows = batch[start:end]
        try:
            return {name: [row[name] for row in rows] for name in names}
        except (KeyError, TypeError):
            return None

    def _render(
        self, node: NodeCalls, start: int, end: int, columns: Mapping[str, Sequence[str]] | None
    ) -> list[str | None]:
        """Return the prompt of ``node`` for each element from ``start`` to ``end`` (``None``
        where it fails to render: the element's own run reports it)."""
        if columns is not None:
            try:
                return node.render_columns(columns, end - start)  # type: ignore[return-value]
            except Exception:  # rendered one by one below, each failure reported by its row
                pass
        render = node.render
        batch = self.batch
        texts: list[str | None] = []
        for j in range(start, end):
            try:
                texts.append(render(batch[j]))
            except Exception:  # the element's own run reports it
                texts.append(None)
        return texts

    def _calls(self, prompts: list[list[str | None]]) -> list[Call]:
        """Return the calls of ``prompts`` (one column per first node)."""
        calls = []
        for (_, _, node), column in zip(self.first, prompts, strict=True):
            for prompt in column:
                if prompt is not None:
                    calls.append(node.call(prompt))
        return calls
