"""The FastAPI app of ``flownb serve``: the contract's two routes, images, docs, health.

Per request the hot path is: one stat of the key file and a constant-time digest comparison,
one stat of the flow file (the parsed plan is kept until the file changes), the body read with a
size cap and decoded once, the whole batch validated, the batch handed to the flow's
:class:`~flownb.runtime.pipeline.Runner` (the same pipeline local runs take: small offline batches
on the
loop, larger ones in a thread, provider calls on the loop), and the JSON encoded once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Unpack

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Route

from .._version import __version__
from ..config.options import RunOptions, check_run_options
from ..config.settings import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_BODY,
    imported_serve_config,
    resolve_run_config,
    resolve_serve_limits,
)
from ..errors import ConfigError, FlowFileError, FlownbError
from ..flowfile.model import describe
from ..infra.media import MediaStore
from ..providers.base import Provider
from ..providers.calls import Gate
from ..providers.registry import make_provider
from ..providers.spend import SpendCap, SpendGate, check_cappable
from ..providers.warmup import wait_warm_up
from ..runtime.cache import open_cache
from ..runtime.engine import Plan
from ..runtime.pipeline import INLINE_ON_LOOP, Outcomes, Runner, assemble
from ..runtime.runlog import open_runlog
from ..show.meter import usd
from . import keys as keys_module
from .body import (
    _is_json,
    checked_variables,
    parse_run_body,
    read_body,
)
from .errors import (
    ApiProblem,
    batch_problem,
    error_response,
    from_exception,
    json_response,
    log,
)
from .keys import KeyStore, Verdict
from .offload import DecodePool, needs_worker, raise_from
from .request_id import RequestIdMiddleware, _rid
from .routes_service import _add_health_route, _add_media_route, _openapi
from .schemas import (
    FLOW_ROUTE_RESPONSES,
    FLOWS_RESPONSES,
    RUN_REQUEST_BODY,
    RUN_RESPONSES,
)
from .sse import streamed_run
from .store import FlowStore, StoredFlow

__all__ = ["ServerConfig", "app_from_env", "checked_variables", "create_app", "parse_run_body"]


# Bodies over this size are decoded and validated in a worker thread, and answers for batches
# over INLINE_ON_LOOP elements encoded there: a big body must not stall /healthz.
OFFLOAD_BYTES = 64 * 1024


_FLOW_PATHS = ("/api/flows/getFlowInfo/", "/api/flows/run/")


_SECURITY: dict[str, Any] = {"security": [{"ApiKeyAuth": []}]}


# Documented by hand: the handlers read it from path_params (no per-request parameter solving).
_FLOW_ID_PARAM = {
    "name": "flow_id",
    "in": "path",
    "required": True,
    "description": "The flow's id: the name of its file in the server's flows folder, less .json.",
    "schema": {"type": "string"},
}


class ServerConfig:
    """What one server serves and with what: flows folder, provider, keys, media, limits.

    Settings are resolved once, here (explicit argument > environment > default; ``options``
    are the run settings, :class:`~flownb.config.options.RunOptions`): the server's
    call cache and run log are off unless ``FLOWNB_SERVER_CACHE=1`` / ``FLOWNB_SERVER_RUNLOG=1``
    (or ``cache=`` / ``log=``), since a server answers many callers and keeping their inputs
    and outputs is its operator's decision.

    Raises:
        ConfigError: a limit below 1, or a provider that cannot be set up.
    """

    def __init__(
        self,
        flows_dir: str | Path,
        *,
        provider: Provider | str | None = None,
        home: str | Path | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_body_bytes: int = DEFAULT_MAX_BODY,
        body_timeout: float | None = None,
        media_max_bytes: int | None = None,
        public_url: str | None = None,
        **options: Unpack[RunOptions],
    ) -> None:
        if max_batch < 1 or max_body_bytes < 1:
            raise ConfigError("--max-batch and --max-body-bytes must be at least 1")
        check_run_options(dict(options), "ServerConfig")
        serving = resolve_serve_limits(body_timeout=body_timeout, public_url=public_url)
        self.body_timeout = serving.body_timeout
        self.public_url = serving.public_url
        self.run_config = resolve_run_config(
            provider=provider if isinstance(provider, str) else None,
            home=home,
            server=True,
            media_max=media_max_bytes,
            **options,
        )
        self.home = self.run_config.home
        self.media = MediaStore(self.run_config.media_dir, max_bytes=self.run_config.media_max)
        self.provider: Provider = (
            provider if isinstance(provider, Provider) else make_provider(self.run_config)
        )
        self.store = FlowStore(flows_dir, self._runner)
        self.keys = KeyStore(self.home)
        self.max_batch = max_batch
        self.max_body_bytes = max_body_bytes
        self.concurrency = self.run_config.concurrency
        use_cache = self.run_config.cache and self.provider.cacheable
        self.cache = open_cache(self.home) if use_cache else None
        self.runlog = open_runlog(self.home) if self.run_config.runlog else None

    def _runner(self, flow_id: str, plan: Plan) -> Runner:
        # One engine per version of a flow file (its pacing spans requests), assembled as a
        # local flow's is; media URLs are made from the public URL, else the address the current
        # request reached (a context variable set per request).
        public = self.public_url

        def media_url(name: str) -> str:
            return _media_url(name, public)

        return assemble(plan, self.provider, self.run_config, name=flow_id, media_url=media_url)


_current_request: ContextVar[Request | None] = ContextVar("flownb_request", default=None)


def _media_url(name: str, public_url: str | None) -> str:
    """Return the URL of a media file in an answer: under ``public_url`` when the operator set
    one, else at the address and port the request's connection reached (never the ``Host``
    header, which the caller writes), else relative."""
    if public_url:
        return f"{public_url}/media/{name}"
    request = _current_request.get()
    server = request.scope.get("server") if request is not None else None
    if not server or server[1] is None:
        return f"/media/{name}"  # a Unix socket: no address to name
    host, port = server
    shown = f"[{host}]" if ":" in str(host) else host
    scheme = request.url.scheme if request is not None else "http"
    return f"{scheme}://{shown}:{port}/media/{name}"


def create_app(config: ServerConfig) -> FastAPI:
    """Return the ASGI app serving ``config``'s flows: the error answers, the flow routes, the
    images, the health check and the OpenAPI document, each group added by a function below."""
    decoders = DecodePool()
    # FastAPIOffline: /docs served from bundled Swagger UI files, so it works without internet.
    app = FastAPIOffline(
        redoc_url=None,
        title="flownb flow execution service",
        version=__version__,
        description=(
            "Runs the flows of a folder of exported flow files, as the flow execution service "
            "contract describes. Send your API key in the `x-api-key` header; create one with "
            "`flownb keys create --name NAME`."
        ),
        lifespan=_lifespan(config, decoders),
    )
    app.add_middleware(RequestIdMiddleware)
    _add_error_handlers(app)
    run_flow, get_flow_info = _add_flow_routes(app, config, decoders)
    _add_media_route(app, config.media)
    _add_health_route(app, config.provider)
    app.openapi = _openapi(app)  # type: ignore[method-assign]
    _mount_hot_routes(app, run_flow, get_flow_info)
    return app


def _lifespan(
    config: ServerConfig, decoders: DecodePool
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Return the app's lifespan: the provider's warm-up finished before it starts; key use
    flushed every FLUSH_EVERY seconds while it runs; at the end the keys flushed, the decoders
    stopped and the provider closed."""
    keys = config.keys
    provider = config.provider

    async def flush_keys_periodically() -> None:
        # `flownb keys list` shows LAST USED at most FLUSH_EVERY seconds stale while we run.
        while True:
            await asyncio.sleep(keys_module.FLUSH_EVERY)
            await run_in_threadpool(keys.flush_used)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # The provider's HTTP client and the price table, imported in the background since the
        # provider was made, are in before the server says it is up: the first request then
        # pays nothing for them (see flownb.providers.warmup).
        await run_in_threadpool(wait_warm_up)
        flusher = asyncio.create_task(flush_keys_periodically())
        try:
            yield
        finally:
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
            keys.flush_used()
            decoders.shutdown()
            await provider.aclose()

    return lifespan


