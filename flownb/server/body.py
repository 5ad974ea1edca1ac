"""What a run request's body must be, checked before anything runs: JSON (no NaN or Infinity,
no lone surrogates), within the size and batch limits, and variables that are strings the flow
knows (:func:`checked_variables`, every problem of a batch collected, up to
:data:`PROBLEMS_COLLECTED`). :func:`parse_run_body` decodes a body once.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from starlette.requests import ClientDisconnect

from ..errors import InputError, Problem
from ..flowfile.validate import VariableSpec, json_type
from .errors import (
    ApiProblem,
    input_problem,
)

if TYPE_CHECKING:
    from starlette.requests import Request

__all__ = [
    "BODY_RECEIVED",
    "PROBLEMS_COLLECTED",
    "checked_variables",
    "parse_run_body",
    "read_body",
]

# Set to True in a request's ASGI scope by flownb serve's HTTP protocol
# (:mod:`flownb.server.protocol`) when the request's whole body had arrived before the app was
# called: :func:`read_body` then reads it without a timer. Under another server it is never set,
# and the body timeout is armed as always.
BODY_RECEIVED = "flownb.body_received"

# Validation stops building problems after this many (it goes on counting them): an error body
# lists at most MAX_LISTED anyway, and a million problem objects would cost the server its memory.
PROBLEMS_COLLECTED = 1000


# A JSON string escape of a UTF-16 surrogate: only bodies with one can hold a lone surrogate.
_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F][0-9a-fA-F]{2}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every body: json.loads with a keyword argument builds a JSONDecoder per call,
# which cost more than decoding a small body.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _decoded(body: bytes) -> Any:
    """Return the JSON value of ``body``, read as :func:`json.loads` reads bytes (UTF-8, -16 or
    -32 by its first bytes, a UTF-8 BOM skipped).

    Raises:
        ValueError: not JSON (a :class:`json.JSONDecodeError`, or NaN or Infinity).
        UnicodeDecodeError: bytes that are not text in the encoding found.
    """
    return _DECODER.decode(body.decode(json.detect_encoding(body), "surrogatepass"))


def _is_json(content_type: str | None) -> bool:
    """Return whether a Content-Type header says JSON (``application/json``, parameters such
    as ``charset`` allowed, or a ``+json`` type)."""
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


async def read_body(request: Request, max_body: int, body_timeout: float) -> bytes:
    """Return a request's whole body.

    Raises:
        ApiProblem: 413 over ``max_body`` bytes (declared or sent); 408 when the whole body did
            not arrive within ``body_timeout`` seconds (the answer closes the connection).
        ClientDisconnect: the client left before sending it all.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_body:
        raise _too_large(max_body)
    if request.scope.get(BODY_RECEIVED):
        # flownb serve's protocol saw the whole body arrive with the head: reading it cannot
        # wait, so no timer is needed (arming and cancelling one was a share of each request).
        return await _received(request, max_body)
    try:
        # The whole body within body_timeout seconds: a client trickling it would hold a
        # connection (and a place under --limit-concurrency) for as long as it liked.
        async with asyncio.timeout(body_timeout):
            return await _received(request, max_body)
    except TimeoutError:
        raise ApiProblem(
            408,
            "request_timeout",
            f"the request body did not arrive within {body_timeout:g} seconds",
            headers={"Connection": "close"},
        ) from None


async def _received(request: Request, max_body: int) -> bytes:
    """Return the body's bytes, read from the ASGI messages (as ``request.stream()`` would,
    without an async generator per request).

    Raises:
        ApiProblem: 413 over ``max_body`` bytes.
        ClientDisconnect: the client left first.
    """
    receive = request.receive
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_body:
            raise _too_large(max_body)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(limit: int) -> ApiProblem:
    return ApiProblem(
        413, "payload_too_large", f"the request body is over this server's limit of {limit} bytes"
    )


def checked_variables(
    body: bytes, max_batch: int, names: Sequence[str]
) -> dict[str, Any] | list[Any]:
    """Decode a run request body and check its variables against a flow's variable ``names``;
    return them.

    Raises:
        ApiProblem: as :func:`parse_run_body`, or 422 listing the variables' problems (the first
            :data:`PROBLEMS_COLLECTED`, with their total).
    """
    variables = parse_run_body(body, max_batch)
    spec = _specs.get(tuple(names)) or _specs.setdefault(tuple(names), VariableSpec(names))
    try:
        if isinstance(variables, dict):
            spec.check_one(variables)
        else:
            spec.check_batch(variables, limit=PROBLEMS_COLLECTED)
    except InputError as exc:
        raise input_problem(exc) from None
    if _SURROGATE_ESCAPE.search(body):
        problems = _not_unicode(variables)
        if problems:
            raise input_problem(InputError(problems))
    return variables


# Specs by variable names: built once per flow even in a decoding worker process.
_specs: dict[tuple[str, ...], VariableSpec] = {}


def _not_unicode(variables: dict[str, Any] | list[Any]) -> list[Problem]:
    """Return a problem for every variable value holding a lone surrogate (valid JSON, yet not
    text: it cannot be written out as UTF-8). Runs after the variables were checked, so every
    name is one of the flow's (read from a UTF-8 file: text) and every value a string."""
    single = isinstance(variables, dict)
    elements = [variables] if isinstance(variables, dict) else variables
    problems: list[Problem] = []
    for i, values in enumerate(elements):
        for name, value in values.items():
            if not _is_text(value):
                where = "" if single else f"element {i}: "
                problems.append(
                    Problem(
                        "invalid_variable_value",
                        f"{where}variable {name!r} is not valid Unicode text "
                        "(it holds a lone surrogate)",
                        None if single else i,
                        name,
                    )
                )
    return problems


def _is_text(value: str) -> bool:
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
        data = _decoded(body)
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
            f'the body must be a JSON object {{"variables": ...}}, got {json_type(data)}',
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
                f"'variables' must be an object or an array of objects, got {json_type(variables)}",
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
