"""A ceiling on money: ``max_spend=`` (US dollars), as a :data:`~flownb.providers.calls.Gate`.

The rule: a call is sent only if what was spent plus the most every call in flight could still
cost, plus the most this call could cost, stays within the cap. "The most a call could cost" is
:meth:`~flownb.providers.callplan.NodeCalls.most` (its prompt's UTF-8 bytes as tokens, an upper
bound for the vendors' tokenizers, plus the output limit it is sent with, at list price; a batch
call at the batch price; an image at its per-image price). So the cap is never passed, however
many calls run at once. A call submitted to a batch API counts at its bound at once
(:meth:`SpendCap.take`) and is settled to its real cost when the batch's results are read
(:meth:`SpendCap.settle_taken`).

Each attempt takes a *reservation* of its bound before it is sent (entering the gate), and when
the answer comes the reservation is *settled* to the answer's real cost (from its usage and the
price table). A call that does not fit waits while other calls are in flight (their answers
usually cost less than their bound, and hand the difference back); when none is in flight and it
still does not fit, it is refused with :class:`~flownb.errors.SpendCapReached` and never sent.

A call that was sent and failed: when the vendor answered with an error status (a 4xx or 5xx:
the vendors bill no failed request) its reservation is released; when no answer came (a timeout,
a dropped connection) it may have been billed, so its reservation is kept as spent. Cache hits
and calls answered by an identical call in flight never reach the gate: they cost nothing and
are always served.

One :class:`SpendCap` may be shared by several runs (an evaluation's variants and judges) on any
thread or loop: its figures move under one lock. A :class:`SpendGate` reserves in any
:class:`Ledger`: a :class:`SpendCap` in this process, or one whose figures live elsewhere (a Dask
cluster's, :mod:`flownb.frames.dask.spend`), with the same rule.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol

from ..errors import ConfigError, ImageNotFetched, ProviderError, SpendCapReached
from .base import Call, Generation, Kind, Provider
from .callplan import NodeCalls, node_calls
from .calls import Settle

__all__ = ["LastPart", "Ledger", "SpendCap", "SpendGate", "check_cappable"]

# How often a call that does not fit looks again while other calls are in flight (their answers
# settle below their bounds and free room).
POLL = 0.02


def _usd(value: float) -> str:
    from ..show.meter import usd

    return usd(value)


class Ledger(Protocol):
    """Where a capped run's reservations are kept: :class:`SpendCap` (this process), or a
    cluster's shared figures."""

    async def reserve(self, most: float) -> None:
        """Return once ``most`` is reserved (waiting while calls in flight may free room).

        Raises:
            SpendCapReached: it does not fit and no call is in flight: never send it.
        """

    def settle(self, most: float, cost: float) -> Awaitable[None] | None:
        """End a reservation of ``most``: ``cost`` was paid for it; what it returns (if
        anything) is awaited before the call's slot is freed."""


class SpendCap:
    """What a run (or an API key) may still spend: ``cap`` US dollars, of which ``spent`` is
    paid (settled calls, and sent calls whose cost is unknown at their bound) and ``reserved``
    held by calls in flight. ``on_spent`` is told each change of ``spent`` (the server keeps a
    key's figure on disk with it)."""

    def __init__(
        self,
        cap: float,
        *,
        spent: float = 0.0,
        on_spent: Callable[[float], None] | None = None,
    ) -> None:
        if not isinstance(cap, int | float) or isinstance(cap, bool) or not cap >= 0:
            raise ConfigError(f"max_spend must be a number of US dollars >= 0, got {cap!r}")
        self.cap = float(cap)
        self.spent = float(spent)
        self.reserved = 0.0
        self.in_flight = 0
        self.refused = 0  # calls not sent because of the cap
        self.on_spent = on_spent
        self._lock = threading.Lock()

    @property
    def left(self) -> float:
        """US dollars the cap still allows (what is reserved counted as spent)."""
        return max(0.0, self.cap - self.spent - self.reserved)

    def try_reserve(self, most: float) -> bool | None:
        """Reserve ``most`` if it fits and return True; False when it does not and no call is
        in flight (it never will: refuse it); None when it may fit once calls in flight settle."""
        with self._lock:
            if self.spent + self.reserved + most <= self.cap:
                self.reserved += most
                self.in_flight += 1
                return True
            if self.in_flight == 0:
                self.refused += 1
                return False
            return None

    async def reserve(self, most: float) -> None:
        """Return once ``most`` is reserved: at once when it fits, else after calls in flight
        settled enough (polled every :data:`POLL` seconds).

        Raises:
            SpendCapReached: it does not fit and no call is in flight (it never will).
        """
        while True:
            fits = self.try_reserve(most)
            if fits:
                return
            if fits is False:
                raise self.refusal(most)
            await asyncio.sleep(POLL)

    def take(self, most: float) -> bool:
        """Count ``most`` as spent at once if it fits and return True, else False (a call
        submitted to a batch API, whose answer comes hours later: its bound stands)."""
        with self._lock:
            if self.spent + self.reserved + most > self.cap:
                self.refused += 1
                return False
            self.spent += most
            spent = self.spent
        if most and self.on_spent is not None:
            self.on_spent(spent)
        return True

    def settle_taken(self, most: float, cost: float) -> None:
        """Settle a call counted at its bound ``most`` by :meth:`take` (a batch API's) to what
        its answer really cost, ``cost`` (0: a line the batch failed, not billed; NaN: unknown,
        so its bound stands)."""
        if math.isnan(cost) or cost == most:
            return
        with self._lock:
            self.spent = max(0.0, self.spent + cost - most)
            spent = self.spent
        if self.on_spent is not None:
            self.on_spent(spent)

    def settle(self, most: float, cost: float) -> None:
        """End a reservation of ``most``: ``cost`` was paid for it (0: nothing)."""
        with self._lock:
            self.reserved = max(0.0, self.reserved - most)
            self.in_flight -= 1
            self.spent += cost
            spent = self.spent
        if cost and self.on_spent is not None:
            self.on_spent(spent)

    def refusal(self, most: float) -> SpendCapReached:
        """Return the error of a call (whose bound is ``most``) the cap refuses."""
        return SpendCapReached(
            f"not sent: it could cost up to {_usd(most)}, and the spend cap of "
            f"{_usd(self.cap)} has {_usd(self.left)} left ({_usd(self.spent)} spent); "
            "a re-run with a higher max_spend buys it (what was bought comes from the cache)",
            cap=self.cap,
            spent=self.spent,
        )

    def line(self) -> str:
        """Return the cap's one line: how much of it was used, and the calls it stopped."""
        used = f"spend cap: {_usd(self.spent)} of {_usd(self.cap)} used"
        if self.refused:
            used += (
                f"; {self.refused} call(s) not sent (they could have passed the cap): their rows "
                "are marked in the error column, and a re-run with a higher max_spend buys them"
            )
        return used


