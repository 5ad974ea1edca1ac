"""Per-minute limits as :data:`~flownb.providers.calls.Gate` s: tokens (``tpm=`` /
``FLOWNB_TPM``) and a run's own requests (``rpm=`` of ``run_dataframe``).

Providers limit tokens as well as requests. Before a call is sent its tokens are estimated
(prompt characters / 4, plus the node's ``max_tokens``, or :data:`DEFAULT_COMPLETION_TOKENS`
when it sets none); the estimate is charged to a :class:`Meter`, and once the provider answers,
the meter is corrected by the difference between the usage it reported and the estimate. A
meter spaces charges so that, on average, no more than the budget is spent per minute.

:func:`chain` composes gates (the local token gate and a Dask run's cluster gate).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from .base import Call, Generation
from .calls import Gate, Settle
from .images import image_tokens

__all__ = [
    "DEFAULT_COMPLETION_TOKENS",
    "Meter",
    "RequestGate",
    "TokenGate",
    "chain",
    "estimate_tokens",
    "used",
]

# Charged for the answer of a text node that sets no max_tokens (corrected by the usage after).
DEFAULT_COMPLETION_TOKENS = 256


def estimate_tokens(call: Call) -> int:
    """Return the tokens ``call`` is expected to use: prompt characters / 4 (rounded up), plus
    ``max_tokens`` (or ``max_completion_tokens``) for text nodes, and the images a text call
    shows the model (:func:`~flownb.providers.images.image_tokens`)."""
    prompt = (len(call.prompt) + 3) // 4
    if call.kind != "text":
        return prompt
    prompt += image_tokens(call.prompt)
    params: Mapping[str, Any] = call.params
    limit = params.get("max_tokens") or params.get("max_completion_tokens")
    return prompt + (int(limit) if limit else DEFAULT_COMPLETION_TOKENS)


def used(gen: Generation) -> int | None:
    """Return the tokens the provider reported for ``gen`` (``None`` when it reported none)."""
    usage = gen.usage
    if not usage:
        return None
    total = usage.get("total_tokens")
    if total is None:
        total = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
    return int(total)


# How often a call waiting for budget looks again: corrections (a call that used fewer tokens
# than charged) hand budget back, and a waiter should not sleep past it.
POLL = 0.05


class Meter:
    """Spends a budget of ``per_minute`` units evenly: a charge of ``n`` units is admitted once
    the previous charges are paid off, and pushes the time the budget is free again
    ``n * 60 / per_minute`` seconds ahead (a leaky bucket without burst). Pure arithmetic on a
    monotonic clock, so one meter serves runs on any loop (and thread: the time the budget is
    free again is read and moved under one lock, so no charge is lost between the two).

    Its ledger says what it was charged, whatever the clock did: :attr:`charges` (how many were
    admitted) and :attr:`charged` (their units, net of every correction)."""

    def __init__(self, per_minute: float) -> None:
        if per_minute <= 0:
            raise ValueError("per_minute must be positive")
        self.seconds_per_unit = 60.0 / per_minute
        self.charges = 0
        self.charged = 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    def try_take(self, units: float) -> float:
        """Charge ``units`` if the budget is free now and return 0.0; else charge nothing and
        return the seconds until it is free."""
        with self._lock:
            now = time.monotonic()
            if self._next <= now:
                self._next = now + units * self.seconds_per_unit
                self.charges += 1
                self.charged += units
                return 0.0
            return self._next - now

    async def take(self, units: float) -> None:
        """Return once ``units`` may be spent, having charged them."""
        while True:
            wait = self.try_take(units)
            if not wait:
                return
            await asyncio.sleep(min(wait, POLL))

    def adjust(self, units: float) -> None:
        """Correct the last charges by ``units`` (negative: fewer were used than charged)."""
        with self._lock:
            self._next = max(self._next + units * self.seconds_per_unit, time.monotonic() - 1.0)
            self.charged += units

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]  # a lock does not pickle
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


class TokenGate:
    """A gate that holds each attempt until the meter allows its estimated tokens, and settles
    the estimate against the usage reported."""

    def __init__(self, per_minute: float) -> None:
        self.meter = Meter(per_minute)

    @asynccontextmanager
    async def __call__(self, call: Call) -> AsyncIterator[Settle]:
        estimate = estimate_tokens(call)
        await self.meter.take(estimate)

        def settle(gen: Generation) -> None:
            actual = used(gen)
            if actual is not None:
                self.meter.adjust(actual - estimate)

        yield settle


class RequestGate:
    """A gate spacing attempts ``60 / rpm`` seconds apart (a meter where each call costs one)."""

    def __init__(self, per_minute: float) -> None:
        self.meter = Meter(per_minute)

    @asynccontextmanager
    async def __call__(self, call: Call) -> AsyncIterator[Settle]:
        await self.meter.take(1)
        yield _ignore


def _ignore(gen: Generation) -> None:
    return None


def chain(*gates: Gate | None) -> Gate | None:
    """Return one gate entering each given gate in order (``None``s skipped), or ``None``."""
    present = [g for g in gates if g is not None]
    if len(present) <= 1:
        return present[0] if present else None

    @asynccontextmanager
    async def gate(call: Call) -> AsyncIterator[Settle]:
        async with AsyncExitStack() as stack:
            settles = [await stack.enter_async_context(g(call)) for g in present]

            def settle(gen: Generation) -> None:
                for s in settles:
                    s(gen)

            yield settle

    return gate
