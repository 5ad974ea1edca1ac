"""Previewing a run before paying for it: the prompts each call would send, how many provider
calls would be made (cache hits and repeats excluded), an estimate of their tokens and an
estimate of what they would cost. Nothing here calls a provider.

Estimates, not quotes: prompt tokens are ``ceil(characters / 4)``, each text call is assumed to
write its node's ``max_tokens`` (or :data:`~flownb.pricing.ESTIMATE_OUTPUT_TOKENS`), and the
price is the table's (or the endpoint's ``prices``) for the model the provider would send.
Image calls, judges without a known model and remote flows are not priced (NaN, shown ``-``).

A prompt that uses an upstream node's output is rendered with that output when the upstream
call is cached, else with a ``«output of NODE»`` placeholder (and counted as a call).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from .flow import BaseFlow
    from .scorers import Scorer

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
]


def estimate_tokens(text: str) -> int:
    """Return a rough token count for ``text`` (about four characters a token)."""
    return math.ceil(len(text) / 4)


def _pricer(provider: Any) -> Any:
    """Return ``price(kind, params, prompt_tokens) -> (output_tokens, usd)`` for ``provider``'s
    calls (NaN where they cannot be estimated)."""
    from .pricing import ESTIMATE_OUTPUT_TOKENS, NAN, estimate_cost

    if provider is None:
        return lambda kind, params, tokens: (0, NAN)
    kind_name = provider.price_kind or provider.name

    def price(kind: str, params: Mapping[str, Any], tokens: int) -> tuple[int, float]:
        if kind != "text":
            return 0, 0.0 if kind_name == "offline" else NAN
        out = params.get("max_tokens") or params.get("max_completion_tokens")
        out = int(out) if out else ESTIMATE_OUTPUT_TOKENS
        model = provider.priced_model(kind, params)
        return out, estimate_cost(kind_name, model, tokens, out, provider.prices)

    return price


class Preview:
    """What a run would do. ``calls`` has one row per provider call: ``variant``, ``row`` (the
    input's position), ``node``, ``kind``, ``prompt`` (None where it cannot be known before
    the run: remote flows, judges), ``cached`` (answered without a call) and ``est_tokens``.

    Attributes:
        n_calls: provider calls that would be made (cache hits and repeats excluded).
        n_cached: calls the cache (or an identical call of the same run) would answer.
        est_tokens: estimated prompt tokens of the calls that would be made.
        est_cost: estimated US dollars of the calls that would be made (an estimate: see the
            module docstring; NaN when some call's price is unknown).
        est_cost_known: the part of ``est_cost`` that could be priced (calls without a
            price left out).
    """

    def __init__(self, calls: pd.DataFrame, providers: Mapping[str, str]) -> None:
        self.calls = calls
        self.providers = dict(providers)
        paid = calls[~calls["cached"]]
        self.n_calls = len(paid)
        self.n_cached = len(calls) - len(paid)
        self.est_tokens = int(paid["est_tokens"].sum())
        costs = paid["est_cost_usd"].astype(float)
        self.est_cost = float(costs.sum(skipna=False)) if len(costs) else 0.0
        self.est_cost_known = float(costs.sum()) if len(costs) else 0.0
        self.n_unpriced = int(costs.isna().sum())

    def cost_line(self) -> str:
        """Return the estimate of the money in one line, saying it is an estimate."""
        from .meter import usd

        if self.n_calls and self.n_unpriced == self.n_calls:
            return "estimated cost: unknown (no price for these models)"
        line = f"estimated cost: about {usd(self.est_cost_known)}"
        if self.n_unpriced:
            line += f" for the priced calls ({self.n_unpriced} call(s) without a price)"
        return line + " (estimate: prompt chars/4 tokens, output = max_tokens)"

    def __str__(self) -> str:
        lines = [
            f"preview: {self.n_calls} provider call(s) would be made, {self.n_cached} answered "
            f"by the cache; about {self.est_tokens} prompt tokens "
            f"({', '.join(f'{v}: {p}' for v, p in self.providers.items())})",
            self.cost_line(),
        ]
        for rec in self.calls.itertuples(index=False):
            state = "cached" if rec.cached else "call"
            prompt = rec.prompt if isinstance(rec.prompt, str) else "(rendered at run time)"
            lines.append(f"[{rec.variant} row {rec.row} {rec.node} {state}] {prompt}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"<Preview calls={self.n_calls} cached={self.n_cached} est_tokens={self.est_tokens} "
            f"est_cost={self.est_cost_known:.6f}>"
        )

    def _repr_html_(self) -> str:
        import html

        head, cost = (html.escape(line) for line in str(self).splitlines()[:2])
        return f"<p><b>{head}</b><br>{cost}</p>" + self.calls.to_html(max_rows=50)


def _local_calls(flow: Any, batch: Sequence[Mapping[str, str]], variant: str) -> list[tuple]:
    from .cache import CallCache

    plan, engine = flow.plan, flow.engine
    cache = engine.cache
    identity = flow.provider.identity()
    prefixes = {
        s.index: CallCache.prefix(identity, s.kind, s.params) if cache is not None else b""
        for s in plan.steps
    }
    seen: set[str] = set()
    rows: list[tuple] = []
    price = _pricer(flow.provider)
    for r, values in enumerate(batch):
        known: dict[int, str | None] = {}
        for step in plan.steps:
            ctx = dict(values)
            for u in step.upstream:
                name = plan.steps[u].name
                if name not in values:
                    got = known.get(u)
                    ctx[name] = got if got is not None else f"«output of {name}»"
            prompt = step.template.render(ctx)
            cached = False
            output = None
            if cache is not None:
                key = CallCache.key(prefixes[step.index], prompt)
                hit = cache.get(key)
                cached = hit is not None or key in seen
                seen.add(key)
                output = hit.output if hit is not None and hit.media is None else None
            known[step.index] = output
            tokens = estimate_tokens(prompt)
            out, cost = price(step.kind, step.params, tokens)
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
                )
            )
    return rows


def preview_flow(flow: BaseFlow, batch: Sequence[Mapping[str, str]], variant: str) -> list[tuple]:
    """Return one record per call ``flow`` would make over a validated ``batch``."""
    if getattr(flow, "plan", None) is None:  # remote: the service renders the prompts
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
            )
            for r, v in enumerate(batch)
        ]
    return _local_calls(flow, batch, variant)


def _frame(rows: list[tuple]) -> pd.DataFrame:
    import pandas as pd

    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["cached"] = frame["cached"].astype(bool)
    frame["prompt"] = frame["prompt"].astype(object).where(frame["prompt"].notna(), None)
    return frame


def _provider(flow: BaseFlow) -> str:
    provider = getattr(flow, "provider", None)
    return provider.name if provider is not None else "remote"


def preview_many(
    variants: Mapping[str, BaseFlow],
    batches: Mapping[str, Sequence[Mapping[str, str]]],
    scorers: Sequence[Scorer] = (),
) -> Preview:
    """Return the preview of an evaluation: every variant's calls, then one record per judge
    call (prompts unknown until the outputs exist; counted as calls)."""
    from .scorers import JudgeScorer, PickBest

    rows: list[tuple] = []
    for name, flow in variants.items():
        rows += preview_flow(flow, batches[name], name)
    providers = {name: _provider(f) for name, f in variants.items()}
    n = len(next(iter(batches.values()))) if batches else 0
    for s in scorers:
        if not isinstance(s, JudgeScorer):
            continue
        tokens = estimate_tokens(s.rubric) + 60  # the rubric, the instructions; output unknown
        label = f"judge:{s.name}"
        judge = s.flow()
        providers[label] = judge.provider.name
        per_row = 1 if isinstance(s, PickBest) else len(variants)
        steps = getattr(getattr(judge, "plan", None), "steps", ())
        params = steps[0].params if steps else {}
        out, cost = _pricer(judge.provider)("text", params, tokens)
        rows += [
            (label, r, s.name, "text", None, False, tokens, out, cost) for r in range(n)
        ] * per_row
    return Preview(_frame(rows), providers)


def preview_data(
    flow: BaseFlow,
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
        from .frame import rows_to_variables

        batch: Sequence[Mapping[str, str]] = rows_to_variables(data, flow.variables, columns, fill)
    else:
        batch = [data] if isinstance(data, Mapping) else list(data)
        if not all(isinstance(v, Mapping) for v in batch):
            raise TypeError("preview takes a DataFrame, a list of variable mappings, or one")
        flow.spec.check_batch(batch)
    return Preview(_frame(preview_flow(flow, batch, flow.name)), {flow.name: _provider(flow)})
