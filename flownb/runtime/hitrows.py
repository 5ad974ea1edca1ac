"""A looked-up chunk's fully cached rows, answered in bulk.

A row of a cached re-run whose every call the lookahead found in the cache
(:class:`~flownb.runtime.lookahead.Chunk`) needs no coroutine, no slot and no wait: its result
is made here, in a loop over the chunk's columns of answers, and the chunk's answered rows are
reported together (:func:`~flownb.runtime.result.report_all`: the run log and the caller's
collector take them in bulk). The results are those the row-by-row path makes (the engine's
per-row result maker): the same outputs, ``cached`` outputs, generations and prices. Each
call's ``latency`` is its share of the chunk's lookup (a row's, its calls' sum): what
answering it cost this run.

A row goes the usual way (the engine's workers, with what was found for it ahead) when some
call was not found, or some node reads another node (not looked up ahead), or an answer is an
image or was cut short (its result needs the engine's media URL or warning), or is shown as
paid this run (a provider batch's: see :mod:`flownb.frames.batch_api.paid`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from ..infra import collector
from ..providers.base import Generation
from .lookahead import CHUNK, Ahead, Chunk, Lookahead
from .result import OnResult, RunResult, report_all

__all__ = ["Engine", "answer_hits", "elements"]

if TYPE_CHECKING:
    from ..providers.base import Provider
    from ..providers.calls import CallRunner
    from .plan import Plan

# The engine's per-row result maker: (variables, generations in plan order, start) -> result.
RowResult = Callable[[Mapping[str, str], list[Generation], float], RunResult]


class Engine(Protocol):
    """What is read here of the engine (:class:`flownb.runtime.engine.Engine`)."""

    @property
    def plan(self) -> Plan: ...
    @property
    def provider(self) -> Provider: ...
    @property
    def limits(self) -> Sequence[int]: ...


def elements(
    engine: Engine,
    result: RowResult,
    batch: Sequence[Mapping[str, str]],
    runner: CallRunner,
    on_result: OnResult,
) -> Iterator[tuple[int, Ahead | None]]:
    """Yield each element of ``batch`` (run by ``engine`` with ``runner``; ``result`` is its
    per-row result maker) still to run, with what was found for it ahead.

    With a cache, the elements are looked up a chunk at a time before they start (a re-run of
    a cached batch costs a query per few thousand calls, not one per call: see
    :mod:`flownb.runtime.lookahead`), and the rows whose every call was found are answered and
    reported to ``on_result`` right there, in bulk (:func:`answer_hits`): they are not
    yielded. Nothing more is looked up or answered once the run stops."""
    cache = runner.cache
    if cache is None or len(batch) <= 1:
        for i in range(len(batch)):
            yield i, None
        return
    lookahead = Lookahead(engine.plan.steps, engine.limits, engine.provider, batch, cache, runner)
    for start in range(0, len(batch), CHUNK):
        if runner.stopping:
            return
        with collector.paused():  # a chunk's answers and results: no cycles to look for
            chunk = lookahead.chunk(start)
            answered = answer_hits(engine, result, batch, chunk, on_result)
        for r in range(chunk.end - start):
            if r not in answered:
                yield start + r, chunk.ahead(r)


def answer_hits(
    engine: Engine,
    result: RowResult,
    batch: Sequence[Mapping[str, str]],
    chunk: Chunk,
    on_result: OnResult,
) -> set[int]:
    """Answer and report the rows of ``chunk`` (of ``batch``, run by ``engine``) whose every
    call the cache answered; return their offsets in the chunk (the others are to be run)."""
    if len(chunk.steps) != len(engine.plan.steps) or not chunk.gens:
        return set()  # some node reads another: its prompt is known only as the row runs
    columns = chunk.gens  # in plan order: every step is one the lookahead looked up
    answered: list[int] = []
    rows: list[tuple[int, list[Generation]]] = []
    for r, found in enumerate(zip(*columns, strict=True)):
        if not all(found):
            continue
        for g in found:
            # Not a plain hit (an answer a provider batch brought in, shown once as paid; an
            # image; a text cut short): the engine makes its row's result.
            if not g.cached or g.media is not None or g.finish_reason == "length":
                break
        else:
            answered.append(r)
            rows.append((r, list(found)))
    if not answered:
        return set()
    calls = len(answered) * len(columns)
    share = chunk.seconds / calls  # each call's part of the lookup: its latency this run
    latency = share * len(columns)
    results = _results(result, batch, chunk.start, rows, share, latency)
    start = chunk.start
    report_all(on_result, [start + r for r in answered], results)
    return set(answered)


def _results(
    result: RowResult,
    batch: Sequence[Mapping[str, str]],
    start: int,
    rows: list[tuple[int, list[Generation]]],
    share: float,
    latency: float,
) -> list[RunResult]:
    """Return the results of ``rows`` (offset from ``start``, answers in plan order) made by
    the engine's per-row ``result`` maker, each call's latency set to ``share`` and each row's
    to ``latency``."""
    results: list[RunResult] = []
    append = results.append
    for r, gens in rows:
        for g in gens:
            g.latency = share
        made = result(batch[start + r], gens, 0.0)
        made.latency = latency
        append(made)
    return results
