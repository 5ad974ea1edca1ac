"""Planning and executing a flow.

:class:`~flownb.runtime.plan.Plan` is computed once per flow (:mod:`flownb.runtime.plan`): the
variables and outputs in node order, and the generation nodes that feed an output (only those
run), grouped into levels so that independent nodes of one run execute concurrently.

:class:`Engine` executes a plan over a batch. Inside it is async: one concurrency limit shared by
batch elements and nodes, a bounded pool of workers pulling elements (so a 100,000-row batch
does not become 100,000 coroutines at once). Providers that can answer without I/O (offline)
take a synchronous fast path that skips the event loop entirely.

Beyond the contract: a generation node may feed another; the upstream node's output is then
available to the downstream prompt as ``{<upstream node name>}`` (a variable of the same label
wins).
"""

from __future__ import annotations

import asyncio
import threading
import time
import warnings
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, InputError, Problem, ProviderError
from ..infra import collector, tracing
from ..providers.base import Call, Generation, Provider
from ..providers.calls import CallRunner, Gate
from ..providers.inflight import finish
from ..providers.limits import AdaptiveLimiter, Pacer
from ..providers.tokens import TokenGate, chain
from .events import StreamEvent
from .hitrows import elements
from .lookahead import Ahead
from .result import OnResult, RunResult, make_result

if TYPE_CHECKING:
    from .cache import CallCache

from .plan import Plan, Step, _step_outputs, prompt_problem, step_calls

__all__ = ["Engine", "Plan", "Step", "prompt_problem"]


MediaUrl = Callable[[str], str]


# Where a streamed run's events go, as they happen (see Engine.stream_one).
Emit = Callable[[StreamEvent], None]
# An element's step that nothing was found for ahead: its prompt and answer are not known.
_UNKNOWN: tuple[str | None, Generation | None] = (None, None)


