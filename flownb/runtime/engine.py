"""Planning and executing a flow.

:class:`Plan` is computed once per flow: the variables and outputs in node order, and the
generation nodes that feed an output (only those run), grouped into levels so that independent
nodes of one run execute concurrently.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, InputError, Problem, ProviderError
from ..flowfile.model import ActionNode, FlowGraph, ImageNode, OutputNode, VariableNode
from ..flowfile.template import Template
from ..flowfile.validate import VariableSpec
from ..infra import tracing
from ..providers.base import Call, Generation, Kind, Provider
from ..providers.calls import CallRunner, Gate
from ..providers.limits import AdaptiveLimiter, Pacer
from ..providers.tokens import TokenGate, chain
from .events import StreamEvent
from .result import OnResult, RunResult, make_result

if TYPE_CHECKING:
    from .cache import CallCache

__all__ = ["Engine", "Plan", "Step", "prompt_problem"]

MediaUrl = Callable[[str], str]
# Where a streamed run's events go, as they happen (see Engine.stream_one).
Emit = Callable[[StreamEvent], None]


@dataclass(frozen=True, slots=True)
class Step:
    """One generation node that runs: where its prompt's values come from and what it calls."""

    index: int
    node_id: str
    name: str
    kind: Kind
    template: Template
    params: Mapping[str, Any]
    upstream: tuple[int, ...]  # indices of steps whose outputs this prompt may use
    system: str | None = None  # the node's system message (flow.with_system)


class Plan:
    """What running a flow means: which nodes run, in which order, and what each output joins."""

    def __init__(self, graph: FlowGraph) -> None:
        self.graph = graph  # what a run's picture draws (RunResult.to_svg)
        nodes = {n.id: n for n in graph.nodes}
        var_nodes = [n for n in graph.nodes if isinstance(n, VariableNode)]
        self.variables: tuple[str, ...] = tuple(
            dict.fromkeys(n.data.variable.label for n in var_nodes)
        )
        defaults: dict[str, str] = {}
        for n in var_nodes:
            defaults.setdefault(n.data.variable.label, n.data.variable.value)
        self.defaults = defaults
        out_nodes = [n for n in graph.nodes if isinstance(n, OutputNode)]
        self.outputs: tuple[str, ...] = tuple(n.data.name for n in out_nodes)

        incoming: dict[str, list[str]] = {n: [] for n in nodes}
        for edge in graph.edges:
            incoming[edge.target].append(edge.source)

        needed = _needed(nodes, incoming, out_nodes)
        order, depth = _ordered(graph, needed, incoming)
        index = {node_id: i for i, node_id in enumerate(order)}
        steps = _steps(graph, order, needed, incoming, index, self.variables)
        self.steps: tuple[Step, ...] = tuple(steps)
        self.trace_names: tuple[str, ...] = _trace_names(steps)
        levels: dict[int, list[Step]] = {}
        for step in steps:
            levels.setdefault(depth[step.node_id], []).append(step)
        self.levels: tuple[tuple[Step, ...], ...] = tuple(tuple(levels[d]) for d in sorted(levels))
        self.chained = any(step.upstream for step in steps)

        sources, kinds = _output_sources(nodes, incoming, out_nodes, index, steps)
        self.output_sources = tuple(sources)
        self.direct: tuple[tuple[str, int], ...] | None = _direct(sources)
        self.output_kinds: Mapping[str, str] = kinds
        self.spec = VariableSpec(self.variables)
        # The image nodes that run, by name (else id): what a provider or endpoint without
        # images refuses at load.
        self.image_nodes = [s.name or s.node_id for s in steps if s.kind == "image"]


def _needed(
    nodes: Mapping[str, Any], incoming: Mapping[str, list[str]], out_nodes: list[OutputNode]
) -> set[str]:
    """Return the generation nodes an output depends on (directly or through other nodes):
    only these run."""
    needed: set[str] = set()
    stack = [src for o in out_nodes for src in incoming[o.id]]
    while stack:
        node_id = stack.pop()
        if node_id not in needed and isinstance(nodes[node_id], ActionNode | ImageNode):
            needed.add(node_id)
            stack.extend(incoming[node_id])
    return needed


def _ordered(
    graph: FlowGraph, needed: set[str], incoming: Mapping[str, list[str]]
) -> tuple[list[str], dict[str, int]]:
    """Return the needed nodes in run order (by depth, export order within a level) and each
    one's depth: the longest chain of needed generation nodes above it."""
    # Iterative: flows can be deep. The graph is acyclic: parse_flow refused cycles.
    order = [n.id for n in graph.nodes if n.id in needed]
    ups = {n: [u for u in incoming[n] if u in needed] for n in order}
    depth: dict[str, int] = {}
    for root in order:
        stack = [root]
        while stack:
            node_id = stack[-1]
            if node_id in depth:
                stack.pop()
                continue
            todo = [u for u in ups[node_id] if u not in depth]
            if todo:
                stack.extend(todo)
            else:
                depth[node_id] = 1 + max((depth[u] for u in ups[node_id]), default=-1)
                stack.pop()
    order.sort(key=depth.__getitem__)  # stable: export order kept within a level
    return order, depth


