"""The FastAPI app of ``flownb serve``: the contract's two routes, images, docs, health.

Per request the hot path is: one stat of the key file and a constant-time digest comparison,
one stat of the flow file (the parsed plan is kept until the file changes), the body read with a
size cap and decoded once, the whole batch validated, the engine run (inline providers
synchronously, in a thread pool for larger batches), and the JSON encoded once.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import FileResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..cache import open_cache
from ..engine import Engine, Outcomes, Plan
from ..errors import ConfigError, FlowFileError, FlownbError, InputError, Problem
from ..media import MEDIA_NAME, MediaStore
from ..providers.base import Provider
from ..providers.registry import make_provider
from ..settings import get_settings
from .errors import (
    ApiProblem,
    batch_problem,
    error_response,
    from_exception,
    input_problem,
    json_response,
    log,
)
from .keys import KeyStore
from .schemas import (
    FLOW_ROUTE_RESPONSES,
    MEDIA_RESPONSES,
    RUN_REQUEST_BODY,
    RUN_RESPONSES,
    Health,
)
from .store import FlowStore

__all__ = ["DEFAULT_MAX_BATCH", "DEFAULT_MAX_BODY", "ServerConfig", "create_app", "parse_run_body"]

DEFAULT_MAX_BATCH = 1000
DEFAULT_MAX_BODY = 10 * 1024 * 1024
# Inline (offline) batches up to this size run on the event loop; larger ones in a thread, so
# one big batch does not stall every other request.
INLINE_ON_LOOP = 32
REQUEST_ID = "flownb.request_id"
_SAFE_REQUEST_ID = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
_FLOW_PATHS = ("/api/flows/getFlowInfo/", "/api/flows/run/")
_MEDIA_TYPES = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "webp": "image/webp",
    "gif": "image/gif",
}
_SECURITY = {"security": [{"ApiKeyAuth": []}]}
# Documented by hand: the handlers read it from path_params (no per-request parameter solving).
_FLOW_ID_PARAM = {
    "name": "flow_id",
    "in": "path",
    "required": True,
    "description": "The flow's id: the name of its file in the server's flows folder, less .json.",
    "schema": {"type": "string"},
}


class ServerConfig:
    """What one server serves and with what: flows folder, provider, keys, media, limits."""

    def __init__(
        self,
        flows_dir: str | Path,
        *,
        provider: Provider | str | None = None,
        home: str | Path | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_body_bytes: int = DEFAULT_MAX_BODY,
        concurrency: int | None = None,
    ) -> None:
        if max_batch < 1 or max_body_bytes < 1:
            raise ConfigError("--max-batch and --max-body-bytes must be at least 1")
        settings = get_settings()
        self.home = Path(home) if home is not None else settings.home
        self.media = MediaStore(self.home / "media")
        if provider is None or isinstance(provider, str):
            # Built here so a caching wrapper can be put around it later; no cache by default.
            provider = make_provider(provider, media=self.media)
        self.provider: Provider = provider
        self.store = FlowStore(flows_dir, self._engine)
        self.keys = KeyStore(self.home)
        self.max_batch = max_batch
        self.max_body_bytes = max_body_bytes
        self.concurrency = concurrency or settings.concurrency
        # Off by default: a server answers many callers, and whether re-runs may be served from
        # a cache is its operator's decision (FLOWNB_SERVER_CACHE=1).
        self.cache = (
            open_cache(self.home) if settings.server_cache and self.provider.cacheable else None
        )

    def _engine(self, plan: Plan) -> Engine:
        # One engine per version of a flow file (its pacing spans requests); media URLs are
        # made from the current request's address (a context variable set per request).
        return Engine(plan, self.provider, _media_url, cache=self.cache)


_current_request: ContextVar[Request | None] = ContextVar("flownb_request", default=None)


def _media_url(name: str) -> str:
    request = _current_request.get()
    base = str(request.base_url) if request is not None else "/"
    return f"{base}media/{name}"


class RequestIdMiddleware:
    """Gives every request an id (echoed as ``x-request-id``) and turns any exception that got
    this far into a ``500 internal_error`` body, logged on one line: no traceback leaks out."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _incoming_request_id(scope) or secrets.token_hex(8)
        scope[REQUEST_ID] = rid
        header = (b"x-request-id", rid.encode("ascii"))
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", ()), header]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            problem = from_exception(exc, rid)  # logs unexpected ones on one line
            if not started:
                await error_response(problem, rid)(scope, receive, send_with_id)


