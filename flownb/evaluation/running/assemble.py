"""An evaluation's results in one long frame: each variant's outputs, scores and reasons per
row (:func:`_assemble`), and the header a report shows (:func:`describe_evaluation`: prompts,
model parameters, provider and endpoint, data set, scorers).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...core.flow import FlowCore
from ...core.local import local_of
from ...errors import ConfigError
from ...scorers import Scorer
from ...scorers.judge import JudgeScorer
from ...scorers.judging import self_preference, variant_vendor
from ..figures.money import JUDGE_COLUMNS, MONEY_COLUMNS, money_columns
from ..reports.report import EvalReport, ScorerInfo
from .jobs import _block, _Collected, _input_block

if TYPE_CHECKING:
    import pandas as pd


def _assemble(
    data: pd.DataFrame,
    variants: Mapping[str, FlowCore],
    collected: Mapping[str, _Collected],
    graders: Sequence[Scorer],
    judged: Mapping[str, Mapping[str, tuple[list[Any], list[str | None]]]],
    context: dict[str, Any] | None = None,
) -> EvalReport:
    import numpy as np
    import pandas as pd

    n = len(data)
    inputs = _input_block(data)
    index_name = data.index.name or "index"
    if index_name in data.columns or index_name == "variant":
        index_name = "row_index"
    outputs = list(dict.fromkeys(o for f in variants.values() for o in f.outputs))
    out_cols = {o: (o if o not in data.columns else f"{o}_output") for o in outputs}
    kinds: dict[str, str] = {}
    for flow in variants.values():
        plan = getattr(flow, "plan", None)
        if plan is not None:
            for o, k in plan.output_kinds.items():
                kinds.setdefault(o, k)
    parts = []
    infos: dict[str, ScorerInfo] = {}
    vendors = {name: variant_vendor(flow) for name, flow in variants.items()}
    for name, got in collected.items():
        block = _block(inputs, got)
        failed = np.array(block.failed, dtype=bool)
        cols: dict[str, Any] = {"variant": [name] * n, index_name: data.index.to_numpy()}
        for c in data.columns:
            cols[str(c)] = data[c].to_numpy()
        for o in outputs:
            cols[out_cols[o]] = got.values.get(o, [None] * n)
        passed = ~failed
        for s in graders:
            reasons: list[str | None] | None
            if s.name in judged:
                scores, reasons = judged[s.name][name]
            elif isinstance(s, JudgeScorer):  # interrupted before the judges ran
                scores, reasons = [None] * n, ["not judged: the evaluation was interrupted"] * n
            else:
                scores, reasons = s.score(block)
            values = _as_column(scores, s)
            values[failed] = np.nan if s.kind == "float" else pd.NA
            cols[s.name] = values
            if reasons is not None:
                cols[f"{s.name}_reason"] = pd.array(reasons, dtype=object)
            if s.kind == "bool":
                passed &= values.fillna(False).to_numpy(dtype=bool)
            elif s.threshold is not None:
                passed &= np.nan_to_num(values, nan=-np.inf) >= s.threshold
            info = infos.get(s.name)
            infos[s.name] = ScorerInfo(
                s.name,
                s.kind if info is None or info.kind == s.kind else "float",
                s.threshold,
                s.pass_fail,
                s.output,
                s.describe(),
                s.rate,
                _judge_record(s, vendors) if info is None else info.judge,
            )
        cols["passed"] = passed
        cols["latency_s"] = np.array(got.latency, dtype=float)
        cols["total_tokens"] = np.array(got.tokens, dtype=float)
        cols.update(money_columns(got.money))  # spent, saved and price kept apart
        cols["prompt_cache_saved_usd"] = np.array(got.prompt_cache, dtype=float)
        cols.update(got.judge_columns())
        speed = np.array(got.speed, dtype=float).reshape(n, 3)
        cols["provider_s"], cols["output_tokens"], cols["fresh_s"] = speed.T
        cols["cached"] = np.array(got.cached, dtype=bool)
        cols["error"] = pd.array(got.error, dtype=object)
        parts.append(pd.DataFrame(cols))
    results = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    # Columns that only some variants give (a scorer's reasons) are missing elsewhere: order them.
    ordered = ["variant", index_name, *map(str, data.columns), *out_cols.values()]
    for s in graders:
        ordered.append(s.name)
        if f"{s.name}_reason" in results.columns:
            ordered.append(f"{s.name}_reason")
    ordered += ["passed", "latency_s", "provider_s", "output_tokens", "fresh_s", "total_tokens"]
    ordered += list(MONEY_COLUMNS)
    if "judge_calls" in results.columns:
        ordered += list(JUDGE_COLUMNS)
    ordered += ["cached", "error"]
    results = results[ordered]
    return EvalReport(
        results,
        list(variants),
        list(infos.values()),
        outputs=[out_cols[o] for o in outputs],
        kinds={out_cols[o]: k for o, k in kinds.items()},
        index_name=index_name,
        inputs=[str(c) for c in data.columns],
        context=context,
        setup={name: _setup(flow) for name, flow in variants.items()},
        flows=variants,
        # Each local variant as flow.save writes it: a report read back can still save its choice.
        flow_files={n: j for n, f in variants.items() if (j := _exported(f)) is not None},
    )


def _judge_record(scorer: Scorer, vendors: Mapping[str, str | None]) -> dict[str, Any] | None:
    """Return who judged for a judge (endpoint, model, vendor, and the variants of its vendor:
    ``same_vendor``), None for any other scorer."""
    if not isinstance(scorer, JudgeScorer):
        return None
    info: dict[str, Any] = dict(scorer.judged_by())
    info["same_vendor"] = self_preference(info["vendor"], vendors)
    return info


def _endpoint(provider: Any) -> str | None:
    """Return the provider's endpoint as safe to show (no credentials, no query)."""
    from urllib.parse import urlsplit

    url = provider.identity().get("base_url")
    if not isinstance(url, str) or not url:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}" if parts.scheme else None


