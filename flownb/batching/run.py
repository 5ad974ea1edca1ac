"""A DataFrame through a provider's batch API (half price, results within 24 hours), resumably.

Every call of a batch is known before anything runs (a generation node depends on variables and
on the nodes above it), so :func:`run_dataframe_batched` works in stages, one per level of the
flow: it renders every row's prompts, keeps the calls the cache does not hold, and hands them to
the provider as batches (one model per batch, split at the provider's size limits; each line's
``custom_id`` is the call's cache key, so a prompt repeated across rows is paid once). It waits,
reads the answers into the cache, and goes on to the next level. When all are in, the frame is
built by the ordinary run, which now finds every text answer in the cache: the result is exactly
a plain run's, and a re-run costs nothing.

Submitted batches are remembered in ``FLOWNB_HOME`` (:mod:`flownb.batching.store`) before any
waiting starts: a later call for the same calls, in any process, picks them up instead of paying
twice. Image nodes have no batch endpoint here and run live in the final pass. What did not come
back (a failed line, an expired batch, a batch still running when ``poll`` ran out or Ctrl-C was
pressed) is named in the row's ``error`` column and submitted again by the next run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Unpack

import orjson

from ..errors import ConfigError, ProviderError
from ..frame import rows_to_variables, run_dataframe
from ..hooks import FrameOptions
from ..inputs import PYTHON, Spelling
from ..pricing import BATCH_RATE
from ..providers.base import FINAL_STATES, BatchAPI, BatchState, Call, Generation, Provider
from .store import BatchRecord, load_records, save_record

if TYPE_CHECKING:
    import pandas as pd

    from ..cache import CallCache
    from ..engine import Plan
    from ..flow import LocalFlow

__all__ = ["prefill", "run_dataframe_batched"]

# HTTP-like statuses on the errors of calls a batch did not answer: none is retried by the run.
_PENDING, _GONE = 202, 410


def _calls(
    plan: Plan, provider: Provider, cache: CallCache, rows: Sequence[Mapping[str, str]]
) -> dict[str, Call]:
    """Return the text calls of ``rows`` the cache does not hold yet and whose inputs are known
    (their upstream nodes' answers are cached), by cache key."""
    found: dict[str, Call] = {}
    prefixes = {
        step.index: cache.prefix(provider.identity(), step.kind, step.params, step.system)
        for step in plan.steps
    }
    outputs: list[dict[int, str | None]] = [{} for _ in rows]
    for level in plan.levels:  # a level's prompts need the answers of the levels above
        keyed: list[tuple[int, int, str, Call]] = []
        for r, values in enumerate(rows):
            known = outputs[r]
            for step in level:
                known[step.index] = None
                ups = [known.get(u) for u in step.upstream]
                if step.kind != "text" or any(u is None for u in ups):
                    continue  # images run live; a node waits for the answers above it
                ctx: dict[str, str] = {
                    plan.steps[u].name: o
                    for u, o in zip(step.upstream, ups, strict=True)
                    if o is not None
                }
                ctx.update(values)
                prompt = step.template.render(ctx)
                call = Call(step.kind, prompt, step.params, step.node_id, step.system)
                keyed.append((r, step.index, cache.key(prefixes[step.index], call.prompt), call))
        hits = cache.get_many(k for _, _, k, _ in keyed)
        for r, index, key, call in keyed:
            hit = hits.get(key)
            if hit is not None:
                outputs[r][index] = hit.output
            else:
                found.setdefault(key, call)
    return found


def _submit(
    api: BatchAPI, calls: Mapping[str, Call], provider: Provider, flow: str, home: Any
) -> list[BatchRecord]:
    """Submit ``calls`` as batches (one per endpoint and model, split at the API's limits) and
    remember each the moment it exists."""
    groups: dict[tuple[str, str], list[bytes]] = {}
    keys: dict[tuple[str, str], list[str]] = {}
    for key, call in calls.items():
        endpoint, model, body = api.request(call)
        line = {"custom_id": key, "method": "POST", "url": api.line_url(endpoint), "body": body}
        groups.setdefault((endpoint, model), []).append(orjson.dumps(line))
        keys.setdefault((endpoint, model), []).append(key)
    records = []
    max_lines, max_bytes = api.limits["requests"], api.limits["bytes"]
    for (endpoint, model), lines in groups.items():
        start = 0
        while start < len(lines):
            end, size = start, 0
            while end < len(lines) and end - start < max_lines:
                if size + len(lines[end]) + 1 > max_bytes and end > start:
                    break
                size += len(lines[end]) + 1
                end += 1
            state = api.submit(
                b"\n".join(lines[start:end]) + b"\n", endpoint, {"flownb_flow": flow}
            )
            record = BatchRecord(
                id=state.id,
                provider=provider.name,
                base_url=api.base_url,
                endpoint=endpoint,
                model=model,
                flow=flow,
                status=state.status,
                total=end - start,
                keys=keys[(endpoint, model)][start:end],
            )
            save_record(record, home)
            records.append(record)
            start = end
    return records


def _update(record: BatchRecord, state: BatchState) -> None:
    record.status = state.status
    record.total = state.total or record.total
    record.completed, record.failed = state.completed, state.failed


def _line_error(line: Mapping[str, Any]) -> str:
    error = line.get("error") or (line.get("response") or {}).get("body", {}).get("error") or {}
    if isinstance(error, Mapping):
        return str(error.get("message") or error.get("code") or "no reason given")
    return str(error)


def collect(
    api: BatchAPI, record: BatchRecord, cache: CallCache, home: Any, provider: Provider
) -> None:
    """Read a finished batch's answers into the cache and its failures into the record. Each
    answer is priced at the batch rate (:data:`BATCH_RATE` of the provider's price).

    Raises:
        ProviderError: a result file cannot be downloaded (the record stays uncollected).
    """
    state = api.status(record.id)
    _update(record, state)
    answers: dict[str, Generation] = {}
    failures: dict[str, str] = {}
    for file_id in (state.output_file_id, state.error_file_id):
        if not file_id:
            continue
        for raw in api.download(file_id).splitlines():
            if not raw.strip():
                continue
            line = orjson.loads(raw)
            key = str(line.get("custom_id", ""))
            response = line.get("response") or {}
            if response.get("status_code") == 200:
                try:
                    gen = api.answer(record.endpoint, record.model, response.get("body") or {})
                except ProviderError as exc:
                    failures[key] = str(exc)
                    continue
                # The batch rate; NaN (an unknown price) stays NaN, never 0.
                gen.cost = provider.cost(gen) * BATCH_RATE
                answers[key] = gen
            else:
                status = response.get("status_code")
                failures[key] = f"{status}: {_line_error(line)}" if status else _line_error(line)
    cache.put_many(answers.items())  # one transaction for the whole file
    why = "; ".join(state.errors)  # a batch-level failure (a file it refused, ...)
    for key in record.keys:
        if key not in answers and key not in failures:
            failures[key] = f"the batch ended {record.status} before this request ran" + (
                f" ({why})" if why else ""
            )
    record.failures = failures
    record.collected = True
    save_record(record, home)


def _wait(
    api: BatchAPI,
    records: list[BatchRecord],
    home: Any,
    every: float,
    deadline: float | None,
    bar: Any,
) -> bool:
    """Poll ``records`` until every one has ended (True), or ``deadline`` passed or Ctrl-C was
    pressed (False: the batches keep running at the provider)."""
    try:
        while True:
            for record in records:
                if record.status not in FINAL_STATES:
                    _update(record, api.status(record.id))
                    save_record(record, home)
            if bar is not None:
                bar.n = sum(r.completed + r.failed for r in records)
                states = sorted({r.status for r in records})
                bar.set_postfix_str(f"{len(records)} batch(es): {', '.join(states)}", refresh=False)
                bar.refresh()
            if all(r.status in FINAL_STATES for r in records):
                return True
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            pause = every if deadline is None else min(every, deadline - now)
            time.sleep(max(pause, 0.0))
    except KeyboardInterrupt:
        return False


class _FromBatches(Provider):
    """The final pass's provider: text answers come from the cache (the batches filled it);
    a text call a batch did not answer fails with why; images (and text calls no batch held,
    such as those fed by an image) go to the real provider, live."""

    name: ClassVar[str] = "batch"

    def __init__(self, real: Provider, cache: CallCache, reasons: Mapping[str, tuple[int, str]]):
        self.real = real
        self.cache = cache
        self.reasons = reasons
        self._prefixes: dict[tuple[int, str | None], bytes] = {}

    def identity(self) -> Mapping[str, Any]:
        return self.real.identity()  # the same cache keys as the real provider's

    def banner(self) -> str:
        return self.real.banner()

    def check_params(self, kind: Any, params: Mapping[str, Any], node: str) -> None:
        self.real.check_params(kind, params, node)

    async def generate(self, call: Call) -> Generation:
        if call.kind == "text":
            slot = (id(call.params), call.system)
            prefix = self._prefixes.get(slot)
            if prefix is None:
                prefix = self.cache.prefix(self.identity(), call.kind, call.params, call.system)
                self._prefixes[slot] = prefix
            reason = self.reasons.get(self.cache.key(prefix, call.prompt))
            if reason is not None:
                raise ProviderError(reason[1], status=reason[0], provider=self.real.name)
        return await self.real.generate(call)

    async def aclose(self) -> None:
        await self.real.aclose()


def prefill(
    flow: LocalFlow,
    rows: Sequence[Mapping[str, str]],
    *,
    poll: float | None = None,
    progress: bool = True,
) -> dict[str, tuple[int, str]]:
    """Put the answers of ``flow``'s text calls over ``rows`` in the cache through the provider's
    batch API (only the calls the cache lacks; batches still running are waited for, not sent
    again). Returns, by cache key, why a call has no answer yet: ``(202, ...)`` still running,
    ``(410, ...)`` the batch failed it.

    Raises:
        ConfigError: the provider has no batch API, or the cache is off.
        ProviderError: a batch could not be submitted or read.
    """
    provider, cache = flow.provider, flow.engine.cache
    api = provider.batch_api()
    if api is None:
        raise ConfigError(
            f"the {provider.name} provider has no batch API; batch_api=True works with openai"
        )
    if cache is None:
        raise ConfigError(
            "batch_api=True needs the call cache (the batches' answers arrive through it): "
            "turn it on (FLOWNB_CACHE=1, no --no-cache)"
        )
    home = flow.config.home
    deadline = None if poll is None else time.monotonic() + poll
    reasons: dict[str, tuple[int, str]] = {}
    bar = _bar(flow.name) if progress else None
    try:
        for _stage in range(len(flow.plan.levels) + 1):
            calls = _calls(flow.plan, provider, cache, rows)
            if not calls:
                break
            mine = [r for r in load_records(home) if r.base_url == api.base_url]
            open_ = [r for r in mine if not r.collected]
            covered = {k for r in open_ for k in r.keys}
            fresh = {k: c for k, c in calls.items() if k not in covered}
            if fresh:
                open_ += _submit(api, fresh, provider, flow.name, home)
            active = [r for r in open_ if not calls.keys().isdisjoint(r.keys)]
            if bar is not None:
                bar.total = sum(r.total or len(r.keys) for r in active)
            ended = _wait(api, active, home, flow.config.batch_poll, deadline, bar)
            for record in active:
                if record.status in FINAL_STATES:
                    collect(api, record, cache, home, provider)
                    for key, why in record.failures.items():
                        reasons[key] = (_GONE, f"provider batch {record.id}: {why}")
                else:
                    note = (
                        f"waiting in provider batch {record.id} ({record.status}, "
                        f"{record.completed}/{record.total or len(record.keys)} done); "
                        "run again to collect it"
                    )
                    reasons.update(dict.fromkeys(record.keys, (_PENDING, note)))
            if not ended or any(k in reasons for k in calls) or not flow.plan.chained:
                break  # missing answers hold back the levels below (and unchained, none wait)
    finally:
        if bar is not None:
            bar.close()
    return reasons


def run_dataframe_batched(
    flow: LocalFlow,
    df: pd.DataFrame,
    columns: Mapping[str, str] | None = None,
    *,
    poll: float | None = None,
    spelling: Spelling = PYTHON,
    **options: Unpack[FrameOptions],
) -> pd.DataFrame:
    """Run ``flow`` over ``df`` through its provider's batch API (see the module docstring),
    with ``options`` (see :class:`~flownb.hooks.FrameOptions`).
    ``poll`` is how many seconds to wait for the batches (None: until they end; 0: submit and
    return); Ctrl-C while waiting returns at once, leaving them running.

    Returns:
        What ``flow.run_dataframe`` returns for the same frame; rows whose answers are not in
        (yet) are named in ``error_column``.

    Raises:
        ConfigError: the provider has no batch API, or the cache is off.
        InputError: columns missing or cells empty without ``fill``.
        ProviderError: a batch could not be submitted or read.
    """
    provider, cache = flow.provider, flow.engine.cache
    rows = rows_to_variables(df, flow.variables, columns, options.get("fill"), spelling=spelling)
    reasons = prefill(flow, rows, poll=poll, progress=options.get("progress", True))
    # Named (and able) like the real provider, so results and checks read as a plain run's.
    kind = type(
        "FromBatches",
        (_FromBatches,),
        {"name": provider.name, "supports_images": provider.supports_images},
    )
    final = type(flow)(
        flow.graph,
        name=flow.name,
        config=flow.config,
        provider=kind(provider, cache, reasons),
        media_url=flow.media_url,
        source=flow.source,
    )
    return run_dataframe(final, df, columns, spelling=spelling, **options)


def _bar(name: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=0, desc=f"{name} (provider batch)", unit="req", leave=True)