def _steps(
    graph: FlowGraph,
    order: list[str],
    needed: set[str],
    incoming: Mapping[str, list[str]],
    index: Mapping[str, int],
    variables: tuple[str, ...],
) -> list[Step]:
    """Return one :class:`Step` per needed generation node, in run order."""
    generators = {
        n.id: n for n in graph.nodes if n.id in needed and isinstance(n, ActionNode | ImageNode)
    }
    steps = []
    for i, node_id in enumerate(order):
        node = generators[node_id]
        upstream = tuple(index[u] for u in incoming[node_id] if u in needed)
        labels = [*variables, *(generators[order[u]].data.name for u in upstream)]
        steps.append(
            Step(
                index=i,
                node_id=node_id,
                name=node.data.name,
                kind="image" if isinstance(node, ImageNode) else "text",
                template=Template(node.data.prompt, labels),
                params=node.data.modelParams.as_dict(),
                upstream=upstream,
                system=node.data.system or None,
            )
        )
    return steps


def _trace_names(steps: list[Step]) -> tuple[str, ...]:
    """Return the key of each step's output in ``RunResult.trace``: its node name (its id when
    the name is empty or shared by another running node)."""
    counts: dict[str, int] = {}
    for step in steps:
        counts[step.name] = counts.get(step.name, 0) + 1
    return tuple(
        s.name if s.name and counts[s.name] == 1 else f"{s.name or 'node'} [{s.node_id}]"
        for s in steps
    )


def _output_sources(
    nodes: Mapping[str, Any],
    incoming: Mapping[str, list[str]],
    out_nodes: list[OutputNode],
    index: Mapping[str, int],
    steps: list[Step],
) -> tuple[list[tuple[str, tuple[tuple[str, Any], ...]]], dict[str, str]]:
    """Return what each output joins, in edge order (``("var", label)`` or ``("step", index)``),
    and each output's kind (an image when every source is an image step)."""
    sources: list[tuple[str, tuple[tuple[str, Any], ...]]] = []
    kinds: dict[str, str] = {}
    for o in out_nodes:
        srcs: list[tuple[str, Any]] = []
        for src_id in incoming[o.id]:
            src = nodes[src_id]
            if isinstance(src, VariableNode):
                srcs.append(("var", src.data.variable.label))
            else:
                srcs.append(("step", index[src_id]))
        sources.append((o.data.name, tuple(srcs)))
        is_image = bool(srcs) and all(
            kind == "step" and steps[ref].kind == "image" for kind, ref in srcs
        )
        kinds.setdefault(o.data.name, "image" if is_image else "text")
    return sources, kinds


def _direct(
    sources: list[tuple[str, tuple[tuple[str, Any], ...]]],
) -> tuple[tuple[str, int], ...] | None:
    """Return ``(output, step index)`` pairs when every output is fed by exactly one node and
    names are unique (the usual export: a result is then one dict comprehension), else None."""
    names = [name for name, _ in sources]
    if len(set(names)) == len(names) and all(
        len(srcs) == 1 and srcs[0][0] == "step" for _, srcs in sources
    ):
        return tuple((name, srcs[0][1]) for name, srcs in sources)
    return None


def _step_outputs(plan: Plan) -> tuple[tuple[str, ...], ...]:
    """Return, per step, the names of the outputs it feeds directly (for stream events)."""
    found: list[list[str]] = [[] for _ in plan.steps]
    for name, srcs in plan.output_sources:
        for kind, ref in srcs:
            if kind == "step" and name not in found[ref]:
                found[ref].append(name)
    return tuple(tuple(names) for names in found)


