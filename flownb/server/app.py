"""The FastAPI app of ``flownb serve``: the contract's two routes, images, docs, health.

Per request the hot path is: the key checked by the router's authentication dependency (a
constant-time digest comparison; the key file looked at no more than once a second), the flow
found in memory (its file looked at no more than once a second), the body read with a size cap
and decoded once, the whole batch validated, the batch handed to the flow's
:class:`~flownb.runtime.pipeline.Runner` (the same pipeline local runs take: small offline batches
on the loop, larger ones in a thread, provider calls on the loop), and the JSON encoded once.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from .._version import __version__
from ..config.settings import imported_serve_config
from ..errors import ConfigError, FlowFileError, FlownbError
from ..providers.warmup import wait_warm_up
from . import keys as keys_module
from .auth import KeyCheck
from .body import checked_variables, parse_run_body
from .caps import KeyCaps
from .errors import ApiProblem, error_response, from_exception, log
from .guarded import Guard, include_guarded
from .offload import DecodePool
from .request_id import RequestIdMiddleware, _rid
from .routes_flows import flow_router
from .routes_service import _add_health_route, _add_media_route, _openapi
from .service import ServerConfig

__all__ = ["ServerConfig", "app_from_env", "checked_variables", "create_app", "parse_run_body"]


_FLOW_PATHS = ("/api/flows/getFlowInfo/", "/api/flows/run/")

# The young generation's threshold in a serving process (Python's default: 700 allocations not
# yet freed). A request's objects die with it, so a young collection walks mostly the objects of
# the requests in flight, whatever the threshold: at 10,000 it runs a fourteenth as often for
# about the same walk each time, and cyclic garbage waits a few milliseconds longer.
YOUNG_GENERATION = 10_000


def create_app(config: ServerConfig, *, freeze_heap: bool = False) -> FastAPI:
    """Return the ASGI app serving ``config``'s flows: the error answers, the flow routes (on
    a router behind the key check), the images, the health check and the OpenAPI document.

    ``freeze_heap`` (what ``flownb serve`` passes; for a process that serves and does nothing
    else): once started, everything imported and built so far is left out of Python's
    collections of cycles (``gc.freeze``), so none of them stalls a request for the tens of
    milliseconds a full collection of the whole heap takes; and the youngest generation is
    collected every :data:`YOUNG_GENERATION` allocations rather than Python's 700."""
    decoders = DecodePool()
    telemetry_option = _telemetry_option()
    telemetry = any(telemetry_option.get("telemetry", {}).values())
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
        lifespan=_lifespan(config, decoders, freeze_heap=freeze_heap),
        **telemetry_option,
    )
    app.add_middleware(RequestIdMiddleware)
    _add_error_handlers(app)
    # Every flow route needs a key. The key check yields the caller (the accepted key's name
    # and prefix) and leaves it in request.state: a guard added after it (a spend cap per key)
    # reads it there. The fast routes run the same guards; with FastAPI's own telemetry on,
    # every request takes FastAPI's path, so the operator's spans describe it whole.
    # The key check, then the key's spend cap (which reads the caller the check accepted).
    guards: list[Guard] = [KeyCheck(config.keys), KeyCaps(config.keys)]
    include_guarded(app, flow_router(config, decoders), guards, fast=not telemetry)
    _add_media_route(app, config.media)
    _add_health_route(app, config.provider)
    app.openapi = _openapi(app)  # type: ignore[method-assign]
    return app


# OpenTelemetry's providers that stand in until one is set ("not configured").
_STAND_INS = frozenset({"ProxyTracerProvider", "_ProxyMeterProvider", "ProxyLoggerProvider"})


def _telemetry_option() -> dict[str, Any]:
    """Return FastAPI's ``telemetry`` argument: its native OpenTelemetry spans, metrics and
    logs on when a provider is configured as the app is made (``opentelemetry-instrument``, or
    the operator's code before ``create_app``), off otherwise. Decided once: FastAPI otherwise
    asks each global provider on every request, and each ask reads the environment.
    Nothing (FastAPI's own default) for a FastAPI without native telemetry."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    try:
        from opentelemetry import _logs, metrics, trace
    except ImportError:  # pragma: no cover - FastAPI's telemetry needs the API installed
        return {}
    providers = {
        "tracing": trace.get_tracer_provider(),
        "metrics": metrics.get_meter_provider(),
        "logs": _logs.get_logger_provider(),
    }
    configured = {
        name: type(provider).__name__ not in _STAND_INS for name, provider in providers.items()
    }
    return {"telemetry": configured}


def _lifespan(
    config: ServerConfig, decoders: DecodePool, *, freeze_heap: bool
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Return the app's lifespan: the event loop logged, the provider's warm-up finished and
    the folder's flows loaded (and with ``freeze_heap``, the heap frozen) before it starts; key
    use flushed every FLUSH_EVERY seconds while it runs; at the end the keys flushed, the
    decoders stopped and the provider closed."""
    keys = config.keys
    provider = config.provider

    async def flush_keys_periodically() -> None:
        # `flownb keys list` shows LAST USED at most FLUSH_EVERY seconds stale while we run.
        while True:
            await asyncio.sleep(keys_module.FLUSH_EVERY)
            await run_in_threadpool(keys.flush_used)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Which loop really runs is on record (flownb.server.protocol.EVENT_LOOP says which
        # one uvicorn is asked for; a silent switch would change every request's latency).
        loop = asyncio.get_running_loop()
        log.info("event loop: %s", type(loop).__module__.partition(".")[0])
        # The provider's HTTP client and the price table, imported in the background since the
        # provider was made, are in before the server says it is up: the first request then
        # pays nothing for them (see flownb.providers.warmup). The folder's flows are loaded
        # now too (a broken one logged now), so no request waits for a file to be read and
        # planned; later changes are still picked up as they come.
        await run_in_threadpool(wait_warm_up)
        await run_in_threadpool(config.store.loadable)
        if freeze_heap:
            # A full collection walked every object of FastAPI, pydantic and the provider's
            # SDK: a 30-60 ms stall at some request of every run. Frozen, it walks only
            # what requests make.
            gc.collect()
            gc.freeze()
            gc.set_threshold(YOUNG_GENERATION, *gc.get_threshold()[1:])
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
        return create_app(ServerConfig(options.pop("flows_dir"), **options), freeze_heap=True)
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"FLOWNB_SERVE_CONFIG must be the JSON of flownb serve's options ({exc}); it is set "
            "by `flownb serve --workers N`"
        ) from None