def _add_error_handlers(app: FastAPI) -> None:
    """Answer every error in the contract's JSON shape: flownb's problems, a broken flow file
    (logged), Starlette's 404/405 and a body FastAPI could not read (422)."""

    async def on_problem(request: Request, exc: Exception) -> Response:
        return error_response(from_exception(exc, _rid(request)), _rid(request))

    async def on_flow_file(request: Request, exc: Exception) -> Response:
        log.warning("request %s: %s", _rid(request), exc)
        return error_response(from_exception(exc, _rid(request)), _rid(request))

    async def on_http(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, StarletteHTTPException):  # registered for that class only
            raise exc
        path = request.url.path
        if exc.status_code == 404 and path.startswith(_FLOW_PATHS):
            problem = ApiProblem(404, "flow_not_found", "no such flow")
        elif exc.status_code == 404:
            shown = path if len(path) <= 100 else path[:100] + "..."
            problem = ApiProblem(404, "not_found", f"nothing at {shown!r}; see /docs")
        elif exc.status_code == 405:
            method = "HEAD" if request.scope.get("flownb.head") else request.method
            problem = ApiProblem(
                405,
                "method_not_allowed",
                f"{method} is not allowed here",
                headers=exc.headers,
            )
        else:
            problem = ApiProblem(
                exc.status_code, "http_error", str(exc.detail), headers=exc.headers
            )
        return error_response(problem, _rid(request))

    async def on_validation(request: Request, exc: Exception) -> Response:
        return error_response(
            ApiProblem(422, "invalid_request", "the request does not have the expected shape"),
            _rid(request),
        )

    app.add_exception_handler(FlowFileError, on_flow_file)
    app.add_exception_handler(FlownbError, on_problem)
    app.add_exception_handler(ApiProblem, on_problem)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)


