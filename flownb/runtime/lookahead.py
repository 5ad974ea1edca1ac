"""The cache looked up ahead of a batch's elements, a chunk at a time.

Before element ``i`` of an async run starts, :class:`Lookahead` renders the prompts of the
nodes that read nothing but variables for the elements from ``i`` on (a chunk of about a
thousand), works out their cache keys and looks them all up in a few bulk queries
(:meth:`~flownb.runtime.cache.CallCache.get_many`). Each element then gets its prompts and its
hits (:class:`Ahead`): a cached re-run answers a row without rendering, hashing, building a
call or querying again. The nodes that read other nodes are looked up as they run (their
prompts are known once their upstream nodes answered).

What is not taken from here goes the usual way (the runner's ``hit`` and call): a miss (looked
up again then: another process may have stored it), a prompt the provider refuses (its call
reports it), a cached answer without a price (the runner prices it), the second of two
elements with one prompt (each element gets an answer object of its own), and every call of a
traced run (whose hits are spans: the bulk lookup's answers are then handed to the runner).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..infra import tracing
from ..providers.base import Call, Generation

if TYPE_CHECKING:
    from ..providers.calls import CallRunner
    from .cache import CallCache
    from .plan import Step

__all__ = ["Ahead", "Lookahead"]

# Elements looked up in one go: a few queries of a few hundred keys each, and little memory
# held for a long batch.
CHUNK = 1024

# An element's lookahead: step index -> (its prompt, the cache's answer or None).
Ahead = dict[int, tuple[str, Generation | None]]


class Lookahead:
    """Bulk cache lookups for ``batch`` in ``cache``, of the calls of ``steps`` (a plan's, with
    the provider's prompt ``limits`` per step index and its ``identity``) that ``runner``
    makes: call it with each element's index, in order, as the element starts (see the
    module docstring)."""

    def __init__(
        self,
        steps: Sequence[Step],
        limits: Sequence[int],
        identity: Mapping[str, Any],
        batch: Sequence[Mapping[str, str]],
        cache: CallCache,
        runner: CallRunner,
    ) -> None:
        self.batch = batch
        self.cache = cache
        self.runner = runner
        # The nodes that read only variables, with their limits and key prefixes (made as the
        # runner makes its calls' keys: kind, params, system message).
        self.first = [
            (step, limits[step.index], cache.prefix(identity, step.kind, step.params, step.system))
            for step in steps
            if not step.upstream
        ]
        self.hits = tracing.tracer() is None  # a traced run's hits are made by its calls
        self.ahead = 0  # elements before this one are looked up already
        self.found: dict[int, Ahead] = {}  # element -> its lookahead, until it starts

    def __call__(self, i: int) -> Ahead | None:
        """Return element ``i``'s prompts and hits (looking up the next chunk first when ``i``
        is past the last one), or ``None`` when it has none."""
        if i >= self.ahead:
            self._look(i)
        return self.found.pop(i, None)

    def _look(self, i: int) -> None:
        batch, key = self.batch, self.cache.key
        end = min(len(batch), max(i + 1, self.ahead + CHUNK))
        wanted: list[tuple[Ahead, int, str, str]] = []  # (its element's lookahead, step, ...)
        for j in range(self.ahead, end):
            values = batch[j]
            ahead: Ahead = {}
            for step, limit, prefix in self.first:
                try:
                    prompt = step.template.render(values)
                except Exception:  # the element's own run reports it
                    continue
                if len(prompt) <= limit:  # else its call reports it, costing nothing
                    ahead[step.index] = (prompt, None)
                    wanted.append((ahead, step.index, prompt, key(prefix, prompt)))
            self.found[j] = ahead
        self.ahead = end
        if not wanted:
            return
        if not self.hits:  # the runner keeps them, for its traced calls to find
            steps = {step.index: step for step, _, _ in self.first}
            calls = []
            for _, index, prompt, _ in wanted:
                step = steps[index]
                calls.append(Call(step.kind, prompt, step.params, step.node_id, step.system))
            self.runner.prefetch(calls)
            return
        stored = self.cache.get_many([k for *_, k in wanted])
        for ahead, index, prompt, k in wanted:
            gen = stored.pop(k, None)  # popped: an answer object serves one element only
            if gen is not None and not _unpriced(gen):
                ahead[index] = (prompt, gen)


def _unpriced(gen: Generation) -> bool:
    """Whether a cached answer has no price but the usage to work one out (the runner's call
    prices it; see :func:`flownb.providers.calls.CallRunner.hit`)."""
    cost = gen.cost
    return (cost is None or cost != cost) and bool(gen.usage)
