"""Previewing a run before paying for it: the prompts each call would send, how many provider
calls would be made (cache hits and repeats excluded), an estimate of their tokens and an
estimate of what they would cost. Nothing here calls a provider.

Estimates, not quotes: prompt tokens are ``ceil(characters / 4)``, each text call is assumed to
write its node's ``max_tokens`` (or :data:`~flownb.config.pricing.ESTIMATE_OUTPUT_TOKENS`), and the
price is the table's (or the endpoint's ``prices``) for the model the provider would send.
Image calls are priced per image where :mod:`flownb.config.image_prices` knows the model;
others, judges without a known model and remote flows are not priced (NaN, shown ``-``).

A prompt that uses an upstream node's output is rendered with that output when the upstream
call is cached, else with a ``«output of NODE»`` placeholder (and counted as a call).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..config.pricing import BATCH_RATE
from ..core.local import LocalCore, local_of
from ..providers.images import image_tokens
from ..providers.offline import OfflineProvider
from ..providers.repeat import unrepeated
from ..runtime.plan import step_calls
from ..scorers import Scorer
from ..scorers.judge import JudgeScorer, PickBest
from .run import rows_to_variables

if TYPE_CHECKING:
    import pandas as pd

    from ..core.flow import FlowCore

__all__ = ["Preview", "estimate_tokens", "preview_flow", "preview_many"]

COLUMNS = [
    "variant",
    "row",
    "node",
    "kind",
    "prompt",
    "cached",
    "est_tokens",
    "est_output_tokens",
    "est_cost_usd",
    "system",
]


def estimate_tokens(text: str) -> int:
    """Return a rough token count for ``text`` (about four characters a token, and the images a
    judge's prompt shows the model)."""
    return math.ceil(len(text) / 4) + image_tokens(text)


class Preview:
    """What a run would do. ``calls`` has one row per provider call: ``variant``, ``row`` (the
    input's position), ``node``, ``kind``, ``prompt`` (None where it cannot be known before
    the run: remote flows, judges of outputs not generated yet), ``cached`` (answered without a
    call), ``est_tokens`` (the system message included) and, when some node has one,
    ``system`` (the node's system message, or None).

    Attributes:
        n_calls: provider calls that would be made (cache hits and repeats excluded), judges
            included: the count a run on the same cache state makes, and its progress bar's
            total.
        n_cached: calls the cache (or an identical call of the same run) would answer.
        n_unknown: judge calls among ``n_calls`` whose prompt is not known yet (they grade
            outputs that are neither cached nor computable offline): each is counted as a call;
            fewer are made when outputs turn out identical (the repeat is not paid twice).
        est_tokens: estimated prompt tokens of the calls that would be made.
        est_cost: estimated US dollars of the calls that would be made (an estimate: see the
            module docstring; NaN when some call's price is unknown).
        est_cost_known: the part of ``est_cost`` that could be priced (calls without a
            price left out).
    """

    def __init__(
        self,
        calls: pd.DataFrame,
        providers: Mapping[str, str],
        batchable: frozenset[str] = frozenset(),
    ) -> None:
        self.calls = calls
        self.providers = dict(providers)
        # Variants (and judges) whose provider has a batch API: their text calls could go at
        # the batch rate instead (flownb.frames.batch_api).
        self.batchable = batchable
        paid = calls[~calls["cached"]]
        self.n_calls = len(paid)
        self.n_cached = len(calls) - len(paid)
        self.n_unknown = int(
            (paid["prompt"].isna() & paid["variant"].str.startswith("judge:")).sum()
        )
        self.est_tokens = int(paid["est_tokens"].sum())
        costs = paid["est_cost_usd"].astype(float)
        self.est_cost = float(costs.sum(skipna=False)) if len(costs) else 0.0
        self.est_cost_known = float(costs.sum()) if len(costs) else 0.0
        self.n_unpriced = int(costs.isna().sum())
        at_batch_rate = paid["variant"].isin(batchable) & paid["kind"].eq("text")
        self.est_cost_batch = float(
            (costs.where(~at_batch_rate, costs * BATCH_RATE)).sum() if len(costs) else 0.0
        )

    def cost_line(self) -> str:
        """Return the estimate of the money in one line, saying it is an estimate."""
        from ..show.meter import usd

        if self.n_calls and self.n_unpriced == self.n_calls:
            return "estimated cost: unknown (no price for these models)"
        line = f"estimated cost: about {usd(self.est_cost_known)}"
        if self.n_unpriced:
            line += f" for the priced calls ({self.n_unpriced} call(s) without a price)"
        if self.batchable and self.est_cost_batch < self.est_cost_known:
            line += f", about {usd(self.est_cost_batch)} through the batch API (batch_api=True)"
        return line + " (estimate: prompt chars/4 tokens, output = max_tokens)"

    def headline(self) -> str:
        """Return the one-line summary: calls, cache hits, unknown judge prompts, tokens."""
        line = (
            f"preview: {self.n_calls} provider call(s) would be made, {self.n_cached} answered "
            f"by the cache; about {self.est_tokens} prompt tokens "
            f"({', '.join(f'{v}: {p}' for v, p in self.providers.items())})"
        )
        if self.n_unknown:
            line += (
                f"; {self.n_unknown} of the calls are judge calls whose prompts are unknown until "
                "the outputs they grade exist (not cached, not computable offline): each is "
                "counted as a call, fewer are made if outputs repeat"
            )
        return line

    def brief(self, more: str = "str(preview) or preview.calls") -> str:
        """Return the preview in a few lines: :meth:`headline`, :meth:`cost_line`, then one line
        per variant and node (its calls, cache hits, and one of its prompts, clipped), then
        where every call's prompt is (``more``: how to ask for it)."""
        lines = [self.headline(), self.cost_line()]
        calls = self.calls
        if len(calls):
            lines.append("calls per node:")
            groups = calls.groupby(["variant", "node", "kind"], sort=False, dropna=False)
            for (variant, node, kind), group in groups:
                paid = int((~group["cached"]).sum())
                hits = len(group) - paid
                prompts = [p for p in group["prompt"].tolist() if isinstance(p, str)]
                example = _clip(prompts[0]) if prompts else "(prompt known at run time)"
                lines.append(
                    f"  {variant} / {node} ({kind}): {paid} call(s), {hits} cached; e.g. {example}"
                )
            lines.append(f"every call's prompt: {more}")
        return "\n".join(lines)

    def __str__(self) -> str:
        lines = [self.headline(), self.cost_line()]
        for rec in self.calls.itertuples(index=False):
            state = "cached" if rec.cached else "call"
            if isinstance(rec.prompt, str):
                prompt = rec.prompt
            elif str(rec.variant).startswith("judge:"):
                prompt = "(unknown: grades an output not generated yet)"
            else:
                prompt = "(rendered by the service)"
            system = getattr(rec, "system", None)
            if isinstance(system, str):
                prompt = f"(system: {system}) {prompt}"
            lines.append(f"[{rec.variant} row {rec.row} {rec.node} {state}] {prompt}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"<Preview calls={self.n_calls} cached={self.n_cached} unknown={self.n_unknown} "
            f"est_tokens={self.est_tokens} est_cost={self.est_cost_known:.6f}>"
        )

    def _repr_html_(self) -> str:
        from ..show.escape import html_text, no_math

        # Escaped, and not typeset: "about $0.0012 ... about $0.0006" is money, and a prompt's
        # text is data.
        head, cost = html_text(self.headline()), html_text(self.cost_line())
        return no_math(f"<p><b>{head}</b><br>{cost}</p>" + self.calls.to_html(max_rows=50))


def _clip(text: str, width: int = 80) -> str:
    """``text`` on one line, at most ``width`` characters, quoted."""
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= width else flat[: width - 1] + "…")