def describe_evaluation(
    names: Mapping[str, str],
    variants: Mapping[str, FlowCore],
    data: pd.DataFrame,
    collected: Mapping[str, _Collected],
) -> dict[str, Any]:
    """Return what was evaluated, for the report's header: a title from the flows' names,
    the data set (``data.attrs["name"]`` or "a DataFrame", rows, columns) and per variant its
    flow, provider, endpoint and nodes (prompt, model parameters, the models that answered)."""
    flows = list(dict.fromkeys(names.values()))
    shown: list[dict[str, Any]] = []
    for name, flow in variants.items():
        item: dict[str, Any] = {"name": name, "flow": names[name]}
        local = local_of(flow)
        plan = local.plan if local is not None else None
        if local is not None and plan is not None:
            models = collected[name].models if name in collected else {}
            item["provider"] = local.provider.name
            item["endpoint"] = _endpoint(local.provider)
            item["batch_api"] = bool(local.provider.supports_batches)  # half price there
            item["nodes"] = [
                {
                    "name": step.name,
                    "kind": step.kind,
                    "prompt": step.template.text,
                    # What the provider sends: a parameter it drops is not listed.
                    "params": local.provider.sent_params(step.kind, step.params),
                    "models": sorted(models.get(k, ())),
                }
                for k, step in enumerate(plan.steps)
            ]
        else:
            item["provider"] = "remote flow service"
            client = getattr(flow, "client", None)
            item["endpoint"] = getattr(client, "base_url", None)
            item["nodes"] = []
        shown.append(item)
    title = f"{', '.join(flows)}: {' vs '.join(variants)}" if len(variants) > 1 else flows[0]
    return {
        "title": title,
        "dataset": {
            "name": str(data.attrs.get("name") or "a DataFrame"),
            "rows": len(data),
            "columns": [str(c) for c in data.columns],
        },
        "variants": shown,
    }


def _exported(flow: FlowCore) -> dict[str, Any] | None:
    """Return the flow as :meth:`~flownb.LocalFlow.export` writes it, naming its endpoint when
    a flownb.toml declares it (else without: a report keeps no URL and no key); None for a flow
    with no flow file (on a flow service)."""
    for endpoint in (True, False):
        try:
            return flow.export(endpoint=endpoint)
        except ConfigError:
            continue
    return None


def _setup(flow: FlowCore) -> dict[str, str | None]:
    """Return what a variant runs on: endpoint (or provider), models, system message(s)."""
    local = local_of(flow)
    if local is None:
        return {"endpoint": "remote", "model": None, "system": None}
    endpoint = local.config.endpoint
    steps = local.plan.steps
    models = dict.fromkeys(str(s.params["model"]) for s in steps if s.params.get("model"))
    systems = dict.fromkeys(s.system for s in steps if s.system)
    return {
        "endpoint": endpoint.name if endpoint is not None else local.provider.name,
        "model": ", ".join(models) or None,
        "system": " | ".join(systems) or None,
    }


def _as_column(scores: Sequence[Any], scorer: Scorer) -> Any:
    import numpy as np
    import pandas as pd

    if scorer.kind == "float":
        return np.array([math.nan if v is None else float(v) for v in scores], dtype=float)
    return pd.array([None if v is None else bool(v) for v in scores], dtype="boolean")
