"""``max_spend=`` over a Dask frame: one spend cap that holds across every worker of a cluster.

The rule is :mod:`flownb.providers.spend`'s (a call is sent only if what was spent plus the most
every call in flight could still cost stays within the cap); only where the figures live
differs. On a distributed cluster they live on the scheduler, in a small coordinator
(:class:`SpendLedgers`, a scheduler plugin each worker registers once, idempotently): reserving
a call's bound before it is sent, and settling it to the answer's real cost after, are each one
request to the scheduler, applied whole on its event loop, so two workers never both take the
last room (no lock to hold, nothing lost when a worker dies). Outside a distributed worker
(Dask's threaded or synchronous scheduler) the run's one
:class:`~flownb.providers.spend.SpendCap` in the process is the ledger.

The figures of a run: ``spent`` (settled calls; and calls whose worker died, at their bound:
they may have been billed), ``refused`` (calls not sent), and per worker the bounds it holds and
its calls in flight. A call that does not fit waits while calls are in flight anywhere; a worker
that left the cluster holding reservations is noticed by the scheduler at the next reservation
and what it held is counted as spent, so waiting never outlives the calls it waits for. Each
partition that ends is counted too (one more request); the last of a computation's partitions to
end gets the run's cap line back, in the words of a run in one process, and sends it to the
client that built the run (see :func:`flownb.frames.dask.limits.say_cap_line`).

The scheduler unpickles the coordinator, so flownb must be importable where the scheduler runs
(as on the workers). This module is imported only on a distributed worker (it needs
``distributed``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from distributed.diagnostics.plugin import SchedulerPlugin

from ...errors import SpendCapReached
from ...providers.spend import POLL, LastPart, SpendCap

__all__ = ["SharedLedger", "SpendLedgers", "cap_line", "refusal"]

T = TypeVar("T")

# The scheduler's request name and the plugin's (one per scheduler, whatever the run).
HANDLER = "flownb_spend"
PLUGIN = "flownb-spend-ledgers"


def refusal(most: float, cap: float, spent: float, reserved: float) -> SpendCapReached:
    """Return the error of a call (bound ``most``) the cluster's cap refuses; the same words as
    a run in one process (:meth:`SpendCap.refusal`)."""
    ledger = SpendCap(cap, spent=spent)
    ledger.reserved = reserved
    return ledger.refusal(most)


def cap_line(cap: float, spent: float, refused: int) -> str:
    """Return the cap's line of a run whose calls spent ``spent`` of ``cap`` and of which
    ``refused`` were not sent: the same words as a run in one process (:meth:`SpendCap.line`)."""
    ledger = SpendCap(cap, spent=spent)
    ledger.refused = refused
    return ledger.line()


class _Run:
    """One run's figures on the scheduler."""

    def __init__(self, cap: float) -> None:
        self.cap = cap
        self.spent = 0.0
        self.refused = 0
        self.held: dict[str, list[float]] = {}  # worker address -> [reserved, calls in flight]
        self.parts = LastPart()  # the partitions of this computation that ended

    def reserve(self, most: float, worker: str, alive: Any) -> dict[str, Any]:
        for address in [a for a in self.held if a not in alive]:  # gone: may have been billed
            self.spent += self.held.pop(address)[0]
        reserved = sum(h[0] for h in self.held.values())
        fits: bool | None = None
        if self.spent + reserved + most <= self.cap:
            mine = self.held.setdefault(worker, [0.0, 0])
            mine[0] += most
            mine[1] += 1
            reserved += most
            fits = True
        elif not any(h[1] for h in self.held.values()):
            self.refused += 1
            fits = False
        return {"fits": fits, "spent": self.spent, "reserved": reserved}

    def settle(self, most: float, cost: float, worker: str) -> dict[str, Any]:
        mine = self.held.get(worker)
        if mine is not None:
            mine[0] = max(0.0, mine[0] - most)
            mine[1] -= 1
            if mine[1] <= 0:
                del self.held[worker]
            self.spent += cost
        else:  # its worker was counted as gone meanwhile: its bound stands as spent
            pass
        return {"spent": self.spent}

    def end(self, part: int, parts: int) -> dict[str, Any]:
        """Count partition ``part`` of ``parts`` as ended; once all have, the run's cap line
        (and a later computation of the same frame counts afresh)."""
        if not self.parts.end(part, parts):
            return {"line": None}
        return {"line": cap_line(self.cap, self.spent, self.refused)}