class Engine:
    """Runs a :class:`Plan` with a provider.

    ``media_url`` turns a media file name into the URL put in outputs (``file://`` locally; the
    server passes its ``/media/`` URLs). The async path's knobs (see
    :mod:`flownb.providers.calls`) come resolved from the caller's run configuration: a call
    cache (``None``: uncached), requests per minute, seconds per attempt and retries.

    Every prompt is measured once rendered, before the provider sees it: one longer than the
    provider's ``prompt_limits`` for its kind fails its element with an :class:`InputError`
    (code ``prompt_too_long``) and costs nothing; :meth:`check_prompts` refuses a whole batch
    up front.

    Raises:
        ConfigError: the provider cannot run this plan: it draws no images and the flow has an
            image node, or it refuses a node's model parameters.
    """

    def __init__(
        self,
        plan: Plan,
        provider: Provider,
        media_url: MediaUrl,
        *,
        cache: CallCache | None,
        rpm: float | None,
        timeout: float,
        retries: int,
        tpm: float | None = None,
    ) -> None:
        if not provider.supports_images:
            images = plan.image_nodes
            if images:
                raise ConfigError(
                    f"provider {provider.name!r} cannot generate images, and this flow's image "
                    f"node{'s' * (len(images) > 1)} {', '.join(map(repr, images))} would need it; "
                    "choose a provider that does (offline, openai or gemini)"
                )
        for step in plan.steps:  # refuse params the provider would reject, before anything runs
            provider.check_params(step.kind, step.params, step.name)
        self.plan = plan
        self.provider = provider
        self.limits = tuple(provider.prompt_limits[step.kind] for step in plan.steps)
        # What each node's calls are (prompt, key, prices): made by their one author.
        self.nodes = tuple(step_calls(provider, step) for step in plan.steps)
        self.media_url = media_url
        self.cache = cache if provider.cacheable else None
        self.pacer = Pacer(rpm)
        self.timeout = timeout
        self.retries = retries
        # Tokens per minute (None or 0: no limit), shared by every run of this engine.
        self.tokens: Gate | None = TokenGate(tpm) if tpm else None
        self._cut_warned: set[str] = set()  # nodes already warned about answers cut short
        # Shared by every result: RunResult.trace is computed from it only when asked for.
        self.trace_of = (plan.trace_names, media_url)
        self.step_outputs = _step_outputs(plan)
        # The outputs of a row whose every node came from the cache (those fed by nodes only).
        self._all_cached = frozenset(
            name
            for name, srcs in plan.output_sources
            if srcs and all(kind == "step" for kind, _ in srcs)
        )

    # -- assembling a result ------------------------------------------------------------------

    def result_of(
        self, values: Mapping[str, str], gens: list[Generation], started: float
    ) -> RunResult:
        """Return the result of a row whose variables are ``values`` and whose calls, in plan
        order, answered ``gens``, the row having started at ``started`` (``perf_counter``)."""
        # Hot path for large batches: keep per-row work to list/dict building.
        media_url = self.media_url
        plan = self.plan
        if plan.direct is not None:
            outputs = {}
            for name, ref in plan.direct:
                g = gens[ref]
                outputs[name] = g.output if g.media is None else media_url(g.media)
            entries = None
        else:
            outs = [g.output if g.media is None else media_url(g.media) for g in gens]
            outputs = {}
            entries = []
            for name, srcs in plan.output_sources:
                value = "\n\n".join(
                    outs[ref] if kind == "step" else values[ref] for kind, ref in srcs
                )
                entries.append((name, value))
                outputs.setdefault(name, value)
        for g in gens:
            if g.finish_reason == "length":
                self._warn_cut(gens)
                break
        cached: frozenset[str] = frozenset()
        for g in gens:
            if g.cached:
                cached = self._cached_outputs(gens)
                break
        return make_result(
            outputs,
            entries,
            plan.output_kinds,
            self.provider.name,
            cached,
            time.perf_counter() - started,
            gens,
            self.trace_of,
            plan,
            values,
        )

    def _cached_outputs(self, gens: list[Generation]) -> frozenset[str]:
        """Return the outputs every node of which came from the cache (some node did)."""
        plan = self.plan
        if all(g.cached for g in gens):  # a re-run's usual row: the answer is the plan's
            return self._all_cached
        return frozenset(
            name
            for name, srcs in plan.output_sources
            if srcs and all(kind == "step" and gens[ref].cached for kind, ref in srcs)
        )

    def _warn_cut(self, gens: Sequence[Generation | None]) -> None:
        """Warn, once per node and engine, that its answer stopped at the token limit."""
        for name, g in zip(self.plan.trace_names, gens, strict=True):
            if g is not None and g.finish_reason == "length" and name not in self._cut_warned:
                self._cut_warned.add(name)
                warnings.warn(
                    f"node {name!r}: the answer stopped at the token limit (finish_reason "
                    "'length'); its text is kept but cut short (RunResult.truncated, the "
                    "'truncated' column); raise max_tokens to get all of it",
                    UserWarning,
                    stacklevel=2,
                )

    def _context(
        self, values: Mapping[str, str], gens: list[Generation | None], step: Step
    ) -> Mapping[str, str]:
        if not step.upstream:
            return values
        ctx = {self.plan.steps[u].name: gens[u].output for u in step.upstream}  # type: ignore[union-attr]
        ctx.update(values)
        return ctx

    def check_prompts(self, batch: Sequence[Mapping[str, str]], *, indexed: bool = True) -> None:
        """Refuse a validated batch in which some prompt would be longer than the provider
        takes, before anything runs (an upstream node's output, not known yet, counts as empty;
        the run itself measures again). ``indexed=False``: the batch is one run's variables,
        and the problems name no element.

        Raises:
            InputError: code ``prompt_too_long``, every such element and node listed.
        """
        checks = [
            (step, step.template.length, limit)
            for step, limit in zip(self.plan.steps, self.limits, strict=True)
        ]
        problems: list[Problem] = []
        for i, values in enumerate(batch):
            for step, length, limit in checks:
                size = length(values)
                if size > limit:
                    where = i if indexed else None
                    problems.append(prompt_problem(step, size, limit, values, where))
        if problems:
            raise InputError(problems)

    def _prompt(self, step: Step, ctx: Mapping[str, str]) -> str:
        """Return ``step``'s prompt rendered from ``ctx``.

        Raises:
            InputError: it is longer than the provider takes for its kind.
        """
        prompt = self.nodes[step.index].render(ctx)
        limit = self.limits[step.index]
        if len(prompt) > limit:
            # Blame a variable, not an upstream node's output (which ctx also holds).
            values = {name: ctx[name] for name in self.plan.variables if name in ctx}
            raise InputError([prompt_problem(step, len(prompt), limit, values)])
        return prompt

    # -- synchronous fast path (inline providers) ---------------------------------------------

    def run_inline(
        self,
        batch: Sequence[Mapping[str, str]],
        on_result: OnResult,
        stop: threading.Event | None = None,
    ) -> None:
        """Run a validated batch synchronously; only for providers with ``inline = True``.
        When ``stop`` is set (from another thread) the run ends before its next element."""
        # Traced only when a tracer provider is configured (checked once per batch, not per call).
        generate = tracing.traced(self.provider.name, self.provider.generate_inline)
        steps = self.plan.steps
        chained = self.plan.chained
        # Hoisted out of the loop: this path runs ~10,000 rows in tens of milliseconds.
        calls = [
            (n.render, n.call, self.limits[s.index], s)
            for s, n in zip(steps, self.nodes, strict=True)
        ]
        result = self.result_of
        clock = time.perf_counter
        for i, values in enumerate(batch):
            if stop is not None and stop.is_set():
                return
            started = begun = clock()
            try:
                if chained:
                    gens: list[Any] = [None] * len(steps)
                    for step in steps:
                        ctx = self._context(values, gens, step)
                        gen = generate(self.nodes[step.index].call(self._prompt(step, ctx)))
                        # The node's own time (its prompt's rendering included), for its
                        # picture: one clock read per node, from the previous node's end.
                        now = clock()
                        gen.latency, begun = now - begun, now
                        gens[step.index] = gen
                else:
                    gens = []
                    for render, call_of, limit, step in calls:
                        prompt = render(values)
                        if len(prompt) > limit:  # measured before the provider does any work
                            raise InputError([prompt_problem(step, len(prompt), limit, values)])
                        gen = generate(call_of(prompt))
                        now = clock()
                        gen.latency, begun = now - begun, now
                        gens.append(gen)
                outcome = result(values, gens, started)
            except Exception as exc:
                on_result(i, None, exc)
            else:
                on_result(i, outcome, None)

    # -- async path -----------------------------------------------------------------------------

    async def _call(
        self,
        step: Step,
        ctx: Mapping[str, str],
        runner: CallRunner,
        emit: Emit | None = None,
        call: Call | None = None,
    ) -> Generation:
        """Return the node's generation, its ``latency`` set to the node's time here (waits for
        a slot, retries and the cache included: what the node cost this run); with ``emit``,
        its text handed to ``emit`` as the provider streams it, and its image when ready.
        ``call``: the node's call, built already (its lookup's); else rendered from ``ctx``."""
        begun = time.perf_counter()
        if call is None:
            call = self.nodes[step.index].call(self._prompt(step, ctx))
        if emit is None:
            gen = await runner(call)
        else:
            gen = await self._streamed(step, call, runner, emit)
        gen.latency = time.perf_counter() - begun
        return gen

    async def _streamed(self, step: Step, call: Call, runner: CallRunner, emit: Emit) -> Generation:
        node = self.plan.trace_names[step.index]
        outputs = self.step_outputs[step.index]

        def sink(piece: str | None) -> None:
            if piece is None:
                emit(StreamEvent("restart", node, outputs))
            else:
                emit(StreamEvent("text", node, outputs, piece))

        gen = await runner.stream(call, sink if step.kind == "text" else None)
        if gen.media is not None or step.kind == "image":
            url = self.media_url(gen.media) if gen.media is not None else gen.output
            emit(StreamEvent("image", node, outputs, url=url))
        return gen

    def _runner(
        self, concurrency: int, limiter: AdaptiveLimiter | None = None, gate: Gate | None = None
    ) -> CallRunner:
        """Return the runner of one run's provider calls: this engine's cache, pacing, timeout,
        retries and token limit, at most ``concurrency`` calls at once (or ``limiter``'s limit,
        shared with other runs), each attempt also inside ``gate``."""
        return CallRunner(
            self.provider,
            concurrency=concurrency,
            cache=self.cache,
            pacer=self.pacer,
            timeout=self.timeout,
            retries=self.retries,
            limiter=limiter,
            gate=chain(self.tokens, gate),
        )

    async def stream_one(
        self,
        values: Mapping[str, str],
        emit: Emit,
        *,
        concurrency: int,
        on_result: OnResult | None = None,
        gate: Gate | None = None,
    ) -> RunResult:
        """Run one validated element, handing ``emit`` each node's text as its provider
        streams it and each image when it is ready (see
        :class:`~flownb.runtime.events.StreamEvent`);
        a node starts once the nodes it reads have finished. The calls are cached, retried,
        paced and limited as :meth:`run_async`'s (each attempt inside ``gate`` too: a spend
        cap), and stopped as its are: cancelled, the run lets
        its call in flight end, and ``on_result`` is told the element's outcome (as index 0)
        whether or not the caller is still there.

        Returns:
            The element's result, exactly as :meth:`run_async` reports it.

        Raises:
            The element's error, as :meth:`run_async` reports it (``InputError``,
            ``ProviderError`` naming the node, ...).
        """
        runner = self._runner(concurrency, gate=gate)

        async def run() -> RunResult:
            try:
                result = await self._run_element(values, runner, emit)
            except Exception as exc:
                if on_result is not None:
                    on_result(0, None, exc)
                raise
            if on_result is not None:
                on_result(0, result, None)
            return result

        element = asyncio.ensure_future(run())
        try:
            await finish(runner, (element,))
        finally:
            if runner.cache is not None:
                runner.cache.flush()
        return element.result()

    async def _run_element(
        self,
        values: Mapping[str, str],
        runner: CallRunner,
        emit: Emit | None = None,
        ahead: Ahead | None = None,
    ) -> RunResult:
        """Run one element; ``ahead``: some of its nodes' prompts and cache hits, found
        already (see :mod:`flownb.runtime.lookahead`)."""
        started = time.perf_counter()
        plan = self.plan
        # Cache hits are answered here, without a task or a wait each (a cached re-run).
        hits = emit is None and runner.cache is not None
        # The calls the cache lookups built for their misses, by step index: made as they are.
        made: dict[int, Call] = {}
        if len(plan.steps) == 1:  # nothing else to keep when the one node fails
            step = plan.steps[0]
            if hits:
                gens1: list[Any] = [None]
                if not self._answered((step,), values, gens1, runner, ahead, made):
                    return self.result_of(values, gens1, started)
            gen1 = await self._call(step, values, runner, emit, made.get(step.index))
            return self.result_of(values, [gen1], started)
        gens: list[Any] = [None] * len(plan.steps)
        failed: list[tuple[Step, Exception]] = []
        lost: set[int] = set()  # steps that failed, or did not run because an upstream one did
        for level in plan.levels:
            if lost:
                level = _not_lost(level, lost)
            if hits and level:
                level = self._answered(level, values, gens, runner, ahead, made)
            if not level:
                continue
            done: list[Any]
            if len(level) == 1:
                step = level[0]
                try:
                    call = made.get(step.index)
                    ctx = self._context(values, gens, step) if call is None else values
                    done = [await self._call(step, ctx, runner, emit, call)]
                except Exception as exc:
                    done = [exc]
            else:
                done = await _side_by_side(
                    [
                        self._call(s, self._context(values, gens, s), runner, emit)
                        if s.index not in made
                        else self._call(s, values, runner, emit, made[s.index])
                        for s in level
                    ],
                    runner,
                )
            _settle(level, done, gens, failed, lost)
        if failed:
            raise self._partial(values, gens, lost, failed, started)
        return self.result_of(values, gens, started)

    def _answered(
        self,
        level: Sequence[Step],
        values: Mapping[str, str],
        gens: list[Any],
        runner: CallRunner,
        ahead: Ahead | None = None,
        made: dict[int, Call] | None = None,
    ) -> tuple[Step, ...]:
        """Put into ``gens`` the answers the cache holds for ``level``'s steps (each with its
        time here as ``latency``); return the steps left to call (a miss, or a prompt that
        fails: its call reports the failure). ``ahead``: prompts and hits found already;
        ``made``: where a miss's call, built for its lookup, is put (by step index) to be made
        as it is, not rendered and built again."""
        left: list[Step] = []
        clock = time.perf_counter
        for step in level:
            begun = clock()
            prompt, gen = ahead.get(step.index, _UNKNOWN) if ahead else _UNKNOWN
            if gen is not None:  # looked up ahead: nothing more to do here
                gen.latency = clock() - begun
                gens[step.index] = gen
                continue
            if prompt is not None:
                # Not found by the bulk lookup just now: its call asks the cache again, when
                # that may have changed (CallRunner._answer), so nothing is looked up here.
                left.append(step)
                if made is not None:
                    made[step.index] = self.nodes[step.index].call(prompt)
                continue
            try:
                prompt = self._prompt(step, self._context(values, gens, step))
            except Exception:  # the call made for it raises it again, as its failure
                left.append(step)
                continue
            call = self.nodes[step.index].call(prompt)
            gen = runner.hit(call)
            if gen is None:
                left.append(step)
                if made is not None:
                    made[step.index] = call
                continue
            gen.latency = clock() - begun
            gens[step.index] = gen
        return tuple(left)

    def _partial(
        self,
        values: Mapping[str, str],
        gens: list[Any],
        lost: set[int],
        failed: list[tuple[Step, Exception]],
        started: float,
    ) -> Exception:
        """Return the error of a row where some nodes failed: the first failure, as
        :meth:`ProviderError.in_row` words it (naming the node(s), keeping as ``partial`` every
        output whose nodes all succeeded); any other exception as it is."""
        plan = self.plan
        first = failed[0][1]
        if not isinstance(first, ProviderError):
            return first
        names = [plan.trace_names[step.index] for step, _ in failed]
        if any(g is not None and g.finish_reason == "length" for g in gens):
            self._warn_cut(gens)
        media_url = self.media_url
        outputs: dict[str, str] = {}
        entries: list[tuple[str, str]] = []
        for name, srcs in plan.output_sources:
            if any(kind == "step" and ref in lost for kind, ref in srcs):
                continue
            value = "\n\n".join(
                (gens[ref].output if gens[ref].media is None else media_url(gens[ref].media))
                if kind == "step"
                else values[ref]
                for kind, ref in srcs
            )
            entries.append((name, value))
            outputs.setdefault(name, value)
        # Nothing kept (every output lost a node): the row has no result, only the error.
        partial = (
            make_result(
                outputs,
                entries,
                plan.output_kinds,
                self.provider.name,
                frozenset(),
                time.perf_counter() - started,
                gens,
                self.trace_of,
                plan,
                values,
            )
            if entries
            else None
        )
        return first.in_row(names, partial)

    async def run_async(
        self,
        batch: Sequence[Mapping[str, str]],
        on_result: OnResult,
        concurrency: int,
        *,
        limiter: AdaptiveLimiter | None = None,
        gate: Gate | None = None,
    ) -> None:
        """Run a validated batch; at most ``concurrency`` provider calls are in flight at once
        (fewer while the provider answers 429), retried, cached and paced as configured.
        ``limiter`` replaces this run's own limit by one shared with other runs.

        Each element's outcome goes to ``on_result`` as it finishes, so nothing finished is lost
        when the run is cancelled part-way; the cache is committed on the way out either way.
        Cancelled, the run starts nothing more but lets the calls it sent end first (they are
        billed): their elements are reported and their answers cached (see
        :func:`flownb.providers.inflight.finish`).
        ``gate`` is entered around each provider attempt after this engine's own token limit
        (a Dask run's cluster-wide limits come in here).
        """
        if not batch:
            return
        runner = self._runner(concurrency, limiter, gate)
        pending = elements(self, self.result_of, batch, runner, on_result)

        async def worker() -> None:
            for i, ahead in pending:  # one shared iterator: each index is taken exactly once
                if runner.stopping:  # stopped: no element starts any more
                    return
                try:
                    result = await self._run_element(batch[i], runner, None, ahead)
                except Exception as exc:
                    on_result(i, None, exc)
                else:
                    on_result(i, result, None)

        # More workers than slots: elements waiting out a retry's backoff hold no slot, and
        # the others keep every slot busy meanwhile.
        n_workers = min(len(batch), 2 * concurrency)
        # A call's objects die with it: the youngest generation is collected less often while
        # the calls are made (see flownb.infra.collector.young).
        with collector.young():
            workers = [asyncio.ensure_future(worker()) for _ in range(n_workers)]
            try:
                await finish(runner, workers)
            finally:
                if runner.cache is not None:
                    runner.cache.flush()


