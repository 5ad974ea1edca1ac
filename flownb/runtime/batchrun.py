"""A batch run as a flow hands it down: checked, capped, watched and handed over, here.

:meth:`flownb.core.flow.FlowCore.run_each` gives its batch to :func:`run_each` with what only
the flow knows (its variables, its once-only notes, the bar a run of it shows, its spend cap,
and how it executes a validated batch: :class:`Runs`). The batch then goes down from here:
validated against the flow's variables, run through the cap's gate when ``max_spend`` is given,
and watched by the bar the flow opens (the live view's rows, the money meter beside the bar, the
bar's count, and a slow retry's notice on the bar) through the run's one list of
:class:`~flownb.runtime.pipeline.Observers`, which is handed over before this returns or raises.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..providers.calls import Notice, announce, notices_to
from ..show.meter import show
from .pipeline import Observers, observers_of
from .result import OnResult, RunResult

if TYPE_CHECKING:
    from ..flowfile.validate import VariableSpec
    from ..providers.spend import SpendCap

__all__ = ["Execute", "Runs", "run_each"]

# How a flow executes a validated batch, reporting each element to the run's observers.
Execute = Callable[[Sequence[Mapping[str, str]], OnResult, int | None], None]


class Runs(Protocol):
    """What a batch run asks of the flow that hands it down (a
    :class:`~flownb.core.flow.FlowCore` answers)."""

    @property
    def spec(self) -> VariableSpec:
        """The flow's variables, for validation."""
        ...

    def say_notes(self) -> None:
        """Warn, once, about what the flow's requests drop, replace or cannot price."""
        ...

    def open_bar(self, batch: Sequence[Mapping[str, Any]]) -> Any:
        """Return the bar a run of ``batch`` shows."""
        ...

    def capped(self, max_spend: float, data: Any) -> tuple[Runs, SpendCap]:
        """Return the flow seen through a spend cap of ``max_spend``, and the cap."""
        ...

    def run_each(
        self,
        batch: Sequence[Mapping[str, Any]],
        on_result: OnResult,
        *,
        progress: bool = False,
        concurrency: int | None = None,
        check: bool = True,
        max_spend: float | None = None,
    ) -> None:
        """Run the flow once per element (see :func:`run_each`)."""
        ...


def run_each(
    flow: Runs,
    execute: Execute,
    batch: Sequence[Mapping[str, Any]],
    on_result: OnResult,
    *,
    progress: bool = False,
    concurrency: int | None = None,
    check: bool = True,
    max_spend: float | None = None,
) -> None:
    """Run ``flow`` once per element of ``batch`` with its ``execute``, calling ``on_result`` as
    each element finishes (the contract of :meth:`flownb.core.flow.FlowCore.run_each`):
    ``check`` validates the batch first; ``max_spend`` runs it through the flow's cap and says
    how much of the cap was used, however the run ends; ``progress`` shows the flow's bar, with
    the money meter and slow retries' notices on it.

    Raises:
        InputError: (``check=True``) some element's variables are wrong, before any runs.
        KeyboardInterrupt: Ctrl-C; every element that finished before it was reported.
        ConfigError: ``max_spend`` given and some call cannot be priced (nothing is sent).
    """
    if check:
        flow.spec.check_batch(batch)
    flow.say_notes()
    if max_spend is not None:
        capped, cap = flow.capped(max_spend, batch)
        try:
            # The same run on the cap's view of the flow (its bar is the flow's own).
            capped.run_each(
                batch, on_result, progress=progress, concurrency=concurrency, check=False
            )
        finally:
            announce(cap.line())
        return
    # One list of observers for the run; the runner puts the run log and tracing first.
    observers = observers_of(on_result)
    bar: Any = None
    if progress:
        bar = flow.open_bar(batch)
        _watch_with_bar(observers, bar)
    try:
        if bar is None:
            execute(batch, observers, concurrency)
        else:
            with notices_to(_bar_notice(bar)):  # a slow retry says so on the bar
                execute(batch, observers, concurrency)
    finally:
        # The hand-over: whatever the flow runs on, no observer above is called once this
        # returns or raises (a run stopped by Ctrl-C may still end calls in flight).
        observers.close()
        if bar is not None:
            bar.close()


def _watch_with_bar(observers: Observers, bar: Any) -> None:
    """Add the progress bar's observers: the live view's rows (in a notebook), the meter of
    money spent and saved beside the bar, and the bar's count."""
    live = getattr(bar, "record", None)
    if live is not None:
        observers.add(live)

    def count(i: int, result: RunResult | None, exc: BaseException | None) -> None:
        show(bar, result)  # money spent so far and the cache's saving, beside the bar
        bar.update(1)

    observers.add(count)


def _bar_notice(bar: Any) -> Notice:
    """Return where a run with progress bar ``bar`` announces things: the bar's postfix, and
    in a terminal also a line on stderr above the bar (a postfix is easy to miss there)."""
    in_notebook = bar.in_notebook

    def notice(line: str) -> None:
        bar.notice(line)
        if not in_notebook:
            bar.write(f"flownb: {line}", file=sys.stderr)

    return notice