def prompt_problem(
    step: Step, size: int, limit: int, values: Mapping[str, str], index: int | None = None
) -> Problem:
    """Return the problem of ``step``'s prompt being ``size`` characters, over ``limit``: it
    names the node, both numbers and the longest variable the prompt uses (never a value)."""
    used = [name for name in step.template.names if name in values]
    longest = max(used, key=lambda name: len(values[name]), default=None)
    where = "" if index is None else f"element {index}: "
    blame = (
        f" (variable {longest!r} is {len(values[longest]):,} characters)"
        if longest is not None
        else ""
    )
    return Problem(
        "prompt_too_long",
        f"{where}the {step.kind} prompt of node {step.name or step.node_id!r} would be "
        f"{size:,} characters, over the limit of {limit:,} for {step.kind} prompts{blame}; "
        "shorten the variable values",
        index,
        longest,
    )


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

    # -- assembling a result ------------------------------------------------------------------

    def _result(
        self, values: Mapping[str, str], gens: list[Generation], started: float
    ) -> RunResult:
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
                cached = frozenset(
                    name
                    for name, srcs in plan.output_sources
                    if srcs and all(kind == "step" and gens[ref].cached for kind, ref in srcs)
                )
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
        prompt = step.template.render(ctx)
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
            (s.kind, s.template.render, s.params, s.node_id, self.limits[s.index], s) for s in steps
        ]
        result = self._result
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
                        call = Call(
                            step.kind,
                            self._prompt(step, ctx),
                            step.params,
                            step.node_id,
                            step.system,
                        )
                        gen = generate(call)
                        # The node's own time (its prompt's rendering included), for its
                        # picture: one clock read per node, from the previous node's end.
                        now = clock()
                        gen.latency, begun = now - begun, now
                        gens[step.index] = gen
                else:
                    gens = []
                    for kind, render, params, node_id, limit, step in calls:
                        prompt = render(values)
                        if len(prompt) > limit:  # measured before the provider does any work
                            raise InputError([prompt_problem(step, len(prompt), limit, values)])
                        gen = generate(Call(kind, prompt, params, node_id, step.system))
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
        self, step: Step, ctx: Mapping[str, str], runner: CallRunner, emit: Emit | None = None
    ) -> Generation:
        """Return the node's generation, its ``latency`` set to the node's time here (waits for
        a slot, retries and the cache included: what the node cost this run); with ``emit``,
        its text handed to ``emit`` as the provider streams it, and its image when ready."""
        begun = time.perf_counter()
        call = Call(step.kind, self._prompt(step, ctx), step.params, step.node_id, step.system)
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
        self, values: Mapping[str, str], emit: Emit, *, concurrency: int
    ) -> RunResult:
        """Run one validated element, handing ``emit`` each node's text as its provider
        streams it and each image when it is ready (see
        :class:`~flownb.runtime.events.StreamEvent`);
        a node starts once the nodes it reads have finished. The calls are cached, retried,
        paced and limited as :meth:`run_async`'s.

        Returns:
            The element's result, exactly as :meth:`run_async` reports it.

        Raises:
            The element's error, as :meth:`run_async` reports it (``InputError``,
            ``ProviderError`` naming the node, ...).
        """
        runner = self._runner(concurrency)
        try:
            return await self._run_element(values, runner, emit)
        finally:
            if runner.cache is not None:
                runner.cache.flush()

    async def _run_element(
        self, values: Mapping[str, str], runner: CallRunner, emit: Emit | None = None
    ) -> RunResult:
        started = time.perf_counter()
        plan = self.plan
        if len(plan.steps) == 1:  # nothing else to keep when the one node fails
            step = plan.steps[0]
            return self._result(values, [await self._call(step, values, runner, emit)], started)
        gens: list[Any] = [None] * len(plan.steps)
        failed: list[tuple[Step, Exception]] = []
        lost: set[int] = set()  # steps that failed, or did not run because an upstream one did
        for level in plan.levels:
            if lost:
                ready = tuple(s for s in level if not lost.intersection(s.upstream))
                lost.update(s.index for s in level if s not in ready)
                level = ready
            if not level:
                continue
            done: list[Any]
            if len(level) == 1:
                step = level[0]
                try:
                    ctx = self._context(values, gens, step)
                    done = [await self._call(step, ctx, runner, emit)]
                except Exception as exc:
                    done = [exc]
            else:
                # Every node of a level runs to its end: a failure keeps its siblings' outputs.
                done = await asyncio.gather(
                    *(self._call(s, self._context(values, gens, s), runner, emit) for s in level),
                    return_exceptions=True,
                )
            for step, gen in zip(level, done, strict=True):
                if isinstance(gen, Exception):
                    failed.append((step, gen))
                    lost.add(step.index)
                elif isinstance(gen, BaseException):
                    raise gen  # cancelled or interrupted: not a node's failure
                else:
                    gens[step.index] = gen
        if failed:
            raise self._partial(values, gens, lost, failed, started)
        return self._result(values, gens, started)

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
        ``gate`` is entered around each provider attempt after this engine's own token limit
        (a Dask run's cluster-wide limits come in here).
        """
        if not batch:
            return
        runner = self._runner(concurrency, limiter, gate)
        pending = iter(range(len(batch)))

        async def worker() -> None:
            for i in pending:  # one shared iterator: each index is taken exactly once
                try:
                    result = await self._run_element(batch[i], runner)
                except Exception as exc:
                    on_result(i, None, exc)
                else:
                    on_result(i, result, None)

        # More workers than slots: elements waiting out a retry's backoff hold no slot, and
        # the others keep every slot busy meanwhile.
        n_workers = min(len(batch), 2 * concurrency)
        try:
            await asyncio.gather(*(worker() for _ in range(n_workers)))
        finally:
            if runner.cache is not None:
                runner.cache.flush()
