"""The final pass of a batched run: each row's result made from the answers the batches and
the cache gave, without running the row again.

:class:`AssembledEngine` stands in for the final flow's engine inside its runner, so the run is
the ordinary one around it (its run log record, tracing span, progress bar, live view, meter
and frame): a row whose every node has its answer in the :class:`~.run` table is reported at
once, built by the engine's own result maker; the other rows (an image node, a call a batch
failed or has not answered yet, a prompt over the provider's limit) run through the real
engine, on :class:`FromBatches`, which calls the images live and names what is missing in the
row's error.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ...errors import ProviderError, SpendCapReached
from ...providers.base import BatchAPI, Call, Generation, Provider
from ...providers.callplan import NodeCalls, node_calls
from .paid import claim_paid

if TYPE_CHECKING:
    from ...providers.calls import Gate
    from ...providers.limits import AdaptiveLimiter
    from ...runtime.cache import CallCache
    from ...runtime.engine import Engine
    from ...runtime.result import OnResult

__all__ = ["AssembledEngine", "FromBatches"]


class AssembledEngine:
    """An engine whose batch run reports the rows ``gens`` fully answers without calling
    anything, and hands the rest to ``engine``. ``gens`` and ``keys`` hold, per step, each
    row's answer (``None``: missing) and its cache key; every other attribute is ``engine``'s.
    """

    def __init__(
        self,
        engine: Engine,
        gens: Sequence[Sequence[Generation | None]],
        keys: Sequence[Sequence[str | None]],
        complete: Sequence[bool],
    ) -> None:
        self.engine = engine
        self.gens = gens
        self.keys = keys
        self.complete = complete

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    async def run_async(
        self,
        batch: Sequence[Mapping[str, str]],
        on_result: OnResult,
        concurrency: int,
        *,
        limiter: AdaptiveLimiter | None = None,
        gate: Gate | None = None,
    ) -> None:
        """Report each fully answered row of ``batch`` to ``on_result``, then run the others
        on the real engine (see :meth:`Engine.run_async`), reported under their own index."""
        self.report(batch, on_result)
        rest = [i for i, done in enumerate(self.complete) if not done]
        if not rest:
            return

        def remapped(j: int, result: Any, exc: BaseException | None) -> None:
            on_result(rest[j], result, exc)

        await self.engine.run_async(
            [batch[i] for i in rest], remapped, concurrency, limiter=limiter, gate=gate
        )

    def report(self, batch: Sequence[Mapping[str, str]], on_result: OnResult) -> None:
        """Report the fully answered rows of ``batch``: each answer a batch brought in that the
        run log has not shown yet counts as paid in the first row that reads it (see
        :mod:`.paid`), as the engine's lookups would count it."""
        keys, columns, complete = self.keys, self.gens, self.complete
        paid = claim_paid(
            self.engine.cache,
            (key for i, done in enumerate(complete) if done for col in keys if (key := col[i])),
        )
        result = self.engine.result_of  # the engine's own per-row result maker
        clock = time.perf_counter
        for i, values in enumerate(batch):
            if not complete[i]:
                continue
            started = clock()
            gens: list[Any] = [col[i] for col in columns]
            if paid:
                for s, gen in enumerate(gens):
                    key = keys[s][i]
                    if key in paid:
                        paid.discard(key)
                        gens[s] = dataclasses.replace(gen, cached=False)
            on_result(i, result(values, gens, started), None)


class FromBatches(Provider):
    """The final pass's provider: text answers come from the cache (the batches filled it);
    a text call a batch did not answer fails with why; images (and text calls no batch held,
    such as those fed by an image) go to the real provider, live."""

    name: ClassVar[str] = "batch"

    def __init__(self, real: Provider, cache: CallCache, reasons: Mapping[str, tuple[int, str]]):
        self.real = real
        self.cache = cache
        self.reasons = reasons
        self._nodes: dict[tuple[int, str | None], NodeCalls] = {}

    def identity(self) -> Mapping[str, Any]:
        return self.real.identity()  # the same cache keys as the real provider's

    def banner(self) -> str:
        return self.real.banner()

    def check_params(self, kind: Any, params: Mapping[str, Any], node: str) -> None:
        self.real.check_params(kind, params, node)

    def batch_api(self) -> BatchAPI | None:
        return self.real.batch_api()

    def reason_of(self, call: Call) -> tuple[int, str] | None:
        """Return why a batch did not answer text ``call`` (status, message), None when it did
        or the call is not one a batch could hold."""
        if call.kind != "text":
            return None
        slot = (id(call.params), call.system)
        node = self._nodes.get(slot)
        if node is None:  # the real provider's keys: the ones the batches were filed under
            node = node_calls(self.real, call.kind, call.params, call.system)
            self._nodes[slot] = node
        return self.reasons.get(node.key(call.prompt))

    async def generate(self, call: Call) -> Generation:
        if call.kind == "text":
            reason = self.reason_of(call)
            if reason is not None:
                if reason[0] == 402:  # the spend cap left it unsent
                    raise SpendCapReached(reason[1])
                raise ProviderError(reason[1], status=reason[0], provider=self.real.name)
        return await self.real.generate(call)

    async def aclose(self) -> None:
        await self.real.aclose()