# One variant's outputs per row, where known before the run (None: not known).
Known = list[dict[str, str | None]]


# An output not known before the run stands for itself by the key of the call making it: two
# calls made alike give the same output, so prompts built from them are repeats too.
_MARK = "\x00"


def _unknown(key: str) -> str:
    return f"{_MARK}{key}{_MARK}"


def _local_calls(
    flow: LocalCore,
    batch: Sequence[Mapping[str, str]],
    variant: str,
    outputs: Known | None = None,
    seen: set[str] | None = None,
) -> list[tuple]:
    """Return one record per call of ``flow`` over ``batch``; fill ``outputs`` (one dict per
    row) with each output as known before the run: from the cache, or computed as the offline
    provider would (its text output is the prompt), else a stand-in naming the call that will
    make it (see :func:`is_known`). ``seen`` holds the keys of calls counted already (by other
    flows of the same evaluation): a repeat is not paid twice, as the run does not pay it."""
    plan, engine = flow.plan, flow.engine
    cache = engine.cache
    offline = isinstance(unrepeated(flow.provider), OfflineProvider)  # a repeat's too
    keyed = cache is not None or outputs is not None
    # Prompt, key and price of each node's calls, by the author every run path asks too.
    nodes = [step_calls(flow.provider, s) for s in plan.steps]
    seen = seen if seen is not None else set()
    rows: list[tuple] = []
    for r, values in enumerate(batch):
        known: dict[int, str] = {}  # step -> its output, or the stand-in of an unknown one
        for step, node in zip(plan.steps, nodes, strict=True):
            symbolic, prompt, exact = _rendered(plan, step, node, values, known)
            output = prompt if offline and step.kind == "text" and exact else None
            key = node.key(symbolic) if keyed else ""
            cached = False
            if cache is not None:
                cached, hit = _in_cache(cache, engine, key, seen, exact=exact)
                seen.add(key)
                output = hit if hit is not None else output
            known[step.index] = output if output is not None else _unknown(key or f"{r}")
            tokens = node.expected_tokens(prompt)
            out, cost = node.expected_of(tokens)
            rows.append(
                (
                    variant,
                    r,
                    step.name,
                    step.kind,
                    prompt,
                    cached,
                    tokens,
                    out,
                    0.0 if cached else cost,
                    step.system,
                )
            )
        if outputs is not None:
            outputs.append(_outputs(plan, values, known))
    return rows


