"""The result of one run: a ``dict`` of output name -> output string, with run metadata and a
rich notebook display.

It is a real ``dict`` (JSON-serialisable, compares equal to a plain dict) so users can treat it
as one; the metadata lives in attributes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..config.pricing import Money
from ..show.display import display_result, result_bundle, result_text

__all__ = ["OnResult", "RunResult", "make_result", "report_all"]

# A remote run's money: the service does not say.
_UNKNOWN = Money(math.nan, math.nan, math.nan, 0, 0)


class RunResult(dict[str, str]):
    """Output name -> output (text, or the URL of an image).

    Attributes:
        entries: every output node's ``(name, output)`` in node order (the contract's run
            items; differs from the dict only when two output nodes share a name).
        kinds: output name -> ``"text"`` or ``"image"``.
        provider: the provider that ran ("offline", "openai", or "remote").
        cached: names of the outputs served from the cache without a provider call.
        latency: seconds the run took.
        truncated: the nodes whose answer stopped at the token limit (see the property).
        cost: US dollars this run spent on provider calls (0 when everything came from the
            cache, or offline). ``cache_saving``: what the cached outputs cost when they were
            bought. ``price``: the run's list price, every call at what it cost when bought,
            cached or not (the same on every re-run). ``unpriced``: calls without a known price,
            left out of those sums (then lower bounds); each is NaN only when none of its calls
            has a price.
    """

    # Instance attributes on a dict subclass: declared, so typos fail loudly.
    __slots__ = (
        "_costs",
        "_entries",
        "_inputs",
        "_plan",
        "_trace_of",
        "cached",
        "generations",
        "kinds",
        "latency",
        "provider",
    )

    def __init__(
        self,
        outputs: Mapping[str, str],
        *,
        entries: Sequence[tuple[str, str]] | None = None,
        kinds: Mapping[str, str] | None = None,
        provider: str = "",
        cached: frozenset[str] = frozenset(),
        latency: float = 0.0,
        generations: Sequence[Any] = (),
    ) -> None:
        super().__init__(outputs)
        self._entries = list(entries) if entries is not None else None
        self.kinds = kinds if kinds is not None else {}
        self.provider = provider
        self.cached = cached
        self.latency = latency
        self.generations = generations
        self._trace_of: tuple[Sequence[str], Callable[[str], str]] | None = None
        self._costs: Money | None = None
        self._plan: Any = None
        self._inputs: Mapping[str, str] | None = None

    @property
    def inputs(self) -> dict[str, str]:
        """The variables this run was given (name -> value); empty when not known (a remote
        run, or a result rebuilt from a pickle)."""
        return dict(self._inputs or {})

    def _money(self) -> Money:
        if self._costs is None:
            if not self.generations:  # remote runs: the service does not say
                return _UNKNOWN
            from ..config.pricing import money_of

            self._costs = money_of(self.provider, self.generations)
        return self._costs

    @property
    def money(self) -> Money:
        """The run's :class:`~flownb.config.pricing.Money`: spent, saved, price, unpriced."""
        return self._money()

    @property
    def cost(self) -> float:
        """US dollars this run spent on provider calls (the priced ones when some have no
        price: see :attr:`unpriced`; NaN when none has)."""
        return self._money().spent

    @property
    def cache_saving(self) -> float:
        """US dollars the outputs served from the cache cost when they were bought."""
        return self._money().saved

    @property
    def price(self) -> float:
        """US dollars this run's calls cost when they were bought, cached or not: its list
        price, the same on every re-run (NaN when none has a known price)."""
        return self._money().price

    @property
    def unpriced(self) -> int:
        """How many of this run's calls have no known price (left out of the sums)."""
        return self._money().unpriced

    @property
    def trace(self) -> dict[str, str]:
        """Every generation node that ran: node name -> its output (text, or image URL), in
        run order; intermediate nodes included. Empty for remote runs (the service keeps them).
        """
        if self._trace_of is None:
            return {}
        names, media_url = self._trace_of
        return {
            name: g.output if g.media is None else media_url(g.media)
            for name, g in zip(names, self.generations, strict=True)
            if g is not None  # a node that failed or did not run (a partly failed row)
        }

    def to_svg(self) -> str:
        """Return the picture of the flow that made this run (as ``flow.to_svg()``) with each
        generation node that ran annotated: its time, tokens and cost (``1.24 s · 340 tok ·
        $0.0012``), or ``cached`` and what the cache saved. The figures are
        :attr:`generations`' (``latency``, ``usage``, ``cost``), in :attr:`trace` order.

        Raises:
            ConfigError: the run came from a remote flow (the service keeps its nodes).
        """
        from ..flowfile.drawing import run_notes, to_svg

        plan = self._plan
        if plan is None:
            from ..errors import ConfigError

            raise ConfigError(
                "this run's picture needs its flow's nodes; a remote run reports only outputs"
            )
        node_ids = [step.node_id for step in plan.steps]
        return to_svg(
            plan.graph,
            title="flow run: time, tokens and cost per node",
            notes=run_notes(node_ids, self.generations),
            values=self._inputs,
        )

    def trace_picture(self) -> Any:
        """Return :meth:`to_svg`'s picture ready to show: a notebook draws the SVG; a terminal
        prints one line per node that ran (its name, then the figures).

        Raises:
            ConfigError: as :meth:`to_svg`.
        """
        from ..flowfile.drawing import Picture, run_notes

        svg = self.to_svg()
        plan = self._plan
        notes = run_notes([step.node_id for step in plan.steps], self.generations)
        lines = [
            f"{name}: {notes[step.node_id]}"
            for name, step in zip(plan.trace_names, plan.steps, strict=True)
            if step.node_id in notes
        ]
        return Picture(svg, "\n".join(lines) or "(no node ran)")

    @property
    def truncated(self) -> tuple[str, ...]:
        """The nodes whose text stopped at the token limit (``finish_reason: length``): kept,
        but cut short. Empty when none was (and for remote runs)."""
        if self._trace_of is None:
            return ()
        # Asked of every row by run_dataframe: the common answer (nothing cut) without a zip.
        for g in self.generations:
            if g is not None and g.finish_reason == "length":
                break
        else:
            return ()
        names = self._trace_of[0]
        return tuple(
            name
            for name, g in zip(names, self.generations, strict=True)
            if g is not None and g.finish_reason == "length"
        )

    @property
    def entries(self) -> list[tuple[str, str]]:
        """Every output node's ``(name, output)``, in node order."""
        return self._entries if self._entries is not None else list(self.items())

    def to_items(self) -> list[dict[str, str]]:
        """Return the contract's run response for this run: one item per output node."""
        return [{"name": n, "output": o, "type": "output"} for n, o in self.entries]

    def is_image(self, name: str) -> bool:
        """Return whether output ``name`` is an image URL."""
        return self.kinds.get(name) == "image"

    def __repr__(self) -> str:
        return f"RunResult({dict.__repr__(self)})"

    def __str__(self) -> str:
        return result_text(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return result_bundle(self)

    def _ipython_display_(self) -> None:
        # One display per output (a named Markdown block, or an embedded image), which renders
        # images even where a notebook's sanitizer would strip data URLs from Markdown.
        display_result(self)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle as a plain dict plus attributes; the default dict-subclass path drops slots.
        return (
            _rebuild,
            (
                dict(self),
                self.entries,
                dict(self.kinds),
                self.provider,
                self.cached,
                self.latency,
                self._money(),
            ),
        )


def _rebuild(
    outputs: dict[str, str],
    entries: list[tuple[str, str]],
    kinds: dict[str, str],
    provider: str,
    cached: frozenset[str],
    latency: float,
    costs: Money | tuple[float, float] | None = None,
) -> RunResult:
    result = RunResult(
        outputs, entries=entries, kinds=kinds, provider=provider, cached=cached, latency=latency
    )
    if isinstance(costs, tuple):  # pickled before prices were kept
        spent, saved = costs
        costs = Money(spent, saved, math.nan, 0, 0)
    result._costs = costs
    return result


# Called as each element of a batch finishes: (index, result, None) or (index, None, exception).
OnResult = Callable[[int, RunResult | None, BaseException | None], None]


def report_all(on_result: OnResult, indexes: Sequence[int], results: Sequence[RunResult]) -> None:
    """Report elements ``indexes`` as finished with ``results`` (in that order): in one call
    to ``on_result.many(indexes, results)`` when it has that method (a run's observers, the
    run log's recorder, a batch's collector: one lock and one append for a chunk of cached
    rows), else one ``on_result(i, result, None)`` per element."""
    many = getattr(on_result, "many", None)
    if many is not None:
        many(indexes, results)
        return
    for i, result in zip(indexes, results, strict=True):
        on_result(i, result, None)


_new = dict.__new__


def make_result(
    outputs: Mapping[str, str],
    entries: list[tuple[str, str]] | None,
    kinds: Mapping[str, str],
    provider: str,
    cached: frozenset[str],
    latency: float,
    generations: Sequence[Any],
    trace_of: tuple[Sequence[str], Callable[[str], str]] | None = None,
    plan: Any = None,
    inputs: Mapping[str, str] | None = None,
) -> RunResult:
    """Return a :class:`RunResult` without keyword parsing: the engine's per-row constructor.

    ``entries`` is None when it would equal the dict's own items (unique output names);
    ``trace_of`` is the plan's node names and the media URL maker, for :attr:`RunResult.trace`;
    ``plan`` the engine's plan, for :meth:`RunResult.to_svg`; ``inputs`` the run's variables
    (drawn on the picture's variables).
    """
    result = _new(RunResult)
    result.update(outputs)
    result._entries = entries
    result.kinds = kinds
    result.provider = provider
    result.cached = cached
    result.latency = latency
    result.generations = generations
    result._trace_of = trace_of
    result._costs = None
    result._plan = plan
    result._inputs = inputs
    return result
