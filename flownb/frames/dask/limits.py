"""Limits that hold across every process of a Dask run: concurrency, requests and tokens per
minute, on Dask's own primitives.

A :class:`ClusterLimits` travels in the task graph (a name and three numbers). In each worker
process, :meth:`ClusterLimits.gate` holds that process's :data:`~flownb.providers.calls.Gate`
while partitions of the run execute there; it is entered around every provider attempt:

- **concurrency**: a ``distributed.Semaphore(max_leases=concurrency)``, one lease held per
  attempt in flight, so the calls in flight across all workers never exceed ``concurrency``
  (a worker lends a lease on to its own next call a few times before giving it back, see
  :class:`_Leases`, so the scheduler is not asked once per call).
  A worker that dies holding leases gives them back after the scheduler's
  ``distributed.scheduler.locks.lease-timeout`` (30 s by default).
- **max_spend**: the run's spend ledger (:mod:`flownb.frames.dask.spend`), which each
  partition's spend gate reserves in (after its lease: the calls in flight are the ones about
  to be sent).
- **rpm / tpm**: a shared meter (:class:`SharedMeter`): the earliest start of the next call, in
  a ``distributed.Variable``, read and moved under a ``distributed.Lock``. Each call charges one
  request / its estimated tokens; the token charge is corrected by the usage the provider
  reported. Times are wall-clock seconds, so worker clocks should agree (NTP). Every charge and
  correction is also logged on the cluster's event log under :data:`METER_EVENTS`, so what a run
  was charged can be read after it (``client.get_events(METER_EVENTS)``).

Outside a distributed worker (Dask's threaded or synchronous scheduler) the same limits hold
within the process, on the one event loop every flownb run of that process shares.

Distributed's calls are coroutines of the worker's own event loop; flownb's runs are on its
background loop (:mod:`flownb.infra.aio`), so each call is handed over with
``asyncio.run_coroutine_threadsafe``.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from ...providers.base import Call, Generation
from ...providers.calls import Gate, Settle, announce
from ...providers.spend import LastPart, Ledger, SpendCap
from ...providers.tokens import POLL, Meter, estimate_tokens, used

__all__ = [
    "METER_EVENTS",
    "SPEND_EVENTS",
    "ClusterLimits",
    "SharedMeter",
    "hear_cap_lines",
    "say_cap_line",
    "start_meters",
]

# The event-log topic of the shared meters: one ``{"meter", "kind", "units", "at", "worker"}``
# message per charge (``kind`` "charge"; ``at``: when it was admitted, on the meter's clock) and
# per correction by the usage reported ("correction"); ``meter`` is the run's limits name and the
# meter's kind (``<name>-rpm``, ``<name>-tpm``), ``worker`` the address of the worker that
# charged it.
METER_EVENTS = "flownb-meter"
# The event-log topic of a capped run's last word: one ``{"run", "line"}`` message when the last
# partition of a computation ends, ``line`` saying how much of the cap was used (the words of a
# run in one process); the client that built the run says it (see :func:`hear_cap_lines`).
SPEND_EVENTS = "flownb-spend"

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class ClusterLimits:
    """Limits shared by every partition of one run (``name`` is unique per run)."""

    name: str
    concurrency: int
    rpm: float | None = None
    tpm: float | None = None
    max_spend: float | None = None  # US dollars, for the whole run (see frames/dask/spend.py)

    @contextlib.contextmanager
    def gate(self) -> Iterator[Gate]:
        """Hold this process's gate for these limits while a partition runs.

        Made on first use and shared by the partitions of the run this process runs at once;
        dropped when the last one ends (a later partition of the run makes it again: the
        cluster-side semaphore and meters are found by name). Call it from a task, where the
        distributed worker is known.
        """
        with _gates_lock:
            entry = _gates.get(self.name)
            if entry is None:
                worker = _current_worker()
                gate: Any = _DaskGate(self, worker) if worker is not None else _LocalGate(self)
                entry = _gates[self.name] = [gate, 0]
            entry[1] += 1
        try:
            yield entry[0]
        finally:
            with _gates_lock:
                entry[1] -= 1
                close = getattr(entry[0], "close", None)
                if entry[1] == 0 and close is not None:  # a process-local gate is kept: its
                    del _gates[self.name]  # meters are the only record of the run's pace
                    close()


_gates: dict[str, list[Any]] = {}  # name -> [gate, partitions running]
_gates_lock = threading.Lock()


def _current_worker() -> Any:
    """Return the distributed worker running this task, or None (not on a distributed worker)."""
    if "distributed" not in sys.modules:
        return None
    from distributed import get_worker

    try:
        return get_worker()
    except ValueError:
        return None


class _LocalGate:
    """The limits within one process: one asyncio semaphore and meters, made on flownb's loop."""

    def __init__(self, limits: ClusterLimits) -> None:
        self.limits = limits
        self._slots: asyncio.Semaphore | None = None
        self.requests = Meter(limits.rpm) if limits.rpm else None
        self.tokens = Meter(limits.tpm) if limits.tpm else None
        # The run's spend cap: one in the process, shared by its partitions.
        self.cap = SpendCap(limits.max_spend) if limits.max_spend is not None else None
        self.spend: Ledger | None = self.cap
        self._parts = LastPart()  # the partitions of this computation that ended

    def ended(self, part: int, parts: int) -> str | None:
        """Count partition ``part`` of ``parts`` as ended; return the run's cap line when it
        was the last of them to end (a later computation of the frame counts afresh), else
        ``None`` (also when the run has no cap)."""
        if self.cap is None or not self._parts.end(part, parts):
            return None
        return self.cap.line()

    @asynccontextmanager
    async def __call__(self, call: Call) -> AsyncIterator[Settle]:
        if self._slots is None:  # every run of this process is on the same loop (flownb.infra.aio)
            self._slots = asyncio.Semaphore(self.limits.concurrency)
        estimate = estimate_tokens(call) if self.tokens is not None else 0
        if self.requests is not None:
            await self.requests.take(1)
        if self.tokens is not None:
            await self.tokens.take(estimate)
        tokens = self.tokens

        def settle(gen: Generation) -> None:
            actual = used(gen)
            if tokens is not None and actual is not None:
                tokens.adjust(actual - estimate)

        async with self._slots:
            yield settle


