"""What a loaded local flow is: :class:`LocalCore` runs a flow file in-process on a provider
(offline by default), with its spec, provider and endpoint, run configuration, cache and run
log (one :class:`~flownb.runtime.pipeline.Runner`), its call plan and its variants
(``with_params``, ``with_model``, ``with_endpoint``, ...); :func:`load_local` loads one.

The flow users hold, :class:`flownb.LocalFlow` (:func:`flownb.load_flow`), is this core with
the surface's features on top (:mod:`flownb.flows.local`); the server serves this same core
(:mod:`flownb.server.store`), and the judges run on it. Variants and copies keep the class they
were made from (``type(self)``), so a variant of the user's flow is again the user's flow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, Unpack

from ..config.options import RunOptions, check_run_options
from ..config.settings import RunConfig, resolve_run_config
from ..errors import ConfigError, FlowFileError
from ..flowfile import variants
from ..flowfile.drawing import run_notes, to_mermaid, to_svg
from ..flowfile.export import export_flow, with_extras
from ..flowfile.lint import warn_on_load
from ..flowfile.model import FlowGraph, extras_of, parse_flow, read_flow_file
from ..flowfile.validate import VariableSpec
from ..infra.media import MediaStore
from ..providers.base import Provider
from ..providers.limits import AdaptiveLimiter
from ..providers.registry import make_provider
from ..providers.repeat import unrepeated
from ..providers.spend import SpendCap, SpendGate, check_cappable
from ..providers.warmup import wait_warm_up
from ..runtime.engine import Plan
from ..runtime.events import StreamEvent
from ..runtime.notes import say_notes
from ..runtime.pipeline import assemble
from ..runtime.result import OnResult, RunResult
from .flow import FlowCore
from .spec import FlowSpec, flow_from_spec, spec_of

if TYPE_CHECKING:
    from ..config.endpoints import Endpoint
    from ..providers.calls import Gate

__all__ = ["LocalCore", "load_local", "local_of"]

L = TypeVar("L", bound="LocalCore")


class LocalCore(FlowCore):
    """A flow executed in-process by the engine.

    ``config`` holds every setting its runs depend on (see
    :func:`~flownb.config.settings.resolve_run_config`; :func:`load_flow` builds it); ``provider``
    is
    a provider instance, else the one ``config`` names. ``source`` is the exported JSON the
    graph came from, when known.

    Raises:
        ConfigError: the provider cannot be set up, or cannot run this flow (image nodes on a
            provider without images, model parameters it refuses).
    """

    in_process: ClassVar[bool] = True

    def __init__(
        self,
        graph: FlowGraph,
        *,
        name: str = "flow",
        config: RunConfig | None = None,
        provider: Provider | None = None,
        media_url: Callable[[str], str] | None = None,
        source: Mapping[str, Any] | None = None,
    ) -> None:
        config = config if config is not None else resolve_run_config()
        plan = Plan(graph)
        endpoint = config.endpoint
        if endpoint is not None and provider is None and not endpoint.bound:
            # The key is read once, now: copies of this flow keep it (see flownb.config.endpoints).
            endpoint = endpoint.bind()
            config = config.replace(endpoint=endpoint)
        if endpoint is not None and endpoint.images is False:
            # Declared, not discovered at run time: refused before any call is paid for.
            images = plan.image_nodes
            if images:
                raise ConfigError(
                    f"endpoint {endpoint.name!r} has no images (images=false), and this flow's "
                    f"image node{'s' * (len(images) > 1)} {', '.join(map(repr, images))} would "
                    "need it; run it on an endpoint that draws images"
                )
        if provider is None:
            provider = make_provider(config)
        self.name = name
        self.graph = graph
        # The exported JSON, kept so the flow can travel by value (pickling, Dask workers).
        self.source: dict[str, Any] = (
            dict(source) if source is not None else graph.model_dump(mode="json", by_alias=True)
        )
        self.config = config
        self.media_url = media_url
        self.plan = plan
        self.provider = provider
        self.concurrency = config.concurrency
        self.runner = assemble(
            plan,
            provider,
            config,
            name=name,
            media_url=media_url or MediaStore(config.media_dir).file_url,
        )
        self.engine = self.runner.engine
        self.runlog = self.runner.runlog

    @property
    def spec(self) -> VariableSpec:
        """The flow's variables, for validation."""
        return self.plan.spec

    def local(self) -> LocalCore:
        """Return this flow: it plans and runs its calls in this process."""
        return self

    def with_provider(self: L, provider: Provider, *, name: str | None = None) -> L:
        """Return this flow calling ``provider`` instead (the same graph, settings and media),
        named ``name`` (else this flow's name); this flow is left untouched."""
        return type(self)(
            self.graph,
            name=name or self.name,
            config=self.config,
            provider=provider,
            media_url=self.media_url,
            source=self.source,
        )

    def to_mermaid(self) -> str:
        """Return the flow drawn as a Mermaid ``flowchart LR`` (variables, generation nodes,
        outputs, and the edges between them)."""
        return to_mermaid(self.graph)

    def to_svg(self, result: RunResult | None = None) -> str:
        """Return the flow drawn as a self-contained SVG: variables with their defaults,
        generation nodes with kind and model (the prompt on hover), outputs. With ``result``
        (a run of this flow), each generation node that ran also shows its time, tokens and
        cost, or that the cache served it (see :func:`flownb.flowfile.drawing.run_notes`)."""
        values = result.inputs if result is not None else None
        return to_svg(self.graph, title=self.name, notes=self._run_notes(result), values=values)

    def _run_notes(self, result: RunResult | None) -> dict[str, str]:
        if result is None:
            return {}
        return run_notes([step.node_id for step in self.plan.steps], result.generations)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        # The picture as inline SVG in HTML, the type JupyterLab, Notebook 7, VS Code, nbconvert
        # and GitHub all rank first (JupyterLab ranks Markdown above image/svg+xml, so no
        # Markdown here); the SVG alone and Mermaid for tools that take those; the repr for
        # terminals and nbval's text comparison.
        from ..show.escape import no_math

        svg = self.to_svg()
        return {
            "text/html": no_math(svg, css="flownb-flow"),
            "image/svg+xml": svg,
            "text/vnd.mermaid": self.to_mermaid(),
            "text/plain": repr(self),
        }

    @property
    def outputs(self) -> list[str]:
        """The names of the outputs a run yields, in node order."""
        return list(self.plan.outputs)

    @property
    def defaults(self) -> dict[str, str]:
        """Each variable's default value as the web tool exported it."""
        return dict(self.plan.defaults)

    def say_notes(self) -> None:
        """Warn, once per provider and topic, about what this flow's requests drop, replace or
        cannot price (see :mod:`flownb.runtime.notes`), attributed to the caller's line."""
        say_notes(unrepeated(self.provider), self.plan.steps)

    def _execute(
        self, batch: Sequence[Mapping[str, str]], on_result: OnResult, concurrency: int | None
    ) -> None:
        self.runner.run(batch, on_result, concurrency=concurrency)

    async def _aexecute(
        self, batch: Sequence[Mapping[str, str]], on_result: OnResult, concurrency: int | None
    ) -> None:
        await self.runner.arun(batch, on_result, concurrency=concurrency)

    async def _stream_run(
        self, values: Mapping[str, str], emit: Callable[[StreamEvent], None]
    ) -> RunResult:
        """Run validated ``values`` once, passing ``emit`` each piece of text as the provider
        streams it and each image when ready; return the result (see Runner.stream_one)."""
        return await self.runner.stream_one(values, emit)

    def variant(self: L, graph: FlowGraph, *, name: str | None = None) -> L:
        """Return a new flow running ``graph`` with this flow's provider instance (its
        connection pool) and run configuration, named ``name`` (else this flow's name)."""
        return type(self)(
            graph,
            name=name or self.name,
            config=self.config,
            provider=self.provider,
            media_url=self.media_url,
            source=self._source_of(graph),
        )

    def _source_of(self, graph: FlowGraph) -> dict[str, Any]:
        """Return the exported JSON of ``graph``, a variant of this flow's: this flow's own
        JSON with the variant's prompts, parameters and system messages put in (every editor
        field kept; see :mod:`flownb.flowfile.export`)."""
        return self.source if graph is self.graph else export_flow(graph, self.source)

    def with_params(
        self: L, per_node: Mapping[str, Mapping[str, Any]] | None = None, /, **params: Any
    ) -> L:
        """Return a variant with other model parameters; this flow is left untouched.

        ``with_params(temperature=0.2)`` sets them on every generation node;
        ``with_params({"Intro": {"temperature": 0.2}})`` on the node of that name (or id).
        ``None`` removes a parameter. Cache keys follow the parameters, so nothing is shared.

        Raises:
            ConfigError: an unknown node (the message lists the choices), or bad parameters.
        """
        return self.variant(variants.with_params(self.graph, per_node, params))

    @property
    def endpoint(self) -> Endpoint | None:
        """The endpoint calls go to (``None``: the environment's ``OPENAI_*`` settings)."""
        return self.config.endpoint

    def with_endpoint(self: L, endpoint: Endpoint | str, model: str | None = None) -> L:
        """Return this flow on another endpoint (an :class:`~flownb.Endpoint`, or a name
        declared in ``flownb.toml``), with its own provider and connection pool; ``model``
        sets the model of every text node. This flow is left untouched.

        Raises:
            ConfigError: an unknown endpoint name, its key cannot be found, or it cannot run
                this flow (image nodes on ``images=False``).
        """
        # Settings this flow was given explicitly stay; the endpoint's own apply otherwise
        # (one rule for load_flow and this: RunConfig.on_endpoint).
        config = self.config.on_endpoint(endpoint)
        graph = self.graph
        if model is not None:
            from ..flowfile import variants

            graph = variants.with_model(graph, model, None)
        flow = type(self)(
            graph,
            name=self.name,
            config=config,
            media_url=self.media_url,
            source=self._source_of(graph),
        )
        if model is not None:
            flow.say_notes()  # the model was just chosen: say now what it sends, at this line
        return flow

    def with_model(
        self: L, model: str | Mapping[str, str] | None = None, *, image: str | None = None
    ) -> L:
        """Return a variant with other models: ``with_model("m")`` on every text node,
        ``with_model(image="m")`` on every image node, ``with_model({"Node": "m"})`` on the
        named nodes. This flow is left untouched; cache keys follow the model. What the new
        flow's requests drop, replace or cannot price (a model the price table does not know)
        is said now, as a warning at the caller's line.

        Raises:
            ConfigError: no model given, an unknown node, or a model that is not a string.
        """
        from ..flowfile import variants

        flow = self.variant(variants.with_model(self.graph, model, image))
        # The model was just chosen: a misspelt name is said at this line (and once: the run
        # says nothing more about it).
        flow.say_notes()
        return flow

    def with_system(self: L, system: str | Mapping[str, str | None] | None) -> L:
        """Return a variant whose text nodes send a system message: ``with_system("...")`` on
        every text node, ``with_system({"Node": "..."})`` on the named ones (``None`` removes
        it). It goes as the provider's system instruction, is part of the cache key and shows in
        previews. This flow is left untouched.

        Raises:
            ConfigError: an unknown node, an image node, or a message that is not a string.
        """
        from ..flowfile import variants

        return self.variant(variants.with_system(self.graph, system))

    def with_prompts(self: L, prompts: Mapping[str, str]) -> L:
        """Return a variant whose named nodes (name or id -> prompt) have other prompts, with
        the same ``{variable}`` rules; this flow is left untouched.

        Raises:
            ConfigError: an unknown node (the message lists the choices), or a non-string prompt.
        """
        return self.variant(variants.with_prompts(self.graph, prompts))

    def export(self, *, endpoint: bool = True) -> dict[str, Any]:
        """Return the flow in the web tool's export format (what :meth:`save` writes): the JSON
        it was loaded from, with a
        variant's models, parameters and prompts in the nodes' own fields and every editor
        field (ids, positions, edges) kept. What that format has no field for goes under its
        one ``"flownb"`` field, which the web tool ignores and :func:`load_flow` reads back:
        system messages, and (``endpoint=True``) the name of the ``flownb.toml`` endpoint the
        flow runs on — never a key or a URL (an endpoint the environment made, from
        ``OPENAI_BASE_URL`` and the like, is not named: the environment gives it again).

        Raises:
            ConfigError: the flow runs on an endpoint that no ``flownb.toml`` declares as it is
                (a saved flow can only name it; declare it, or pass ``endpoint=False``).
        """
        chosen = self.config.endpoint if endpoint else None
        if chosen is None or chosen.from_environment:  # the environment gives it again
            return with_extras(self.source, endpoint=None)
        from ..config.endpoints import load_endpoints

        declared = load_endpoints(Path.cwd(), self.config.home).get(chosen.name)
        if declared is None or declared.identity() != chosen.identity():
            raise ConfigError(
                f"this flow runs on endpoint {chosen.name!r}, which no flownb.toml declares as "
                "it is; a saved flow names its endpoint (never a key or a URL): declare "
                f"[endpoints.{chosen.name}] in flownb.toml, or save with endpoint=False"
            )
        return with_extras(self.source, endpoint=chosen.name)

    async def arun_each(
        self,
        batch: Sequence[Mapping[str, str]],
        on_result: OnResult,
        *,
        concurrency: int | None = None,
        limiter: AdaptiveLimiter | None = None,
        gate: Gate | None = None,
    ) -> None:
        """Run an already-validated batch on the caller's loop, reporting each element to
        ``on_result`` as it ends (and to the run log, as :meth:`run_batch` does). ``limiter``
        shares one concurrency limit with other runs on the same endpoint, ``gate`` is entered
        around each provider attempt (an evaluation's bound over every endpoint; see
        :func:`flownb.evaluate`)."""
        await self.runner.arun(
            batch, on_result, concurrency=concurrency, limiter=limiter, gate=gate
        )

    def run_gated(
        self,
        batch: Sequence[Mapping[str, str]],
        on_result: OnResult,
        concurrency: int | None,
        *,
        gate: Gate | None = None,
        run_id: str | None = None,
    ) -> None:
        """Run an already-validated batch with an extra ``gate`` around each provider attempt
        and the run log's ``run_id`` for it (a Dask partition's cluster-wide limits, per-run
        rpm/tpm), reporting each element to ``on_result``."""
        self.say_notes()
        self.runner.run(batch, on_result, concurrency=concurrency, gate=gate, run_id=run_id)

    def gated(self, gate: Gate | None, run_id: str | None = None) -> FlowCore:
        """Return a view of this flow whose runs enter ``gate`` around each provider attempt
        and log under ``run_id`` (the engine and its caches are shared, nothing is copied)."""
        return _GatedFlow(self, gate, run_id)

    def spend_gate(self, cap: SpendCap, *, batch: bool = False) -> Gate:
        """Return the gate that keeps this flow's calls within ``cap`` (see
        :mod:`flownb.providers.spend`); ``batch``: at the batch API's price.

        Raises:
            ConfigError: some node's calls cannot be bounded (no price, no output limit):
                nothing is sent.
        """
        nodes = {s.name: (s.kind, s.params, s.system) for s in self.plan.steps}
        check_cappable(self.provider, nodes, batch=batch)
        return SpendGate(cap, self.provider, batch=batch)

    def to_spec(self, **changes: Any) -> FlowSpec:
        """Return the flow as a small picklable :class:`~flownb.core.spec.FlowSpec` (its JSON,
        name, provider name and run knobs; never a key), with ``changes`` applied.

        Raises:
            ConfigError: the provider is an instance that cannot be rebuilt from its name.
        """
        return spec_of(self, **changes)

    @classmethod
    def from_spec(cls: type[L], spec: FlowSpec) -> L:
        """Return a new flow from ``spec`` (prefer :func:`~flownb.core.spec.flow_from_spec`,
        which reuses one). The OpenAI key, if the provider needs one, comes from this process's
        environment.

        Raises:
            FlowFileError: the JSON is not a valid flow.
            ConfigError: the provider cannot be set up here (e.g. no OpenAI key in this
                process's environment).
        """
        here = resolve_run_config(local=False)
        config = spec.config.replace(
            openai_api_key=here.openai_api_key, vendors=spec.config.vendors.keys_from(here.vendors)
        )
        return cls(
            parse_flow(spec.flow, spec.name), name=spec.name, config=config, source=spec.flow
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # By value: the spec, rebuilt (once per process) on the other side. Threads, sockets
        # and SQLite handles never travel.
        return (flow_from_spec, (self.to_spec(), type(self).from_spec))

    def __copy__(self: L) -> L:
        # A shallow copy shares the engine, as it did before pickling went by spec.
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self: L, memo: dict[int, Any]) -> L:
        # A deep copy is a flow of its own (fresh engine), not the process's shared one.
        return type(self).from_spec(self.to_spec())