class SpendLedgers(SchedulerPlugin):
    """The coordinator on the scheduler: every capped run's figures, by run name, moved by one
    request each (``flownb_spend``)."""

    idempotent = True
    name = PLUGIN

    def __init__(self) -> None:
        self.runs: dict[str, _Run] = {}
        self.scheduler: Any = None

    async def start(self, scheduler: Any) -> None:
        """Answer ``flownb_spend`` requests on ``scheduler``."""
        self.scheduler = scheduler
        scheduler.handlers[HANDLER] = self.step

    def step(
        self,
        run: str,
        cap: float,
        action: str,
        worker: str,
        most: float = 0.0,
        cost: float = 0.0,
        part: int = 0,
        parts: int = 0,
    ) -> dict[str, Any]:
        """Apply one reservation (``action="reserve"``) or settlement (``"settle"``) of run
        ``run`` (whose cap is ``cap``) for ``worker``, or the end of its partition ``part`` of
        ``parts`` (``"end"``); return the figures after it (for ``"end"``: the cap's line once
        every partition ended, else ``None``)."""
        figures = self.runs.get(run)
        if figures is None:
            figures = self.runs[run] = _Run(cap)
        if action == "reserve":
            return figures.reserve(most, worker, self.scheduler.workers)
        if action == "end":
            return figures.end(part, parts)
        return figures.settle(most, cost, worker)


class SharedLedger:
    """A run's spend cap on a distributed cluster, as one worker process sees it (a
    :class:`~flownb.providers.spend.Ledger`): each step is a request to the scheduler's
    :class:`SpendLedgers`, sent from the worker's event loop."""

    def __init__(self, name: str, cap: float, worker: Any) -> None:
        self.name = name
        self.cap = cap
        self.worker = worker
        self.me: str = worker.address
        self.loop: asyncio.AbstractEventLoop = worker.loop.asyncio_loop
        self._registered: concurrent.futures.Future[Any] | None = None

    def _submit(self, make: Callable[[], Awaitable[T]]) -> concurrent.futures.Future[T]:
        async def run() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(run(), self.loop)

    async def _register(self) -> None:
        from distributed.protocol.pickle import dumps

        await self.worker.scheduler.register_scheduler_plugin(
            plugin=dumps(SpendLedgers()), name=PLUGIN, idempotent=True
        )

    def _registering(self) -> concurrent.futures.Future[Any]:
        if self._registered is None:  # once per process and run: idempotent on the scheduler
            self._registered = self._submit(self._register)
        return self._registered

    async def _step(self, action: str, most: float, cost: float = 0.0) -> dict[str, Any]:
        await asyncio.wrap_future(self._registering())
        answer: dict[str, Any] = await asyncio.wrap_future(
            self._submit(
                lambda: self.worker.scheduler.flownb_spend(
                    run=self.name, cap=self.cap, action=action, worker=self.me, most=most, cost=cost
                )
            )
        )
        return answer

    def ended(self, part: int, parts: int) -> str | None:
        """Count partition ``part`` of ``parts`` as ended, from the thread that ran it; return
        the run's cap line when it was the last of them to end, else ``None``."""
        self._registering().result()
        answer: dict[str, Any] = self._submit(
            lambda: self.worker.scheduler.flownb_spend(
                run=self.name, cap=self.cap, action="end", worker=self.me, part=part, parts=parts
            )
        ).result()
        line: str | None = answer["line"]
        return line

    async def reserve(self, most: float) -> None:
        """Return once ``most`` is reserved in the cluster's figures.

        Raises:
            SpendCapReached: it does not fit and no call is in flight anywhere.
        """
        while True:
            answer = await self._step("reserve", most)
            if answer["fits"]:
                return
            if answer["fits"] is False:
                raise refusal(most, self.cap, answer["spent"], answer["reserved"])
            await asyncio.sleep(POLL)

    def settle(self, most: float, cost: float) -> Awaitable[None]:
        """End a reservation of ``most`` (``cost`` paid): sent at once, and awaitable."""

        async def settle() -> None:
            await self._step("settle", most, cost)

        return asyncio.ensure_future(settle())