class SharedMeter:
    """A per-minute budget shared by every process of a cluster: the earliest start of the next
    charge lives in a ``distributed.Variable``, moved under a ``distributed.Lock``.

    Its coroutines run on the worker's event loop (see :class:`_DaskGate`).
    """

    def __init__(self, name: str, per_minute: float, worker: Any) -> None:
        from distributed import Lock, Variable

        self.name = name
        self.seconds_per_unit = 60.0 / per_minute
        self._worker = worker
        self._lock = Lock(f"{name}-lock", scheduler_rpc=worker.scheduler, loop=worker.loop)
        self._next = Variable(f"{name}-next", client=worker.client)

    async def _read(self) -> float:
        try:
            return float(await self._next.get(timeout=0.01))
        except TimeoutError:  # not set (no client when the graph was built): the first charge
            return 0.0

    async def take(self, units: float) -> None:
        """Return once ``units`` may be spent, having charged them (as :meth:`Meter.take`)."""
        while True:
            free_at = await self._read()  # a look without the lock, while waiting
            now = time.time()
            if free_at > now:
                await asyncio.sleep(min(free_at - now, POLL))
                continue
            await self._lock.acquire()
            try:
                now = time.time()
                if await self._read() <= now:
                    await self._next.set(now + units * self.seconds_per_unit)
                    self._log("charge", units, now)
                    return
            finally:
                await self._lock.release()

    async def adjust(self, units: float) -> None:
        """Correct earlier charges by ``units`` (negative: fewer were used than charged)."""
        await self._lock.acquire()
        try:
            moved = await self._read() + units * self.seconds_per_unit
            now = time.time()
            await self._next.set(max(moved, now - 1.0))
            self._log("correction", units, now)
        finally:
            await self._lock.release()

    def _log(self, kind: str, units: float, at: float) -> None:
        # On the cluster's event log (see METER_EVENTS): the run's ledger, whichever worker
        # charged it, readable once the run is over.
        event = {"meter": self.name, "kind": kind, "units": units, "at": at}
        self._worker.log_event(METER_EVENTS, {**event, "worker": self._worker.address})