async def _side_by_side(
    calls: list[Coroutine[Any, Any, Generation]], runner: CallRunner
) -> list[Any]:
    """Run a level's ``calls`` at once, each to its end (a failure keeps its siblings'
    outputs), and return their outcomes in order: each a generation or the exception it
    raised, as ``asyncio.gather(..., return_exceptions=True)`` did.

    The first runs in this task and the others in tasks of their own, started in order (their
    requests go out in the level's order, as gather's did): for the usual level of two nodes
    that is one task where gather made two, and no gathering future with its callbacks (about
    a twentieth of a call's CPU against a local server).

    A stopped run (``runner.stop()``) ends the calls waiting to be sent by cancelling their
    tasks, and this task is the first call's: its cancellation is then that call's outcome, and
    the others still run to their end (a call in flight is billed: its answer is kept), as
    gather's children did. Any other cancellation of this task (an abandoned run, a caller
    that cancels it) cancels the others too.

    Raises:
        BaseException: this task was cancelled or interrupted (other than by a stop).
    """
    loop = asyncio.get_running_loop()
    others = [loop.create_task(c) for c in calls[1:]]
    outcomes: list[Any] = []
    try:
        try:
            outcomes.append(await calls[0])
        except asyncio.CancelledError as exc:
            if not runner.stopping or runner.abandoned:
                raise
            outcomes.append(exc)
        except Exception as exc:
            outcomes.append(exc)
        for task in others:
            try:
                outcomes.append(await task)
            except asyncio.CancelledError as exc:
                if not task.cancelled():
                    raise  # this task was cancelled, not the call's
                outcomes.append(exc)
            except Exception as exc:
                outcomes.append(exc)
    except BaseException:
        for task in others:
            task.cancel()
        raise
    return outcomes


def _not_lost(level: Sequence[Step], lost: set[int]) -> tuple[Step, ...]:
    """Return the steps of ``level`` that read no lost step, adding the others to ``lost``
    (a step that cannot run because an upstream one failed is lost too)."""
    ready = tuple(s for s in level if not lost.intersection(s.upstream))
    lost.update(s.index for s in level if s not in ready)
    return ready


def _settle(
    level: Sequence[Step],
    done: Sequence[Any],
    gens: list[Any],
    failed: list[tuple[Step, Exception]],
    lost: set[int],
) -> None:
    """Put each of ``level``'s outcomes (``done``, in step order) where it goes: a generation
    into ``gens``, a node's failure into ``failed`` (its step lost).

    Raises:
        BaseException: an outcome that is not a node's failure (cancelled, interrupted).
    """
    for step, gen in zip(level, done, strict=True):
        if isinstance(gen, Exception):
            failed.append((step, gen))
            lost.add(step.index)
        elif isinstance(gen, BaseException):
            raise gen  # cancelled or interrupted: not a node's failure
        else:
            gens[step.index] = gen