def load_local(
    source: str | Path | Mapping[str, Any],
    *,
    name: str | None = None,
    provider: Provider | str | None = None,
    ready: bool = True,
    flow_class: type[LocalCore] = LocalCore,
    **options: Unpack[RunOptions],
) -> LocalCore:
    """Load an exported flow (a path to its JSON file, or the decoded JSON) for local runs, as
    a ``flow_class``: what :func:`flownb.load_flow` does (its arguments are described there),
    which passes :class:`flownb.LocalFlow`; the judges run this core as it is.

    Returns:
        A ``flow_class`` (:class:`LocalCore` by default).

    Raises:
        FlowFileError: the file is missing, not JSON, or not a valid graph.
        ConfigError: the provider or endpoint cannot be set up (unknown name, missing key,
            image nodes on an endpoint without images).
        TypeError: an option that is not a run setting.
    """
    check_run_options(dict(options), "load_flow")  # named as users call it
    if isinstance(source, Mapping):
        name = name or "flow"
        graph, data = parse_flow(source, name), source
    else:
        try:
            data = read_flow_file(source)
        except FileNotFoundError:
            raise FlowFileError(f"{source}: no such flow file") from None
        graph = parse_flow(data, str(source))
        warn_on_load(graph, str(source))
        name = name or Path(source).stem
    saved = extras_of(data).get("endpoint")
    if (
        saved is not None
        and provider is None
        and not (options.get("endpoint") or options.get("base_url"))
    ):
        # A saved flow names the endpoint it was chosen on (flow.save): it runs there unless
        # this call says where, and before FLOWNB_ENDPOINT (the flow's own choice is nearer).
        options["endpoint"] = saved
    config = resolve_run_config(provider=provider if isinstance(provider, str) else None, **options)
    flow = flow_class(
        graph,
        name=name,
        config=config,
        provider=provider if isinstance(provider, Provider) else None,
        source=data,
    )
    if ready and not isinstance(provider, Provider):
        # The modules the provider's calls need, imported in the background since it was
        # made, are finished now, beside the loading, not by the first run as its calls wait
        # (see flownb.providers.warmup).
        wait_warm_up()
    return flow


