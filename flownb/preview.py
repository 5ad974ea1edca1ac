"""Previewing a run before paying for it: the prompts each call would send, how many provider
calls would be made (cache hits and repeats excluded) and an estimate of their prompt tokens.
Nothing here calls a provider.

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

COLUMNS = ["variant", "row", "node", "kind", "prompt", "cached", "est_tokens", "system"]


def estimate_tokens(text: str) -> int:
    """Return a rough token count for ``text`` (about four characters a token)."""
    return math.ceil(len(text) / 4)


class Preview:
    """What a run would do. ``calls`` has one row per provider call: ``variant``, ``row`` (the
    input's position), ``node``, ``kind``, ``prompt`` (None where it cannot be known before
    the run: remote flows, judges), ``cached`` (answered without a call), ``est_tokens``
    (the system message included) and, when some node has one, ``system`` (the node's system
    message, or None).

    Attributes:
        n_calls: provider calls that would be made (cache hits and repeats excluded).
        n_cached: calls the cache (or an identical call of the same run) would answer.
        est_tokens: estimated prompt tokens of the calls that would be made.
    """

    def __init__(self, calls: pd.DataFrame, providers: Mapping[str, str]) -> None:
        self.calls = calls
        self.providers = dict(providers)
        paid = calls[~calls["cached"]]
        self.n_calls = len(paid)
        self.n_cached = len(calls) - len(paid)
        self.est_tokens = int(paid["est_tokens"].sum())

    def __str__(self) -> str:
        lines = [
            f"preview: {self.n_calls} provider call(s) would be made, {self.n_cached} answered "
            f"by the cache; about {self.est_tokens} prompt tokens "
            f"({', '.join(f'{v}: {p}' for v, p in self.providers.items())})"
        ]
        for rec in self.calls.itertuples(index=False):
            state = "cached" if rec.cached else "call"
            prompt = rec.prompt if isinstance(rec.prompt, str) else "(rendered at run time)"
            system = getattr(rec, "system", None)
            if isinstance(system, str):
                prompt = f"(system: {system}) {prompt}"
            lines.append(f"[{rec.variant} row {rec.row} {rec.node} {state}] {prompt}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Preview calls={self.n_calls} cached={self.n_cached} est_tokens={self.est_tokens}>"

    def _repr_html_(self) -> str:
        import html

        head = html.escape(str(self).splitlines()[0])
        return f"<p><b>{head}</b></p>" + self.calls.to_html(max_rows=50)


def _local_calls(flow: Any, batch: Sequence[Mapping[str, str]], variant: str) -> list[tuple]:
    from .cache import CallCache

    plan, engine = flow.plan, flow.engine
    cache = engine.cache
    identity = flow.provider.identity()
    prefixes = {
        s.index: CallCache.prefix(identity, s.kind, s.params, s.system)
        if cache is not None
        else b""
        for s in plan.steps
    }
    seen: set[str] = set()
    rows: list[tuple] = []
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
            tokens = estimate_tokens(prompt) + (estimate_tokens(step.system) if step.system else 0)
            rows.append((variant, r, step.name, step.kind, prompt, cached, tokens, step.system))
    return rows


def preview_flow(flow: BaseFlow, batch: Sequence[Mapping[str, str]], variant: str) -> list[tuple]:
    """Return one record per call ``flow`` would make over a validated ``batch``."""
    if getattr(flow, "plan", None) is None:  # remote: the service renders the prompts
        return [
            (variant, r, "(remote)", "run", None, False, estimate_tokens("".join(v.values())), None)
            for r, v in enumerate(batch)
        ]
    return _local_calls(flow, batch, variant)


def _frame(rows: list[tuple]) -> pd.DataFrame:
    import pandas as pd

    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["cached"] = frame["cached"].astype(bool)
    for col in ("prompt", "system"):
        frame[col] = frame[col].astype(object).where(frame[col].notna(), None)
    if frame["system"].isna().all():  # no system messages: the column would say nothing
        frame = frame.drop(columns="system")
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
        providers[label] = s.flow().provider.name
        per_row = 1 if isinstance(s, PickBest) else len(variants)
        rows += [(label, r, s.name, "text", None, False, tokens, None) for r in range(n)] * per_row
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
