"""The contract's routes (describe, run) and the flow list, on one router.

Every route of :func:`flow_router` needs a key: :func:`create_app` includes the router with the
authentication dependency (:mod:`flownb.server.auth`), so no route checks a key by hand. The run
route reads its body itself (a size cap, a time limit, decoded once, large bodies off the event
loop), validates the whole batch, then answers as JSON or, when asked, as an event stream
(:mod:`flownb.server.sse`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from ..flowfile.model import describe
from ..providers.calls import Gate
from ..runtime.pipeline import INLINE_ON_LOOP, Outcomes
from .body import _is_json, checked_variables, read_body
from .caps import CAP_STATE, spend_gate
from .errors import ApiProblem, batch_problem, json_response, log
from .offload import DecodePool, needs_worker, raise_from
from .request_id import _rid
from .schemas import FLOW_ROUTE_RESPONSES, FLOWS_RESPONSES, RUN_REQUEST_BODY, RUN_RESPONSES
from .service import ServerConfig, current_request
from .sse import streamed_run
from .store import FlowStore, StoredFlow

__all__ = ["OFFLOAD_BYTES", "flow_router"]

# Bodies over this size are decoded and validated in a worker thread, and answers for batches
# over INLINE_ON_LOOP elements encoded there: a big body must not stall /healthz.
OFFLOAD_BYTES = 64 * 1024

FlowId = Annotated[
    str,
    Path(
        description="The flow's id: the name of its file in the server's flows folder, less .json."
    ),
]


def flow_router(config: ServerConfig, decoders: DecodePool) -> APIRouter:
    """Return the router of the flow routes: ``GET /api/flows``, ``GET
    /api/flows/getFlowInfo/{flow_id}`` and ``POST /api/flows/run/{flow_id}``. It checks no key
    itself: include it with the authentication dependency."""
    router = APIRouter(tags=["flows"])
    store = config.store
    limits = {
        "x-flownb-max-batch": str(config.max_batch),
        "x-flownb-max-body-bytes": str(config.max_body_bytes),
    }

    @router.get(
        "/api/flows",
        summary="List the flows this server serves: id, name, variables, outputs",
        operation_id="listFlows",
        responses=FLOWS_RESPONSES,
        response_model=None,
    )
    async def list_flows(request: Request) -> Response:
        flows, failed = await run_in_threadpool(store.loadable)
        for message in failed.values():  # each names its flow id
            log.warning("request %s: left out of the flow list: %s", _rid(request), message)
        return json_response(
            [
                {
                    "id": f.flow_id,
                    "name": f.name,
                    "variables": list(f.plan.variables),
                    "outputs": list(f.plan.outputs),
                }
                for f in flows
            ]
        )

    @router.get(
        "/api/flows/getFlowInfo/{flow_id:path}",
        summary="Describe a flow: its variables and outputs",
        operation_id="getFlowInfo",
        responses=FLOW_ROUTE_RESPONSES,
        response_model=None,
    )
    async def get_flow_info(flow_id: FlowId) -> Response:
        flow = await _get_flow(store, flow_id)
        headers = {**limits, "x-flownb-image-outputs": flow.image_outputs}
        return json_response(describe(flow.plan.variables, flow.plan.outputs), headers=headers)

    @router.post(
        "/api/flows/run/{flow_id:path}",
        summary="Run a flow once (object) or once per element (array)",
        operation_id="runFlow",
        responses=RUN_RESPONSES,
        response_model=None,
        openapi_extra={"requestBody": RUN_REQUEST_BODY},
    )
    async def run_flow(request: Request, flow_id: FlowId) -> Response:
        if not _is_json(request.headers.get("content-type")):
            raise ApiProblem(
                415,
                "unsupported_media_type",
                "send the body as JSON, with the header Content-Type: application/json",
            )
        flow = await _get_flow(store, flow_id)
        body = await read_body(request, config.max_body_bytes, config.body_timeout)
        variables = await _checked(body, config.max_batch, flow, decoders)
        single = isinstance(variables, dict)
        batch: list[Any] = [variables] if isinstance(variables, dict) else variables
        if not batch:
            return json_response([])
        # Work stays in proportion to what a provider would accept: a prompt longer than it
        # takes is a 422 before anything runs.
        flow.runner.engine.check_prompts(batch, indexed=not single)
        current_request.set(request)  # media URLs use the address this caller used
        cap = getattr(request.state, CAP_STATE, None)  # the key's spend cap (server/caps.py)
        gate = None if cap is None else spend_gate(cap, flow)
        streamed = streamed_run(  # the event-stream extension (server/sse.py), if asked for
            request.headers.get("accept"),
            flow.runner,
            batch,
            single=single,
            request_id=_rid(request),
            partial_items=partial_items,
            gate=gate,  # a capped key's stream is held within its cap as its JSON runs are
        )
        if streamed is not None:
            return streamed
        return await _run_as_json(request, flow, batch, single=single, gate=gate)

    return router


async def _get_flow(store: FlowStore, flow_id: str) -> StoredFlow:
    """Return a flow: answered from memory when loaded, else its file read in a worker thread.

    Raises:
        FlowNotFound, FlowFileError: as :meth:`FlowStore.get`.
    """
    flow = store.peek(flow_id)
    return flow if flow is not None else await run_in_threadpool(store.get, flow_id)


async def _checked(
    body: bytes, max_batch: int, flow: StoredFlow, decoders: DecodePool
) -> dict[str, Any] | list[Any]:
    """Return the run's variables, decoded and checked: small bodies on the loop, large ones in
    a worker thread, ones with very many members in a worker process.

    Raises:
        ApiProblem: 400 not JSON, 422 wrong shape or variables (every problem listed).
    """
    names = flow.plan.spec.names
    if len(body) <= OFFLOAD_BYTES:
        return checked_variables(body, max_batch, names)
    if not needs_worker(body):
        return await run_in_threadpool(checked_variables, body, max_batch, names)
    outcome, value = await asyncio.wrap_future(
        decoders.submit(checked_variables, body, max_batch, names)
    )
    if outcome == "error":
        raise_from(value)
    return value


async def _run_as_json(
    request: Request, flow: StoredFlow, batch: list[Any], *, single: bool, gate: Gate | None = None
) -> Response:
    """Run a validated batch (each provider attempt entering ``gate``: a key's spend cap) and
    answer the contract's JSON (499, sent nowhere, when the client left first).

    Raises:
        ApiProblem: some elements failed; ``results`` keeps the others' outputs (paid for).
    """
    collect = Outcomes(len(batch))
    work = flow.runner.arun(batch, collect, gate=gate)
    if flow.runner.on_loop(len(batch)):
        await work  # done on the loop before anything could notice a disconnect
    elif not await _while_connected(request, work):
        log.info(
            "request %s: the client went away; its run was stopped (calls in flight ended)",
            _rid(request),
        )
        return Response(status_code=499)  # sent nowhere: no one is listening
    results = collect.results
    if collect.errors:
        # A failed element keeps the outputs of its nodes that succeeded (paid for).
        items = [
            r.to_items() if r is not None else partial_items(collect.errors.get(i))
            for i, r in enumerate(results)
        ]
        raise batch_problem(collect.errors, items, _rid(request), indexed=not single)
    if single:
        return json_response(results[0].to_items())  # type: ignore[union-attr]
    answer = [r.to_items() for r in results]  # type: ignore[union-attr]
    if len(answer) > INLINE_ON_LOOP:
        return await run_in_threadpool(json_response, answer)
    return json_response(answer)


async def _while_connected(request: Request, work: Coroutine[Any, Any, None]) -> bool:
    """Run ``work`` while the client is still there: return True when it finished, False when
    the client disconnected first (``work`` is then cancelled, and waited for: a run lets its
    calls in flight end, paid for, into the cache and run log). When this request is itself
    cancelled (the server's graceful shutdown ran out of time), ``work`` is cancelled too.

    Raises:
        Exception: whatever ``work`` raised.
    """
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
            # Waited for: an inline run in a thread stops at its next element, not at once.
            await asyncio.wait({task})
    if task.cancelled():
        return False
    task.result()
    return True


async def _disconnected(request: Request) -> None:
    """Return when the client disconnects. Called once the body is read, so every message
    left to receive is the disconnect (the server sends it when the connection drops)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def partial_items(exc: BaseException | None) -> list[dict[str, str]] | None:
    """Return the run items a failed element kept (outputs of the nodes that succeeded), or
    ``None`` when it kept none."""
    partial = getattr(exc, "partial", None)
    return partial.to_items() if partial else None