def _incoming_request_id(scope: Scope) -> str | None:
    """A caller's own ``x-request-id``, kept when it is short and plain (safe to log)."""
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            text = value.decode("latin-1")
            if 0 < len(text) <= 64 and set(text) <= _SAFE_REQUEST_ID:
                return text
            return None
    return None


def _rid(request: Request) -> str:
    return request.scope.get(REQUEST_ID, "")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def create_app(config: ServerConfig) -> FastAPI:
    """Return the ASGI app serving ``config``'s flows."""
    keys = config.keys
    store = config.store
    provider = config.provider
    media = config.media
    max_batch = config.max_batch
    max_body = config.max_body_bytes
    limits = {"x-flownb-max-batch": str(max_batch), "x-flownb-max-body-bytes": str(max_body)}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        keys.flush_used()
        await provider.aclose()

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
        lifespan=lifespan,
    )
    app.add_middleware(RequestIdMiddleware)

    # -- errors --------------------------------------------------------------------------------

    async def on_problem(request: Request, exc: Exception) -> Response:
        return error_response(from_exception(exc, _rid(request)), _rid(request))

    async def on_flow_file(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, FlowFileError)
        log.warning("request %s: %s", _rid(request), exc.message)
        return error_response(ApiProblem(500, "internal_error", exc.message), _rid(request))

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        path = request.url.path
        if exc.status_code == 404 and path.startswith(_FLOW_PATHS):
            problem = ApiProblem(404, "flow_not_found", "no such flow")
        elif exc.status_code == 404:
            shown = path if len(path) <= 100 else path[:100] + "..."
            problem = ApiProblem(404, "not_found", f"nothing at {shown!r}; see /docs")
        elif exc.status_code == 405:
            problem = ApiProblem(
                405,
                "method_not_allowed",
                f"{request.method} is not allowed here",
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

    # -- helpers -------------------------------------------------------------------------------

    def authenticate(request: Request) -> None:
        try:
            verdict = keys.check(request.headers.get("x-api-key"))
        except ConfigError as exc:  # a corrupt key file: say so in the log, not to callers
            log.error("request %s: %s", _rid(request), exc.message)
            raise ApiProblem(
                500, "internal_error", "the server cannot read its key file; see its log"
            ) from None
        if not verdict.ok:
            raise ApiProblem(401, verdict.code, verdict.message)

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body:
            raise _too_large(max_body)
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_body:
                raise _too_large(max_body)
            chunks.append(chunk)
        return b"".join(chunks)

    # -- routes --------------------------------------------------------------------------------

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
        flow = store.get(request.path_params["flow_id"])
        headers = {**limits, "x-flownb-image-outputs": flow.image_outputs}
        return json_response(flow.plan.describe(), headers=headers)

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
        authenticate(request)
        flow = store.get(request.path_params["flow_id"])
        variables = parse_run_body(await read_body(request), max_batch)
        spec = flow.plan.spec
        single = isinstance(variables, dict)
        batch: list[Any] = [variables] if single else variables
        try:
            if single:
                spec.check_one(variables)
            else:
                spec.check_batch(batch)
        except InputError as exc:
            raise input_problem(exc) from None
        if not batch:
            return json_response([])

        engine = flow.engine
        _current_request.set(request)  # media URLs use the address this caller used
        collect = Outcomes(len(batch))
        if not provider.inline:
            await engine.run_async(batch, collect, config.concurrency)
        elif len(batch) <= INLINE_ON_LOOP and not flow.has_images:
            engine.run_inline(batch, collect)
        else:
            await run_in_threadpool(engine.run_inline, batch, collect)

        results = collect.results
        if collect.errors:
            items = [r.to_items() if r is not None else None for r in results]
            raise batch_problem(collect.errors, items, _rid(request), indexed=not single)
        if single:
            return json_response(results[0].to_items())  # type: ignore[union-attr]
        return json_response([r.to_items() for r in results])  # type: ignore[union-attr]

    @app.get(
        "/media/{name}",
        summary="A generated image (no key needed: names are unguessable digests)",
        operation_id="getMedia",
        responses=MEDIA_RESPONSES,
        response_class=Response,
        tags=["media"],
    )
    async def get_media(name: str) -> Response:
        match = MEDIA_NAME.fullmatch(name)
        path = media.directory / name
        if match is None or not path.is_file():
            raise ApiProblem(404, "not_found", "no image with this name")
        return FileResponse(
            path,
            media_type=_MEDIA_TYPES[match.group(1)],
            headers={"Cache-Control": "public, max-age=31536000, immutable"},
        )

    @app.get(
        "/healthz",
        summary="Health check",
        operation_id="healthz",
        response_model=Health,
        tags=["service"],
    )
    async def healthz() -> Response:
        return json_response({"status": "ok", "provider": provider.name})

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            # FastAPI documents a 422 for every route with a parameter; only run can answer it.
            paths = schema["paths"]
            for path in ("/media/{name}",):
                paths[path]["get"]["responses"].pop("422", None)
            for unused in ("HTTPValidationError", "ValidationError"):
                schema["components"]["schemas"].pop(unused, None)
            schema.setdefault("components", {})["securitySchemes"] = {
                "ApiKeyAuth": {"type": "apiKey", "in": "header", "name": "x-api-key"}
            }
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    _mount_hot_routes(app, run_flow, get_flow_info)
    return app


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


def _too_large(limit: int) -> ApiProblem:
    return ApiProblem(
        413, "payload_too_large", f"the request body is over this server's limit of {limit} bytes"
    )


def parse_run_body(body: bytes, max_batch: int) -> dict[str, Any] | list[Any]:
    """Decode a run request body and return its ``variables`` (an object or an array).

    Raises:
        ApiProblem: 400 ``invalid_json`` (not JSON), 422 ``invalid_request`` (wrong shape, every
            problem listed), 422 ``batch_too_large`` (more elements than ``max_batch``).
    """
    if not body.strip():
        raise ApiProblem(
            400, "invalid_json", 'the request body is empty; send {"variables": {...}} as JSON'
        )
    try:
        data = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        detail = (
            f" (line {exc.lineno} column {exc.colno}: {exc.msg})"
            if isinstance(exc, json.JSONDecodeError)
            else ""
        )
        raise ApiProblem(
            400, "invalid_json", f"the request body is not valid JSON{detail}"
        ) from None
    except RecursionError:
        raise ApiProblem(400, "invalid_json", "the request body is nested too deeply") from None
    if not isinstance(data, dict):
        raise ApiProblem(
            422,
            "invalid_request",
            f'the body must be a JSON object {{"variables": ...}}, got {_json_type(data)}',
        )
    problems: list[Problem] = []
    if "variables" not in data:
        problems.append(Problem("invalid_request", "the body has no 'variables' member"))
    for extra in data:
        if extra != "variables":
            problems.append(
                Problem(
                    "invalid_request", f"unexpected member {extra!r}; the body has only 'variables'"
                )
            )
    variables = data.get("variables")
    if "variables" in data and not isinstance(variables, dict | list):
        problems.append(
            Problem(
                "invalid_request",
                "'variables' must be an object or an array of objects, "
                f"got {_json_type(variables)}",
            )
        )
    if problems:
        raise ApiProblem(422, "invalid_request", problems[0].message, problems)
    if isinstance(variables, list) and len(variables) > max_batch:
        raise ApiProblem(
            422,
            "batch_too_large",
            f"the batch has {len(variables)} elements; this server takes at most {max_batch} "
            "per request (split it)",
        )
    return variables  # type: ignore[return-value]


def _json_type(value: Any) -> str:
    names: Mapping[type, str] = {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }
    return "null" if value is None else names.get(type(value), type(value).__name__)