def _add_flow_routes(
    app: FastAPI, config: ServerConfig, decoders: DecodePool
) -> tuple[Callable[[Request], Awaitable[Response]], Callable[[Request], Awaitable[Response]]]:
    """Add the flow routes (list, describe, run; each needs a key); return the run and
    describe handlers, which :func:`_mount_hot_routes` also puts first in the router."""
    keys = config.keys
    store = config.store
    max_batch = config.max_batch
    max_body = config.max_body_bytes
    body_timeout = config.body_timeout
    limits = {"x-flownb-max-batch": str(max_batch), "x-flownb-max-body-bytes": str(max_body)}

    caps = _KeyCaps(keys)

    def authenticate(request: Request) -> Verdict:
        try:
            verdict = keys.check(request.headers.get("x-api-key"))
        except ConfigError as exc:  # a corrupt key file: say so in the log, not to callers
            log.error("request %s: %s", _rid(request), exc.message)
            raise ApiProblem(
                500, "internal_error", "the server cannot read its key file; see its log"
            ) from None
        if not verdict.ok:
            raise ApiProblem(401, verdict.code, verdict.message)
        return verdict

    async def get_flow(request: Request) -> StoredFlow:
        # A loaded flow is answered from memory; a file to read is read in a worker thread.
        flow_id = request.path_params["flow_id"]
        flow = store.peek(flow_id)
        return flow if flow is not None else await run_in_threadpool(store.get, flow_id)

    # -- routes --------------------------------------------------------------------------------

    @app.get(
        "/api/flows",
        summary="List the flows this server serves: id, name, variables, outputs",
        operation_id="listFlows",
        responses=FLOWS_RESPONSES,
        response_model=None,
        openapi_extra=_SECURITY,
        tags=["flows"],
    )
    async def list_flows(request: Request) -> Response:
        authenticate(request)
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

    @app.get(
        "/api/flows/getFlowInfo/{flow_id:path}",
        summary="Describe a flow: its variables and outputs",
        operation_id="getFlowInfo",
        responses=FLOW_ROUTE_RESPONSES,
        response_model=None,
        openapi_extra={**_SECURITY, "parameters": [_FLOW_ID_PARAM]},
        tags=["flows"],
    )
    async def get_flow_info(request: Request) -> Response:
        authenticate(request)
        flow = await get_flow(request)
        headers = {**limits, "x-flownb-image-outputs": flow.image_outputs}
        return json_response(describe(flow.plan.variables, flow.plan.outputs), headers=headers)

    @app.post(
        "/api/flows/run/{flow_id:path}",
        summary="Run a flow once (object) or once per element (array)",
        operation_id="runFlow",
        responses=RUN_RESPONSES,
        response_model=None,
        openapi_extra={
            **_SECURITY,
            "parameters": [_FLOW_ID_PARAM],
            "requestBody": RUN_REQUEST_BODY,
        },
        tags=["flows"],
    )
    async def run_flow(request: Request) -> Response:
        cap = caps.of(authenticate(request))
        if not _is_json(request.headers.get("content-type")):
            raise ApiProblem(
                415,
                "unsupported_media_type",
                "send the body as JSON, with the header Content-Type: application/json",
            )
        flow = await get_flow(request)
        body = await read_body(request, max_body, body_timeout)
        names = flow.plan.spec.names
        if len(body) <= OFFLOAD_BYTES:
            variables = checked_variables(body, max_batch, names)
        elif not needs_worker(body):
            variables = await run_in_threadpool(checked_variables, body, max_batch, names)
        else:
            outcome, value = await asyncio.wrap_future(
                decoders.submit(checked_variables, body, max_batch, names)
            )
            if outcome == "error":
                raise_from(value)
            variables = value
        single = isinstance(variables, dict)
        batch: list[Any] = [variables] if isinstance(variables, dict) else variables
        if not batch:
            return json_response([])
        # Work stays in proportion to what a provider would accept: a prompt longer than it
        # takes is a 422 before anything runs.
        flow.runner.engine.check_prompts(batch, indexed=not single)
        gate = None if cap is None else _spend_gate(cap, flow)

        _current_request.set(request)  # media URLs use the address this caller used
        streamed = streamed_run(  # the event-stream extension (server/sse.py), if asked for
            request.headers.get("accept"),
            flow.runner,
            batch,
            single=single,
            request_id=_rid(request),
            partial_items=_partial_items,
        )
        if streamed is not None:
            if gate is not None:  # the event stream has no gate yet: a capped key's is refused
                raise ApiProblem(
                    406,
                    "not_acceptable",
                    "this API key has a spend cap; its runs are answered as JSON, not as an "
                    "event stream (send Accept: application/json)",
                )
            return streamed
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
                r.to_items() if r is not None else _partial_items(collect.errors.get(i))
                for i, r in enumerate(results)
            ]
            raise batch_problem(collect.errors, items, _rid(request), indexed=not single)
        if single:
            return json_response(results[0].to_items())  # type: ignore[union-attr]
        answer = [r.to_items() for r in results]  # type: ignore[union-attr]
        if len(answer) > INLINE_ON_LOOP:
            return await run_in_threadpool(json_response, answer)
        return json_response(answer)

    return run_flow, get_flow_info


