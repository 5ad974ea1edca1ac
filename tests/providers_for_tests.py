"""Small providers implementing the provider seam, for engine tests: they stand in for a model
service (like the offline provider does), recording what the engine asked of them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import ClassVar

from flownb.errors import ProviderError
from flownb.providers.base import Call, Generation, Provider


class EchoProvider(Provider):
    """Async provider: answers ``<kind>:<prompt>`` after ``delay`` seconds, tracking calls and the
    peak number of calls in flight; fails calls whose prompt contains ``fail_on``."""

    name: ClassVar[str] = "echo"
    cacheable: ClassVar[bool] = False

    def __init__(
        self,
        delay: float = 0.0,
        fail_on: str | None = None,
        on_call: Callable[[int], None] | None = None,
    ) -> None:
        self.delay = delay
        self.fail_on = fail_on
        self.on_call = on_call
        self.calls: list[Call] = []
        self.in_flight = 0
        self.peak = 0

    async def generate(self, call: Call) -> Generation:
        self.calls.append(call)
        if self.on_call is not None:
            self.on_call(len(self.calls))
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            end = time.perf_counter() + self.delay
            await asyncio.sleep(self.delay)
            # A loop's timers may fire up to its clock's resolution early (a millisecond on
            # uvloop, flownb's loop): the answer comes after ``delay``, as promised.
            while (left := end - time.perf_counter()) > 0:
                await asyncio.sleep(left)
        finally:
            self.in_flight -= 1
        if self.fail_on is not None and self.fail_on in call.prompt:
            raise ProviderError(f"model refused {call.prompt!r}", status=400)  # not retryable
        return Generation(f"{call.kind}:{call.prompt}")


class InlineEcho(Provider):
    """Inline provider like the offline one, raising ``raise_at`` (an exception) on call N."""

    name: ClassVar[str] = "inline-echo"
    inline: ClassVar[bool] = True
    cacheable: ClassVar[bool] = False

    def __init__(self, raise_at: tuple[int, BaseException] | None = None) -> None:
        self.raise_at = raise_at
        self.calls: list[Call] = []

    def generate_inline(self, call: Call) -> Generation:
        self.calls.append(call)
        if self.raise_at is not None and len(self.calls) == self.raise_at[0]:
            raise self.raise_at[1]
        return Generation(call.prompt)

    async def generate(self, call: Call) -> Generation:
        return self.generate_inline(call)