class _Leases:
    """This process's leases of a run's cluster semaphore, lent to its calls one at a time.

    A lease asked of the scheduler is lent to a waiting call; when the call ends, the lease goes
    straight to the next waiting call of this process (no round trip to the scheduler), up to
    ``reuse`` times, then back to the scheduler so other workers get their turn; with no call
    waiting here it goes back at once. At most ``asking`` requests are outstanding at a time, so
    calls served by hand-over do not leave surplus grants behind. Each call in flight holds one
    lease, and the scheduler grants at most ``concurrency``: the limit holds across processes.
    Runs on flownb's event loop; only the scheduler requests go through the worker's loop.
    """

    def __init__(self, gate: _DaskGate, reuse: int = 16, asking: int = 2) -> None:
        self.gate = gate
        self.reuse = reuse
        self.asking = asking
        self.requested = 0
        self.waiters: collections.deque[asyncio.Future[int]] = collections.deque()

    async def take(self) -> int:
        """Wait for a lease; return how many more calls may use it before it goes back."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        self._ask()
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._give(fut.result())  # lent and cancelled at once: pass it on
            else:
                self.waiters.remove(fut)
            raise

    def put(self, uses: int) -> None:
        """Give back a lease after a call (``uses``: what :meth:`take` returned)."""
        if uses > 1:
            self._give(uses - 1)
        else:
            self.gate.release()
            self._ask()

    def _ask(self) -> None:
        loop = asyncio.get_running_loop()
        while self.requested < min(self.asking, len(self.waiters)):
            self.requested += 1
            future = self.gate.submit(self.gate.semaphore.acquire)
            future.add_done_callback(lambda f: loop.call_soon_threadsafe(self._granted, f))

    def _granted(self, future: concurrent.futures.Future[Any]) -> None:
        self.requested -= 1
        error = None if future.cancelled() else future.exception()
        if error is not None:
            while self.waiters:  # the scheduler cannot be reached: fail a waiting call
                fut = self.waiters.popleft()
                if not fut.done():
                    fut.set_exception(error)
                    break
        elif not future.cancelled() and future.result():
            self._give(self.reuse)
        self._ask()

    def _give(self, uses: int) -> None:
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(uses)
                return
        self.gate.release()  # nobody here needs it


class _DaskGate:
    """The limits of one run inside one distributed worker process."""

    def __init__(self, limits: ClusterLimits, worker: Any) -> None:
        from distributed import Semaphore

        from .spend import SharedLedger  # needs distributed, as this gate does

        self.limits = limits
        self.loop: asyncio.AbstractEventLoop = worker.loop.asyncio_loop
        self.semaphore = Semaphore(
            max_leases=limits.concurrency,
            name=f"{limits.name}-calls",
            scheduler_rpc=worker.scheduler,
            loop=worker.loop,
        )
        self.requests = (
            SharedMeter(f"{limits.name}-rpm", limits.rpm, worker) if limits.rpm else None
        )
        self.tokens = SharedMeter(f"{limits.name}-tpm", limits.tpm, worker) if limits.tpm else None
        self.leases = _Leases(self)
        self.ledger = (
            SharedLedger(limits.name, limits.max_spend, worker)
            if limits.max_spend is not None
            else None
        )
        self.spend: Ledger | None = self.ledger

    def ended(self, part: int, parts: int) -> str | None:
        """Count partition ``part`` of ``parts`` as ended in the cluster's figures; return the
        run's cap line when it was the last of them to end, else ``None`` (also when the run
        has no cap)."""
        return self.ledger.ended(part, parts) if self.ledger is not None else None

    def submit(self, make: Callable[[], Awaitable[T]]) -> concurrent.futures.Future[T]:
        async def run() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(run(), self.loop)

    async def _on_worker_loop(self, make: Callable[[], Awaitable[T]]) -> T:
        return await asyncio.wrap_future(self.submit(make))

    def close(self) -> None:
        """Stop refreshing this process's leases (none is held once its partitions ended)."""
        callback = getattr(self.semaphore, "refresh_callback", None)
        if callback is not None:
            self.loop.call_soon_threadsafe(callback.stop)

    def release(self) -> None:
        # Not awaited: a later acquire waits at the scheduler until this release arrives, so
        # the limit holds either way.
        self.submit(self.semaphore.release)

    @asynccontextmanager
    async def __call__(self, call: Call) -> AsyncIterator[Settle]:
        estimate = estimate_tokens(call) if self.tokens is not None else 0
        if self.requests is not None:
            requests = self.requests
            await self._on_worker_loop(lambda: requests.take(1))
        if self.tokens is not None:
            tokens = self.tokens
            await self._on_worker_loop(lambda: tokens.take(estimate))
        meter = self.tokens

        def settle(gen: Generation) -> None:
            actual = used(gen)
            if meter is not None and actual is not None and actual != estimate:
                self.submit(lambda: meter.adjust(actual - estimate))

        uses = await self.leases.take()
        try:
            yield settle
        finally:
            self.leases.put(uses)


def start_meters(limits: ClusterLimits) -> None:
    """Set the run's shared meters to "free now" on the scheduler, when a distributed client is
    at hand (graph building time), so workers never wait on an unset variable."""
    if "distributed" not in sys.modules or not (limits.rpm or limits.tpm):
        return
    from distributed import Variable, default_client

    try:
        client = default_client()
    except ValueError:  # no client yet: workers treat the unset meter as free
        return
    for kind, rate in (("rpm", limits.rpm), ("tpm", limits.tpm)):
        if rate:
            Variable(f"{limits.name}-{kind}-next", client=client).set(0.0)


def say_cap_line(limits: ClusterLimits, line: str | None) -> None:
    """Say ``line``, the cap's line of run ``limits`` (nothing when ``None``): on a distributed
    worker it goes to the client that built the run, on the cluster's event log (see
    :data:`SPEND_EVENTS`); elsewhere (a threaded or synchronous scheduler) it is said here, as a
    run in one process says it."""
    if line is None:
        return
    worker = _current_worker()
    if worker is None:
        announce(line)
    else:
        worker.log_event(SPEND_EVENTS, {"run": limits.name, "line": line})


# The capped runs this process built on a distributed client: the cap lines it says.
_heard: set[str] = set()


def hear_cap_lines(limits: ClusterLimits) -> None:
    """Have this process say the cap line of run ``limits`` when its workers send it (see
    :func:`say_cap_line`), when a distributed client is at hand (graph building time)."""
    if "distributed" not in sys.modules or limits.max_spend is None:
        return
    from distributed import default_client

    try:
        client = default_client()
    except ValueError:  # no client: the partitions run here and say it themselves
        return
    _heard.add(limits.name)
    client.subscribe_topic(SPEND_EVENTS, _say_heard)


def _say_heard(event: tuple[float, dict[str, Any]]) -> None:
    """Say a cap line a worker sent, when it is of a run this process built."""
    _, message = event
    if message.get("run") in _heard:
        announce(str(message["line"]))