class _KeyCaps:
    """The spend caps of the capped API keys: one :class:`SpendCap` per key in this process,
    its spending read from and written to the key store's ``keys-spent.json`` (so it holds
    across restarts)."""

    def __init__(self, keys: KeyStore) -> None:
        self.keys = keys
        self._caps: dict[str, SpendCap] = {}

    def of(self, verdict: Verdict) -> SpendCap | None:
        """Return the cap of the key ``verdict`` accepted (None: it has none).

        Raises:
            ApiProblem: 402 ``spend_cap_reached``: the key's cap is used up (what is left said).
        """
        if verdict.max_spend is None:
            return None
        cap = self._caps.get(verdict.digest)
        if cap is None:
            key_digest = verdict.digest

            def keep(spent: float) -> None:
                self.keys.record_spent(key_digest, spent)

            spent = self.keys.spent().get(key_digest, 0.0)
            cap = self._caps[key_digest] = SpendCap(verdict.max_spend, spent=spent, on_spent=keep)
        cap.cap = verdict.max_spend  # `flownb keys cap` may have changed it meanwhile
        if cap.left <= 0:
            raise ApiProblem(
                402,
                "spend_cap_reached",
                f"this API key's spend cap of {usd(cap.cap)} is used up ({usd(cap.spent)} spent, "
                f"{usd(cap.left)} left); raise it with: flownb keys cap NAME USD",
            )
        return cap