class _GatedFlow(FlowCore):
    """A :class:`LocalCore` seen through a gate and a run id (see :meth:`LocalCore.gated`).
    Features see a view, not the flow (:meth:`local` is ``None``): every row goes through
    :meth:`_execute`, so through the gate."""

    def __init__(self, flow: LocalCore, gate: Gate | None, run_id: str | None) -> None:
        self.flow = flow
        self.name = flow.name
        self.gate = gate
        self.run_id = run_id

    @property
    def spec(self) -> VariableSpec:
        """The flow's variables, for validation."""
        return self.flow.spec

    @property
    def outputs(self) -> list[str]:
        """The names of the outputs a run yields, in node order."""
        return self.flow.outputs

    def _execute(
        self, batch: Sequence[Mapping[str, str]], on_result: OnResult, concurrency: int | None
    ) -> None:
        self.flow.run_gated(batch, on_result, concurrency, gate=self.gate, run_id=self.run_id)

    async def _aexecute(
        self, batch: Sequence[Mapping[str, str]], on_result: OnResult, concurrency: int | None
    ) -> None:
        await self.flow.runner.arun(batch, on_result, concurrency=concurrency, gate=self.gate)

    async def _stream_run(
        self, values: Mapping[str, str], emit: Callable[[StreamEvent], None]
    ) -> RunResult:
        return await self.flow.runner.stream_one(values, emit, gate=self.gate)

    def open_bar(self, batch: Sequence[Mapping[str, Any]]) -> Any:
        """The flow's own bar (the live view, for the surface's flows)."""
        return self.flow.open_bar(batch)

    def frame_slot(self, labels: Sequence[Any]) -> Any:
        """The flow's own slot for the returned frame."""
        return self.flow.frame_slot(labels)


def local_of(flow: FlowCore) -> LocalCore | None:
    """Return ``flow`` as the local core it runs on when it plans and runs its calls in this
    process (what :meth:`FlowCore.local` answers), else ``None`` (a flow on a flow service, a
    gated view). What a feature asks instead of a flow's class."""
    found = flow.local()
    return found if isinstance(found, LocalCore) else None