def _rendered(
    plan: Any, step: Any, node: Any, values: Mapping[str, str], known: Mapping[int, str]
) -> tuple[str, str, bool]:
    """Return step ``step``'s prompt for one row, as its call's key is made (upstream outputs
    as ``known``: their stand-ins where not known yet) and as shown (a placeholder naming each
    upstream output not known yet), and whether every upstream output is known."""
    ctx = dict(values)
    exact = True
    for u in step.upstream:
        name = plan.steps[u].name
        if name not in values:
            ctx[name] = known[u]
            exact = exact and _MARK not in known[u]
    symbolic = node.render(ctx)  # what decides the call's key
    if exact:
        return symbolic, symbolic, True
    for u in step.upstream:  # shown with a placeholder where an upstream output is not known
        name = plan.steps[u].name
        if name not in values and _MARK in known[u]:
            ctx[name] = f"«output of {name}»"
    return symbolic, node.render(ctx), False


def _in_cache(
    cache: Any, engine: Any, key: str, seen: set[str], *, exact: bool
) -> tuple[bool, str | None]:
    """Return whether the call of ``key`` would be answered without being paid (a cache hit,
    looked up only when its prompt is ``exact``ly known, or a call counted already in
    ``seen``), and the cached output (text, or the image's URL), if any."""
    hit = cache.get(key) if exact else None
    cached = hit is not None or key in seen
    if hit is None:
        return cached, None
    return cached, hit.output if hit.media is None else engine.media_url(hit.media)


def is_known(text: str) -> bool:
    """Return whether ``text`` (an output or a prompt built from outputs) is known before the
    run, rather than standing in for an output a call will make."""
    return _MARK not in text


def _outputs(plan: Any, values: Mapping[str, str], known: Mapping[int, str]) -> dict:
    """Return each output of one row as a run would assemble it (stand-ins where a source is
    not known)."""
    got: dict[str, str | None] = {}
    for name, srcs in plan.output_sources:
        parts = [known[ref] if kind == "step" else values.get(ref, "") for kind, ref in srcs]
        got.setdefault(name, "\n\n".join(parts))
    return got


def preview_flow(
    flow: FlowCore,
    batch: Sequence[Mapping[str, str]],
    variant: str,
    outputs: Known | None = None,
    seen: set[str] | None = None,
) -> list[tuple]:
    """Return one record per call ``flow`` would make over a validated ``batch`` (and fill
    ``outputs`` and ``seen`` as :func:`_local_calls` does)."""
    local = local_of(flow)
    if local is None:  # remote: the service renders the prompts
        if outputs is not None:
            outputs.extend({} for _ in batch)
        return [
            (
                variant,
                r,
                "(remote)",
                "run",
                None,
                False,
                estimate_tokens("".join(v.values())),
                0,
                math.nan,  # the service's models and prices are not known here
                None,
            )
            for r, v in enumerate(batch)
        ]
    return _local_calls(local, batch, variant, outputs, seen)


def _frame(rows: list[tuple]) -> pd.DataFrame:
    import pandas as pd

    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["cached"] = frame["cached"].astype(bool)
    for col in ("prompt", "system"):
        frame[col] = frame[col].astype(object).where(frame[col].notna(), None)
    if frame["system"].isna().all():  # no system messages: the column would say nothing
        frame = frame.drop(columns="system")
    return frame


def _batches(flow: FlowCore) -> bool:
    """Whether ``flow``'s text calls could go through its provider's batch API."""
    local = local_of(flow)
    return bool(local is not None and local.provider.supports_batches)


def _provider(flow: FlowCore) -> str:
    local = local_of(flow)
    return local.provider.name if local is not None else "remote"