def _spend_gate(cap: SpendCap, flow: StoredFlow) -> Gate:
    """Return the gate keeping ``flow``'s calls within a key's ``cap``.

    Raises:
        ApiProblem: 402: some call of the flow cannot be priced, so it cannot be capped.
    """
    provider = flow.runner.engine.provider
    nodes = {s.name: (s.kind, s.params, s.system) for s in flow.plan.steps}
    try:
        check_cappable(provider, nodes)
    except ConfigError as exc:
        raise ApiProblem(402, "spend_cap_reached", exc.message) from None
    return SpendGate(cap, provider)


def _mount_hot_routes(app: FastAPI, run_flow: Any, get_flow_info: Any) -> None:
    """Put the two contract routes' handlers first in the router as plain Starlette routes.

    Their handlers take the Request and return a Response, so FastAPI's per-request work for
    them (solving dependencies, an exit stack, scanning a dozen routes before reaching them) buys
    nothing; it was most of the shim's cost against a bare route. FastAPI's routes stay behind
    them for the OpenAPI document (and are never reached for these paths). Same methods as
    before: no HEAD on getFlowInfo, 405 with ``Allow`` for others.
    """
    run = Route("/api/flows/run/{flow_id:path}", run_flow, methods=["POST"])
    info = Route("/api/flows/getFlowInfo/{flow_id:path}", get_flow_info, methods=["GET"])
    for route in (run, info):
        route.include_in_schema = False
        route.methods = {m for m in route.methods or () if m != "HEAD"}
    app.router.routes[:0] = [run, info]


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


def app_from_env() -> FastAPI:
    """Return the app described by ``FLOWNB_SERVE_CONFIG``: the factory each worker process of
    ``flownb serve --workers N`` calls (``flownb.server.app:app_from_env``, uvicorn
    ``factory=True``). The JSON holds :class:`ServerConfig`'s arguments (``flows_dir`` and the
    keyword ones, ``provider`` by name); keys, media and flows are read from the same
    FLOWNB_HOME and folder by every worker.

    Raises:
        ConfigError: the variable is missing or not such a JSON object.
    """
    raw = imported_serve_config()
    try:
        options = json.loads(raw) if raw else None
        if not isinstance(options, dict):
            raise ValueError("not a JSON object")
        return create_app(ServerConfig(options.pop("flows_dir"), **options))
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"FLOWNB_SERVE_CONFIG must be the JSON of flownb serve's options ({exc}); it is set "
            "by `flownb serve --workers N`"
        ) from None


def _partial_items(exc: BaseException | None) -> list[dict[str, str]] | None:
    """Return the run items a failed element kept (outputs of the nodes that succeeded), or
    ``None`` when it kept none."""
    partial = getattr(exc, "partial", None)
    return partial.to_items() if partial else None
