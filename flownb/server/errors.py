"""The server's one error shape, and how flownb's exceptions map onto HTTP statuses.

Every error response is ``{"code", "message", "errors": [{"index"?, "variable"?, "code",
"message"}], "request_id"}`` (plus ``results`` when a batch partly failed). Bodies never carry a
traceback or a key; an unexpected exception is logged on one line with the request id and
answered ``500 internal_error``.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
from starlette.responses import Response

from ..error_map import http_status
from ..errors import (
    ApiError,
    FlownbError,
    InputError,
    Problem,
    RateLimited,
    one_line,
)
from .keys import KEY_PREFIX

__all__ = [
    "MAX_LISTED",
    "ApiProblem",
    "error_body",
    "error_response",
    "from_exception",
    "json_response",
    "scrub",
    "status_of",
]

log = logging.getLogger("flownb.server")

# An error body lists at most this many problems, plus ``errors_total`` when there are more: a
# body of a million problems helps no one and costs the server its memory.
MAX_LISTED = 100
# Anything shaped like an API key is masked in error bodies (a key pasted into a URL or a value).
_KEY_LIKE = re.compile(re.escape(KEY_PREFIX) + r"[A-Za-z0-9_\-]{6,}")


class ApiProblem(ApiError):
    """An error the server answers with: status, code, message and the problems found
    (``total`` counts them all when only the first were collected)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        problems: Sequence[Problem] = (),
        *,
        headers: Mapping[str, str] | None = None,
        results: list[Any] | None = None,
        total: int | None = None,
    ) -> None:
        super().__init__(
            message,
            status=status,
            code=code,
            problems=problems,
            headers=headers,
            results=results,
            total=total,
        )


def scrub(text: str) -> str:
    """Return ``text`` with every key-like string (``fnb_...``) masked."""
    return _KEY_LIKE.sub(KEY_PREFIX + "***", text) if KEY_PREFIX in text else text


def json_response(
    data: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """Return a JSON response, encoded once (no re-validation): with orjson (a tenth of the
    standard library's time per request), or the standard library for what orjson refuses
    (integers over 64 bits, non-string keys, a lone surrogate, which goes out as a JSON escape).
    Both give compact UTF-8 JSON of the same value (orjson writes a NaN as null where the
    standard library writes NaN, which is not JSON)."""
    try:
        body = orjson.dumps(data)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        body = json.dumps(data, separators=(",", ":")).encode("ascii")
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def _listed(p: Problem) -> dict[str, Any]:
    item = p.to_dict()
    item["message"] = scrub(p.message)
    if p.variable is not None:
        item["variable"] = scrub(p.variable)
    return item


def error_response(problem: ApiError, request_id: str) -> Response:
    """Return the JSON response for ``problem``: at most :data:`MAX_LISTED` problems listed
    (with ``errors_total`` when there are more), key-like strings masked."""
    return json_response(error_body(problem, request_id), problem.status, problem.headers)


def error_body(problem: ApiError, request_id: str) -> dict[str, Any]:
    """Return the body of :func:`error_response` for ``problem`` (also sent as a streamed
    run's ``error`` event)."""
    message = scrub(problem.message)
    body: dict[str, Any] = {
        "code": problem.code,
        "message": message,
        "errors": [_listed(p) for p in problem.problems[:MAX_LISTED]]
        or [{"code": problem.code, "message": message}],
        "request_id": request_id,
    }
    if problem.total > MAX_LISTED:
        body["errors_total"] = problem.total
    if problem.results is not None:
        body["results"] = problem.results
    return body


def status_of(exc: BaseException) -> tuple[int, str]:
    """Return the (status, code) an exception is answered with (the one map in flownb.errors)."""
    return http_status(exc)


def _message(exc: BaseException, request_id: str) -> str:
    if isinstance(exc, FlownbError):
        return one_line(exc)
    # Unexpected: say what to quote, never what happened inside.
    return f"internal error; the server log has details under request id {request_id}"


def _retry_after(excs: Iterable[BaseException]) -> dict[str, str]:
    hints = [
        e.retry_after for e in excs if isinstance(e, RateLimited) and e.retry_after is not None
    ]
    if not any(isinstance(e, RateLimited) for e in excs):
        return {}
    seconds = max(hints, default=1.0)
    return {"Retry-After": str(max(0, math.ceil(seconds)))}


def log_unexpected(exc: BaseException, request_id: str) -> None:
    """Log an unexpected exception on one line (type and message, no traceback) with the id."""
    if not isinstance(exc, FlownbError):
        log.error("request %s: internal error: %s: %s", request_id, type(exc).__name__, exc)
        log.debug("request %s: traceback", request_id, exc_info=exc)


def from_exception(exc: BaseException, request_id: str) -> ApiError:
    """Return the problem a single run's (or a request's) exception is answered with."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, InputError):
        return input_problem(exc)
    log_unexpected(exc, request_id)
    status, code = status_of(exc)
    return ApiProblem(status, code, _message(exc, request_id), headers=_retry_after([exc]))


def input_problem(exc: InputError) -> ApiProblem:
    """Return the 422 for invalid variables: every problem listed, with index and variable."""
    codes = {p.code for p in exc.problems}
    code = codes.pop() if len(codes) == 1 else "invalid_request"
    return ApiProblem(422, code, exc.message, exc.problems, total=exc.total)


def batch_problem(
    errors: Mapping[int, BaseException], results: list[Any], request_id: str, *, indexed: bool
) -> ApiProblem:
    """Return the problem for a run whose elements partly (or wholly) failed.

    ``results`` holds the successful elements' outputs (``None`` where failed), so paid work
    reaches the caller; ``errors[]`` names each failed index.
    """
    ranked = sorted(errors.items())
    for _, e in ranked:
        log_unexpected(e, request_id)
    statuses = [status_of(e) for _, e in ranked]
    order = {504: 0, 429: 1, 502: 2}
    status, code = max(statuses, key=lambda sc: order.get(sc[0], 3))
    problems = [
        Problem(status_of(e)[1], _message(e, request_id), index=i if indexed else None)
        for i, e in ranked
    ]
    n = len(ranked)
    if indexed:
        message = (
            f"{n} of {len(results)} batch element{'s' * (n > 1)} failed; "
            f"first, element {ranked[0][0]}: {problems[0].message}"
        )
    else:
        message = problems[0].message
    return ApiProblem(
        status,
        code,
        message,
        problems,
        headers=_retry_after(errors.values()),
        results=results if indexed else None,
    )