class LastPart:
    """The parts of a capped run split in several (a Dask frame's partitions) that ended: its
    cap line is said once, after the last part to end. Safe from several threads."""

    def __init__(self) -> None:
        self._ended: set[int] = set()
        self._lock = threading.Lock()

    def end(self, part: int, parts: int) -> bool:
        """Count part ``part`` of ``parts`` as ended; return whether it was the last of them
        to end (a later run of the same parts then counts afresh)."""
        with self._lock:
            self._ended.add(part)
            if len(self._ended) < parts:
                return False
            self._ended.clear()
            return True


def _cost_nothing(exc: BaseException) -> bool:
    """Whether a sent call that failed with ``exc`` cost nothing: the vendor answered it with
    an error status (vendors bill no failed request); not when no answer came."""
    if isinstance(exc, ImageNotFetched):  # generated, so billed: only its download failed
        return False
    return isinstance(exc, ProviderError) and exc.status is not None


class SpendGate:
    """The gate of a capped run: reserves each attempt's bound in ``cap`` (a :class:`Ledger`)
    before it is sent, and settles it to the answer's cost (see the module docstring).
    ``batch``: the calls go through the provider's batch API, at its price."""

    def __init__(self, cap: Ledger, provider: Provider, *, batch: bool = False) -> None:
        self.cap = cap
        self.provider = provider
        self.batch = batch
        self._nodes: dict[int, NodeCalls] = {}

    def most(self, call: Call) -> float:
        """Return the most ``call`` could cost (NaN: it cannot be bounded)."""
        node = self._nodes.get(id(call.params))
        if node is None:
            node = node_calls(self.provider, call.kind, call.params, call.system, call.node_id)
            self._nodes[id(call.params)] = node
        return node.most(call.prompt, batch=self.batch)

    @asynccontextmanager
    async def __call__(self, call: Call) -> AsyncIterator[Settle]:
        most = self.most(call)
        if math.isnan(most):  # checked before the run (check_cappable): a safety net
            raise ConfigError(f"max_spend: node {call.node_id!r}'s calls have no known price")
        cap = self.cap
        await cap.reserve(most)
        settled: list[Awaitable[None] | None] = []

        def settle(gen: Generation) -> None:
            cost = gen.cost if gen.cost is not None else self.provider.cost(gen)
            if math.isnan(cost):  # priced before, unknown now: its bound stands as spent
                cost = most
            settled.append(cap.settle(most, cost))

        try:
            yield settle
        except BaseException as exc:
            if not settled:  # told, not waited for: the call's own error goes on at once
                cap.settle(most, 0.0 if _cost_nothing(exc) else most)
            raise
        if not settled:
            settled.append(cap.settle(most, most))
        pending = settled[0]
        if pending is not None:  # a ledger elsewhere: settled before the slot is freed
            await pending


def check_cappable(
    provider: Provider,
    nodes: Mapping[str, tuple[Kind, Mapping[str, Any], str | None]],
    *,
    batch: bool = False,
) -> None:
    """Refuse, before anything is sent, a capped run some of whose calls cannot be bounded:
    ``nodes`` maps each node's name to its ``(kind, params, system)``.

    Raises:
        ConfigError: naming the node and why (no price for its model, or no output limit).
    """
    for name, (kind, params, system) in nodes.items():
        node = node_calls(provider, kind, params, system)
        if not math.isnan(node.most("", batch=batch)):
            continue
        if kind == "text" and not math.isnan(node.expected("")):
            why = (
                f"the most an answer may write is not known for model {node.model!r}: set the "
                "node's max_tokens"
            )
        else:
            why = (
                f"model {node.model!r} has no known price with provider {provider.name!r} (give "
                "the endpoint prices=, see the Vendors and prices page)"
            )
        raise ConfigError(
            f"max_spend cannot cap node {name!r}: {why}; an uncapped run would be unbounded, so "
            "nothing was sent"
        )