def _judge_calls(
    judge: JudgeScorer,
    inputs: Sequence[Mapping[str, Any]],
    known: Mapping[str, Known],
    seen: set[str],
) -> list[tuple]:
    """Return one record per call ``judge`` would make: its prompt rendered from the outputs
    known before the run (then looked up in the judge's cache, repeats counted once, as the run
    does), else ``None`` (counted as a call)."""
    flow = judge.flow()
    step = flow.plan.steps[0]
    cache = flow.engine.cache
    node = step_calls(flow.provider, step)  # its key and price, as the judge's run makes them
    label = f"judge:{judge.name}"
    unknown = estimate_tokens(judge.rubric) + 60  # the rubric and instructions; output unknown
    names = list(known)
    rows: list[tuple] = []

    def add(r: int, prompt: str | None, cached: bool, tokens: int) -> None:
        out, cost = node.expected_of(tokens)
        shown = (label, r, judge.name, "text", prompt, cached, tokens, out, 0.0 if cached else cost)
        rows.append((*shown, None))

    def record(r: int, prompt: str | None) -> None:
        if prompt is None:  # an output of a served flow: nothing known of it
            add(r, None, False, unknown)
            return
        known_prompt = is_known(prompt)
        cached = False
        if cache is not None:
            key = node.key(prompt)
            cached = key in seen or (known_prompt and cache.get(key) is not None)
            seen.add(key)
        if known_prompt:
            add(r, prompt, cached, node.expected_tokens(prompt))
        else:  # built from outputs made during the run: its text is not known yet
            add(r, None, cached, unknown)

    if isinstance(judge, PickBest):
        for r, row in enumerate(inputs):
            outs = [known[v][r].get(judge.output) for v in names]
            full = {**row, **known[names[0]][r]}
            record(r, None if any(o is None for o in outs) else judge.prompt_all(full, outs))
    else:
        for v in names:
            for r, row in enumerate(inputs):
                got = known[v][r]
                full = {**row, **got}
                record(r, None if got.get(judge.output) is None else judge.prompt(full))
    return rows


def preview_many(
    variants: Mapping[str, FlowCore],
    batches: Mapping[str, Sequence[Mapping[str, str]]],
    scorers: Sequence[Scorer] = (),
    inputs: Sequence[Mapping[str, Any]] | None = None,
) -> Preview:
    """Return the preview of an evaluation: every variant's calls, then every judge call,
    rendered from the variants' outputs where they are known before the run (cached, or
    computed offline); ``inputs`` are the data's rows (column -> value), which judge rubrics
    may use. Judges must be bound to the flows they grade (``JudgeScorer.grades``)."""
    judges = [s for s in scorers if isinstance(s, JudgeScorer)]
    rows: list[tuple] = []
    known: dict[str, Known] = {}
    seen: set[str] = set()  # an evaluation pays once for a call several variants make alike
    for name, flow in variants.items():
        known[name] = []
        rows += preview_flow(flow, batches[name], name, known[name] if judges else None, seen)
    providers = {name: _provider(f) for name, f in variants.items()}
    if judges:
        n = len(next(iter(batches.values()))) if batches else 0
        rows_in = list(inputs) if inputs is not None else [{} for _ in range(n)]
        for j in judges:
            providers[f"judge:{j.name}"] = j.flow().provider.name
            rows += _judge_calls(j, rows_in, known, seen)
    batchable = frozenset(
        name for name, f in variants.items() if getattr(f, "provider", None) and _batches(f)
    ) | frozenset(f"judge:{j.name}" for j in judges if _batches(j.flow()))
    return Preview(_frame(rows), providers, batchable)


def preview_data(
    flow: FlowCore,
    data: Any,
    columns: Mapping[str, str] | None = None,
    fill: str | None = None,
) -> Preview:
    """Return the preview of running ``flow`` over ``data`` (a DataFrame, a list of variable
    mappings, or one mapping).

    Raises:
        InputError: the data does not fit the flow's variables (as a run would).
        TypeError: ``data`` is none of those.
    """
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        batch: Sequence[Mapping[str, str]] = rows_to_variables(data, flow.variables, columns, fill)
    else:
        batch = [data] if isinstance(data, Mapping) else list(data)
        if not all(isinstance(v, Mapping) for v in batch):
            raise TypeError("preview takes a DataFrame, a list of variable mappings, or one")
        flow.spec.check_batch(batch)
    batchable = frozenset({flow.name}) if _batches(flow) else frozenset()
    return Preview(
        _frame(preview_flow(flow, batch, flow.name)), {flow.name: _provider(flow)}, batchable
    )
