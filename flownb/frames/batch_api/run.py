"""A DataFrame through a provider's batch API (half price, results within 24 hours), resumably.

Every call of a batch is known before anything runs (a generation node depends on variables and
on the nodes above it), so :func:`run_dataframe_batched` works in stages, one per level of the
flow: it renders every row's prompts, keeps the calls the cache does not hold, and hands them to
the provider as batches (one model per batch, split at the provider's size limits; each line's
``custom_id`` is the call's cache key, so a prompt repeated across rows is paid once). It waits,
reads the answers into the cache, and goes on to the next level; each prompt is rendered and
looked up once, its key and answer kept in a table by node and row. When all are in, the frame is
built by the ordinary run around an engine that makes each fully answered row's result straight
from the table, with the engine's own result maker (:mod:`flownb.frames.batch_api.assemble`), and
runs only the other rows: the result is exactly a plain run's, and a re-run costs nothing.

Submitted batches are remembered in ``FLOWNB_HOME`` (:mod:`flownb.frames.batch_api.store`): first as
``submitting``, with the digest of their lines, before the provider is asked, then under the
provider's id the moment it answers, before any waiting starts. A later call for the same calls,
in any process, picks them up instead of paying twice; a ``submitting`` record whose process
died is matched to the batch the provider holds (``BatchAPI.find``), or dropped and its calls
sent again when the provider has none. The final pass logs the answers a batch brought as paid
calls at the batch price, once (:mod:`flownb.frames.batch_api.paid`).

Image nodes have no batch endpoint here and run live in the final pass. What did not come back
(a failed line, an expired batch, a batch still running when ``poll`` ran out or Ctrl-C was
pressed) is named in the row's ``error`` column and submitted again by the next run.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import socket
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from ...config.pricing import BATCH_RATE
from ...errors import ConfigError, ProviderError
from ...flowfile.inputs import PYTHON, Spelling
from ...infra import collector
from ...infra.tracing import batch_span
from ...providers.base import FINAL_STATES, BatchAPI, BatchState, Call, Generation, Provider
from ...providers.calls import Gate, Settle, announce
from ...providers.spend import SpendCap, SpendGate, check_cappable
from ...runtime.plan import step_calls
from ..options import FrameOptions
from ..run import rows_to_variables, run_dataframe
from .assemble import AssembledEngine, FromBatches
from .paid import paid_once
from .store import SUBMITTING, BatchRecord, delete_record, load_records, save_record
from .view import BatchView, open_view

if TYPE_CHECKING:
    import pandas as pd

    from ...core.local import LocalCore
    from ...runtime.cache import CallCache
    from ...runtime.engine import Plan
    from ...show.meter import CostMeter

__all__ = ["prefill", "run_dataframe_batched"]

# HTTP-like statuses on the errors of calls a batch did not answer: none is retried by the run.
_PENDING, _GONE, _CAPPED = 202, 410, 402


class _Table:
    """What a batched run knows of each text call, by step and row: its cache key (``None``:
    not rendered yet, because an answer above it is missing) and its answer (``None``: not in).

    Kept from level to level, so each prompt is rendered and looked up once, and the frame is
    assembled from it at the end without running the rows again."""

    def __init__(self, steps: int, rows: int) -> None:
        self.keys: list[list[str | None]] = [[None] * rows for _ in range(steps)]
        self.gens: list[list[Generation | None]] = [[None] * rows for _ in range(steps)]

    def fill(self, answers: Mapping[str, Generation]) -> None:
        """Put ``answers`` (by cache key) into every cell that asked for them."""
        if not answers:
            return
        for keys, gens in zip(self.keys, self.gens, strict=True):
            for r, key in enumerate(keys):
                if key is not None and gens[r] is None:
                    gens[r] = answers.get(key)

    def complete(self) -> list[bool]:
        """Return, per row, whether every step has its answer."""
        done = [True] * (len(self.gens[0]) if self.gens else 0)
        for gens in self.gens:
            for r, gen in enumerate(gens):
                if gen is None:
                    done[r] = False
        return done


def _calls(
    plan: Plan,
    provider: Provider,
    cache: CallCache,
    rows: Sequence[Mapping[str, str]],
    table: _Table,
) -> dict[str, Call]:
    """Render the text calls of ``rows`` whose inputs are known (their upstream nodes'
    answers are in ``table``) and not rendered before, put their keys and the answers the
    cache holds into ``table``, and return the calls the cache lacks, by cache key.

    A prompt longer than the provider takes is left out (its row fails in the final pass, as
    in a plain run, without paying for an answer nobody reads)."""
    found: dict[str, Call] = {}
    limits = provider.prompt_limits
    for level in plan.levels:  # a level's prompts need the answers of the levels above
        fresh: list[tuple[list[Generation | None], int, str]] = []
        nodes = [  # images run live in the final pass
            (
                node,
                table.keys[step.index],
                table.gens[step.index],
                [(plan.steps[u].name, table.gens[u]) for u in step.upstream],
                limits[step.kind],
            )
            for step, node in ((s, step_calls(provider, s)) for s in level)
            if step.kind == "text"
        ]
        for r, values in enumerate(rows):  # each row's variables made once for the level
            for node, keys, gens, ups, limit in nodes:
                if keys[r] is not None:
                    continue
                ctx: Mapping[str, str] = values
                if ups:
                    if any(above[r] is None for _, above in ups):
                        continue  # waits for the answers above it
                    ctx = {name: above[r].output for name, above in ups}  # type: ignore[union-attr]
                    ctx.update(values)
                prompt = node.render(ctx)
                if len(prompt) > limit:
                    continue
                key = keys[r] = node.key(prompt)
                fresh.append((gens, r, key))
                if key not in found:
                    found[key] = node.call(prompt)
        hits = cache.get_many(key for _, _, key in fresh)
        for gens, r, key in fresh:
            hit = hits.get(key)
            if hit is not None:
                gens[r] = hit
                found.pop(key, None)
    return found


def _submit(
    api: BatchAPI, calls: Mapping[str, Call], provider: Provider, flow: str, home: Any
) -> list[BatchRecord]:
    """Submit ``calls`` as batches (one per endpoint and model, split at the API's limits) and
    remember each: first as ``submitting`` (with its lines' digest) before the provider is
    asked, then under its id the moment the provider answers.

    Raises:
        ProviderError: the provider refused a batch (those created before it stay recorded).
    """
    groups: dict[tuple[str, str], list[bytes]] = {}
    keys: dict[tuple[str, str], list[str]] = {}
    for key, (endpoint, model, line) in zip(calls, api.lines(calls.items()), strict=True):
        groups.setdefault((endpoint, model), []).append(line)
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
            chunk = lines[start:end]
            digest = hashlib.sha256(b"\n".join(chunk)).hexdigest()
            pending = BatchRecord(
                id=f"pending-{digest[:32]}",
                provider=provider.name,
                base_url=api.base_url,
                endpoint=endpoint,
                model=model,
                flow=flow,
                status=SUBMITTING,
                total=end - start,
                keys=keys[(endpoint, model)][start:end],
                digest=digest,
                pid=os.getpid(),
                host=socket.gethostname(),
                logged=False,
            )
            save_record(pending, home)
            try:
                state = api.submit(chunk, endpoint, {"flownb_flow": flow, "flownb_digest": digest})
            except ProviderError as exc:
                if exc.status is not None and 400 <= exc.status < 500:
                    delete_record(pending, home)  # refused: no batch exists
                raise  # else it may exist: the next run looks for it by its digest
            record = pending.model_copy(update={"id": state.id, "status": state.status, "pid": 0})
            save_record(record, home)
            delete_record(pending, home)
            records.append(record)
            start = end
    return records


# How long a submission by a process this one cannot ask about (another host sharing
# FLOWNB_HOME, a system without signal 0) is taken to be still under way: a create answers in
# seconds, so one older than this was abandoned.
_OTHERS_GRACE = 600.0


def _alive(record: BatchRecord) -> bool:
    """Whether the process that is submitting ``record`` may still be at it: on this host,
    whether it runs; elsewhere (or where that cannot be asked), whether the record is recent."""
    if record.pid in (0, os.getpid()):
        return False  # this process's own leftover (an earlier call that failed mid-way)
    if record.host != socket.gethostname() or os.name != "posix":
        return time.time() - record.created < _OTHERS_GRACE
    try:
        os.kill(record.pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    # A process that started after the record was written is not its writer but a later one
    # given the dead writer's number.
    return not _started_after(record.pid, record.created)


# Seconds of doubt in a process's start time read from /proc (the boot time is whole seconds).
_START_SLACK = 2.0


def _started_after(pid: int, when: float) -> bool:
    """Return whether process ``pid`` started after ``when`` (seconds since the epoch); False
    where that cannot be read (no ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        # starttime is field 22, in clock ticks after boot; fields are counted after the
        # command name, which may hold spaces and parentheses of its own.
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, StopIteration, ValueError, IndexError):
        return False
    return boot + ticks / os.sysconf("SC_CLK_TCK") > when + _START_SLACK


def _adopt(api: BatchAPI, records: list[BatchRecord], home: Any) -> list[BatchRecord]:
    """Return ``records`` with each abandoned ``submitting`` one (its process died before the
    provider's answer was recorded) replaced by the batch the provider holds under its digest,
    or dropped when the provider has none (its calls are then submitted again). Submissions of
    live processes are kept as they are.

    Raises:
        ProviderError: the provider's batches could not be listed (it names the record to
            delete once the user has checked, rather than risk paying twice).
    """
    out = []
    known = {r.id for r in records}
    for record in records:
        if record.status != SUBMITTING or _alive(record):
            out.append(record)
            continue
        try:
            candidates = api.find(record.digest, record.created, record.total)
        except ProviderError as exc:
            # Never guess: submitting again could pay twice for a batch that exists.
            raise ProviderError(
                f"a run that stopped while submitting batch {record.id} may have created it, and "
                f"the provider's batches could not be listed to find it ({exc}); once you have "
                f"checked, delete {home}/batches/{record.id}.json to submit its calls again",
                status=exc.status,
                provider=exc.provider,
            ) from exc
        found = [s for s in candidates if s.id not in known]
        if found:
            adopted = record.model_copy(update={"id": found[0].id, "pid": 0})
            _update(adopted, found[0])
            save_record(adopted, home)
            known.add(adopted.id)
            out.append(adopted)
        delete_record(record, home)
    return out


def _update(record: BatchRecord, state: BatchState) -> None:
    record.status = state.status
    record.total = state.total or record.total
    record.completed, record.failed = state.completed, state.failed


def collect(
    api: BatchAPI,
    record: BatchRecord,
    cache: CallCache,
    home: Any,
    provider: Provider,
    state: BatchState | None = None,
) -> dict[str, Generation]:
    """Read a finished batch's answers into the cache and its failures into the record. Each
    answer is priced at the batch rate (:data:`BATCH_RATE` of the provider's price).
    ``state`` is the batch's final state when just read (else it is asked for).

    Returns:
        The answers by cache key, each as a lookup of the cache would return it (``cached``,
        no rate limits, no response id), for the frame to be assembled from.

    Raises:
        ProviderError: the results cannot be read (the record stays uncollected).
    """
    if state is None:
        state = api.status(record.id)
    _update(record, state)
    answers: dict[str, Generation] = {}
    failures: dict[str, str] = {}
    # A call's price depends on its model and usage alone: answers that used the same tokens
    # (short labels, say) are priced once.
    prices: dict[tuple[str | None, tuple[tuple[str, int], ...]], float] = {}
    for key, got in api.results(state, record.endpoint, record.model):
        if isinstance(got, str):
            failures[key] = got
            continue
        # The batch rate; NaN (an unknown price) stays NaN, never 0.
        got.cost = None
        saved = provider.prompt_cache_saving(got)  # at the live price, then the batch rate
        got.prompt_cache_saved = None if saved is None else saved * BATCH_RATE
        if got.usage is None or got.priced_as is not None:
            got.cost = provider.cost(got) * BATCH_RATE
        else:
            spent = (got.model, tuple(got.usage.items()))
            cost = prices.get(spent)
            if cost is None:
                cost = prices[spent] = provider.cost(got) * BATCH_RATE
            got.cost = cost
        # From now on, what the cache will give back for it.
        got.cached, got.limits, got.response_id = True, None, None
        answers[key] = got
    cache.put_answers(answers.items())  # one transaction for the whole batch
    # The batch's usage in the trace, once, as the run log counts its answers.
    batch_span(provider.name, record.model, record.id, answers.values(), record.created)
    why = "; ".join(state.errors)  # a batch-level failure (a file it refused, ...)
    for key in record.keys:
        if key not in answers and key not in failures:
            failures[key] = f"the batch ended {record.status} before this request ran" + (
                f" ({why})" if why else ""
            )
    record.failures = failures
    record.collected = True
    save_record(record, home)
    return answers


def _wait(
    api: BatchAPI,
    records: list[BatchRecord],
    home: Any,
    every: float,
    deadline: float | None,
    view: BatchView | None,
    ended: dict[str, BatchState],
) -> bool:
    """Poll ``records`` until every one has ended (True), or ``deadline`` passed or Ctrl-C was
    pressed (False: the batches keep running at the provider). The last state read of each
    batch that ended goes into ``ended``, by id."""
    try:
        while True:
            for record in records:
                if record.status not in FINAL_STATES:
                    seen = (record.status, record.total, record.completed, record.failed)
                    state = api.status(record.id)
                    _update(record, state)
                    if state.status in FINAL_STATES:
                        ended[record.id] = state
                    # Written again only when it changed (a record holds every call's key),
                    # and not when it ended: collecting it writes it next (a crash before that
                    # leaves it to be asked about again, which is harmless).
                    after = (record.status, record.total, record.completed, record.failed)
                    if after != seen and record.status not in FINAL_STATES:
                        save_record(record, home)
            if view is not None:
                view.update(records)
            if all(r.status in FINAL_STATES for r in records):
                return True
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            pause = every if deadline is None else min(every, deadline - now)
            time.sleep(max(pause, 0.0))
    except KeyboardInterrupt:
        return False


def prefill(
    flow: LocalCore,
    rows: Sequence[Mapping[str, str]],
    *,
    poll: float | None = None,
    progress: bool = True,
    cap: SpendCap | None = None,
) -> dict[str, tuple[int, str]]:
    """Put the answers of ``flow``'s text calls over ``rows`` in the cache through the provider's
    batch API (see :func:`_prefill`), submitting a call only while its bound at the batch price
    fits in ``cap`` (shared by an evaluation's stages). Returns, by cache key, why a call has no
    answer yet: ``(202, ...)`` still running, ``(410, ...)`` the batch failed it, ``(402, ...)``
    the cap left it out.

    Raises:
        ConfigError: the provider has no batch API, or the cache is off.
        ProviderError: a batch could not be submitted or read.
    """
    return _prefill(flow, rows, poll=poll, progress=progress, cap=cap)[0]


def _prefill(
    flow: LocalCore,
    rows: Sequence[Mapping[str, str]],
    *,
    poll: float | None = None,
    progress: bool = True,
    cap: SpendCap | None = None,
) -> tuple[dict[str, tuple[int, str]], _Table]:
    """Put the answers of ``flow``'s text calls over ``rows`` in the cache through the provider's
    batch API (only the calls the cache lacks; batches still running are waited for, not sent
    again). Returns, by cache key, why a call has no answer yet (``(202, ...)`` still running,
    ``(410, ...)`` the batch failed it, ``(402, ...)`` ``cap`` left it unsent), and the table
    of every text call's key and answer.

    Raises:
        ConfigError: the provider has no batch API, or the cache is off.
        ProviderError: a batch could not be submitted or read.
    """
    api, cache = _batch_api_of(flow)
    deadline = None if poll is None else time.monotonic() + poll
    reasons: dict[str, tuple[int, str]] = {}
    taken: dict[str, float] = {}  # the bound each call this run submitted is counted at
    table = _Table(len(flow.plan.steps), len(rows))
    view = open_view(flow.name) if progress else None
    try:
        for _stage in range(len(flow.plan.levels) + 1):
            with collector.paused():
                calls = _calls(flow.plan, flow.provider, cache, rows, table)
            if not calls:
                break
            level = _Level(flow, api, cache, table, reasons, taken)
            ended = level.run(calls, cap, deadline, view)
            if not ended or any(k in reasons for k in calls) or not flow.plan.chained:
                break  # missing answers hold back the levels below (and unchained, none wait)
    finally:
        if view is not None:
            view.close()
    return reasons, table


def _batch_api_of(flow: LocalCore) -> tuple[BatchAPI, Any]:
    """Return ``flow``'s provider's batch API and ``flow``'s call cache.

    Raises:
        ConfigError: the provider has no batch API, or the cache is off.
    """
    provider, cache = flow.provider, flow.engine.cache
    api = provider.batch_api()
    if api is None:
        raise ConfigError(
            f"the {provider.name} provider has no batch API; batch_api=True works with openai "
            "and anthropic"
        )
    if cache is None:
        raise ConfigError(
            "batch_api=True needs the call cache (the batches' answers arrive through it): "
            "turn it on (FLOWNB_CACHE=1, no --no-cache)"
        )
    return api, cache


class _Level:
    """One level of a batched run: its calls sent in batches (those no open batch holds yet),
    waited for, and their answers taken into ``table``; ``reasons`` says why a call has none
    yet."""

    def __init__(
        self,
        flow: LocalCore,
        api: BatchAPI,
        cache: Any,
        table: _Table,
        reasons: dict[str, tuple[int, str]],
        taken: dict[str, float],
    ) -> None:
        self.flow, self.api, self.cache = flow, api, cache
        self.provider, self.home = flow.provider, flow.config.home
        self.table, self.reasons = table, reasons
        self.taken = taken  # the bound each call this run submitted is counted at

    def run(
        self, calls: dict[str, Any], cap: SpendCap | None, deadline: float | None, view: Any
    ) -> bool:
        """Send, wait for and collect ``calls``' batches (within ``cap``; until ``deadline``);
        return whether the batches waited for ended."""
        api, home = self.api, self.home
        mine = [r for r in load_records(home) if r.base_url == api.base_url]
        open_ = _adopt(api, [r for r in mine if not r.collected], home)
        covered = {k for r in open_ for k in r.keys}
        fresh = {k: c for k, c in calls.items() if k not in covered}
        if cap is not None:
            fresh = _within(cap, self.provider, fresh, self.reasons, self.taken)
        if fresh:
            with collector.paused():
                open_ += _submit(api, fresh, self.provider, self.flow.name, home)
        wanted = [r for r in open_ if not calls.keys().isdisjoint(r.keys)]
        for record in wanted:
            if record.status == SUBMITTING:  # another live process is creating it
                note = (
                    f"being submitted as a provider batch by process {record.pid}; "
                    "run again to collect it"
                )
                self.reasons.update(dict.fromkeys(record.keys, (_PENDING, note)))
        active = [r for r in wanted if r.status != SUBMITTING]
        states: dict[str, BatchState] = {}
        poll = self.flow.config.batch_poll
        ended = _wait(api, active, home, poll, deadline, view, states)
        for record in active:
            self._take(record, states.get(record.id), cap)
        return ended

    def _take(self, record: BatchRecord, state: BatchState | None, cap: SpendCap | None) -> None:
        """Take the answers of ``record``'s batch when it ended (settling what this run
        submitted to what it cost, under ``cap``), else say it is waiting."""
        if record.status in FINAL_STATES:
            with collector.paused():
                got = collect(self.api, record, self.cache, self.home, self.provider, state)
                self.table.fill(got)
            if cap is not None:  # what this run submitted, settled to what it cost
                _settle_taken(cap, self.taken, got, record.failures)
            for key, why in record.failures.items():
                self.reasons[key] = (_GONE, f"provider batch {record.id}: {why}")
            return
        note = (
            f"waiting in provider batch {record.id} ({record.status}, "
            f"{record.completed}/{record.total or len(record.keys)} done); "
            "run again to collect it"
        )
        self.reasons.update(dict.fromkeys(record.keys, (_PENDING, note)))


def run_dataframe_batched(
    flow: LocalCore,
    df: pd.DataFrame,
    columns: Mapping[str, str] | None = None,
    *,
    poll: float | None = None,
    spelling: Spelling = PYTHON,
    meter: CostMeter | None = None,
    max_spend: float | None = None,
    **options: Unpack[FrameOptions],
) -> pd.DataFrame:
    """Run ``flow`` over ``df`` through its provider's batch API (see the module docstring),
    with ``options`` (see :class:`~flownb.frames.options.FrameOptions`).
    ``poll`` is how many seconds to wait for the batches (None: until they end; 0: submit and
    return); Ctrl-C while waiting returns at once, leaving them running. ``meter`` counts each
    row's cost (the batch price of the answers this run read from the batches).
    ``max_spend`` (US dollars) caps the run: a call is submitted only while the most it could
    cost at the batch price fits in what is left (each submitted call counts at that bound until
    its batch's results are read, then at what its answer cost), the image calls of the final
    pass are capped as a live run's, and the calls left out are named in ``error_column``
    (``spend_cap_reached``).

    Returns:
        What ``flow.run_dataframe`` returns for the same frame; rows whose answers are not in
        (yet) are named in ``error_column``.

    Raises:
        ConfigError: the provider has no batch API, or the cache is off.
        InputError: columns missing or cells empty without ``fill``.
        ProviderError: a batch could not be submitted or read.
    """
    provider = flow.provider
    rows = rows_to_variables(df, flow.variables, columns, options.get("fill"), spelling=spelling)
    cap = None
    if max_spend is not None:
        cap = SpendCap(max_spend)
        nodes = {s.name: (s.kind, s.params, s.system) for s in flow.plan.steps}
        check_cappable(provider, nodes, batch=True)
    progress = options.get("progress", True)
    try:
        reasons, table = _prefill(flow, rows, poll=poll, progress=progress, cap=cap)
        return _final_pass(flow, df, columns, reasons, table, spelling, meter, cap, options)
    finally:
        if cap is not None:
            announce(cap.line())


def _within(
    cap: SpendCap,
    provider: Provider,
    calls: dict[str, Call],
    reasons: dict[str, tuple[int, str]],
    taken: dict[str, float],
) -> dict[str, Call]:
    """Return the ``calls`` the cap lets through at the batch price (each counted at its bound
    at once, noted in ``taken`` by cache key), in order; the others get their reason (402) in
    ``reasons``."""
    gate = SpendGate(cap, provider, batch=True)
    kept: dict[str, Call] = {}
    for key, call in calls.items():
        most = gate.most(call)
        if cap.take(most):
            kept[key] = call
            taken[key] = most
        else:
            reasons[key] = (_CAPPED, cap.refusal(most).message)
    return kept


def _settle_taken(
    cap: SpendCap, taken: dict[str, float], answers: Mapping[str, Generation], failed: Any
) -> None:
    """Settle the calls of a collected batch that this run counted at their bounds: an answer
    to its cost at the batch price, a line the batch failed or never ran to nothing (vendors
    bill neither). So the cap's line says what was spent, and a later stage (the next level of
    a chained flow) has the room the answers left."""
    for key, gen in answers.items():
        most = taken.pop(key, None)
        if most is not None:
            cost = gen.cost if gen.cost is not None else math.nan
            cap.settle_taken(most, cost)
    for key in failed:
        most = taken.pop(key, None)
        if most is not None:
            cap.settle_taken(most, 0.0)


def _live_calls_within(cap: SpendCap, final: Provider) -> Gate:
    """Return the final pass's gate: the calls sent live (images, text no batch could hold)
    within ``cap``; a text call a batch left unanswered fails with its reason, costing nothing."""
    spend = SpendGate(cap, final.real)  # type: ignore[attr-defined]

    def gate(call: Call) -> AbstractAsyncContextManager[Settle]:
        if final.reason_of(call) is not None:  # type: ignore[attr-defined]
            return _unpaid()
        return spend(call)

    return gate


@contextlib.asynccontextmanager
async def _unpaid() -> AsyncIterator[Settle]:
    yield _ignore


def _ignore(gen: Generation) -> None:
    return None


def _final_pass(
    flow: LocalCore,
    df: pd.DataFrame,
    columns: Mapping[str, str] | None,
    reasons: dict[str, tuple[int, str]],
    table: _Table,
    spelling: Spelling,
    meter: CostMeter | None,
    cap: SpendCap | None,
    options: FrameOptions,
) -> pd.DataFrame:
    """Return the frame of a batched run: the rows the table completes made from it, the
    others run (images live, within ``cap``), what is missing named in the error column."""
    provider, cache = flow.provider, flow.engine.cache
    # Named (and able) like the real provider, so results and checks read as a plain run's.
    kind = type(
        "FromBatches",
        (FromBatches,),
        {
            "name": provider.name,
            "supports_images": provider.supports_images,
            "supports_batches": provider.supports_batches,
        },
    )
    final = flow.with_provider(kind(provider, cache, reasons))
    # The rows every answer of which is in are made from the table, not run again; the others
    # run on the final flow's engine (images live, what is missing named in the error).
    complete = table.complete()
    final.runner.engine = AssembledEngine(  # type: ignore[assignment]
        final.engine, table.gens, table.keys, complete
    )
    # Every row complete: nothing to wait for, a bulk step.
    bulk = collector.paused() if all(complete) else contextlib.nullcontext()
    view = final if cap is None else final.gated(_live_calls_within(cap, final.provider))
    with paid_once([final]), bulk:
        return run_dataframe(view, df, columns, spelling=spelling, meter=meter, **options)
