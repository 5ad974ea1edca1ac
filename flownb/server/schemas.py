"""What ``/openapi.json`` documents: the contract's bodies, the error shape, and every status.

These models only describe; the routes encode their JSON directly (no re-validation of output).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CONNECTION_RESPONSES",
    "FLOWS_RESPONSES",
    "FLOW_ROUTE_RESPONSES",
    "MEDIA_RESPONSES",
    "RUN_REQUEST_BODY",
    "RUN_RESPONSES",
]


class FlowInfoItem(BaseModel):
    """A variable the run must supply, or an output the run yields (contract 2.5)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    type: Literal["variable", "output"]


class RunOutputItem(BaseModel):
    """One output of one execution (contract 2.6): text, or the absolute URL of an image."""

    model_config = ConfigDict(extra="forbid")
    name: str
    output: str
    type: Literal["output"]


class ErrorItem(BaseModel):
    """One problem; ``index`` is the batch element, ``variable`` the variable it concerns."""

    index: int | None = Field(default=None, ge=0)
    variable: str | None = None
    code: str
    message: str


class ErrorBody(BaseModel):
    """Every error response. ``results`` appears when a batch partly failed at run time."""

    code: str
    message: str
    errors: list[ErrorItem]
    request_id: str
    results: list[list[RunOutputItem] | None] | None = None


class Health(BaseModel):
    """The health check."""

    status: Literal["ok"]
    provider: str


_STRING_MAP: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}

RUN_REQUEST_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["variables"],
                "additionalProperties": False,
                "properties": {
                    "variables": {
                        "description": (
                            "One execution (an object mapping each variable name to a string) "
                            "or a batch (an array of such objects, at most the server's limit)."
                        ),
                        "oneOf": [_STRING_MAP, {"type": "array", "items": _STRING_MAP}],
                    }
                },
            },
            "examples": {
                "single": {"value": {"variables": {"topic": "owls", "tone": "dry"}}},
                "batch": {
                    "value": {
                        "variables": [
                            {"topic": "owls", "tone": "dry"},
                            {"topic": "tide pools", "tone": "playful"},
                        ]
                    }
                },
            },
        }
    },
}

_REQUEST_ID = {
    "x-request-id": {
        "description": "Identifies this request in the server log.",
        "schema": {"type": "string"},
    }
}


def _error(description: str, **headers: Any) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description, "headers": {**_REQUEST_ID, **headers}}


_AUTH: dict[int | str, Any] = {
    401: _error(
        "`missing_api_key`: no x-api-key header; `invalid_api_key`: unknown or revoked key."
    ),
}
_NOT_FOUND: dict[int | str, Any] = {
    404: _error("`flow_not_found`: no flow with this id (or not a valid flow id).")
}
_INTERNAL: dict[int | str, Any] = {
    500: _error("`internal_error`: something failed inside the server (no details).")
}
# What any route may answer before it is reached: the connection's guard (a request head over
# 16 KiB) and uvicorn's limit (--limit-concurrency), the latter as plain text.
CONNECTION_RESPONSES: dict[int | str, Any] = {
    431: _error(
        "`request_header_too_large`: the request line and headers are over 16 KiB; the "
        "connection is closed."
    ),
    503: {
        "description": (
            "The server is over its connection limit (`--limit-concurrency`); try again. Sent "
            "by the HTTP server itself, as plain text."
        ),
        "content": {"text/plain": {"schema": {"type": "string"}}},
    },
}

FLOW_ROUTE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "model": list[FlowInfoItem],
        "description": "The flow's variables (type `variable`) then outputs (type `output`).",
        "headers": {
            **_REQUEST_ID,
            "x-flownb-max-batch": {
                "description": "The most elements a run's `variables` array may hold.",
                "schema": {"type": "integer"},
            },
            "x-flownb-image-outputs": {
                "description": "Comma-separated positions (among outputs) of image outputs.",
                "schema": {"type": "string"},
            },
        },
    },
    **_AUTH,
    **_NOT_FOUND,
    **_INTERNAL,
    **CONNECTION_RESPONSES,
}

_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "integer"},
    }
}

_EVENTS = (
    "With `Accept: text/event-stream` and one element (an object, or an array of one): "
    "server-sent events while the run goes, each `data` one line of JSON: `text` "
    '(`{"node", "outputs", "delta"}`), `image` (`{"node", "outputs", "url"}`), `restart` '
    '(`{"node", "outputs"}`: the node\'s text so far is void), then exactly one of `result` '
    "(the JSON answer this request gets without the header) or `error` (the error body plus "
    "its `status`)."
)

RUN_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "model": list[RunOutputItem] | list[list[RunOutputItem]],
        "description": (
            "An object `variables`: one item per output node. An array: one array of items per "
            "element, in order (`[]` for `[]`). " + _EVENTS
        ),
        "headers": _REQUEST_ID,
        "content": {
            "text/event-stream": {
                "schema": {"type": "string", "description": "Server-sent events."},
                "example": (
                    'event: text\ndata: {"node": "Intro", "outputs": ["intro"], "delta": "Ow"}'
                    '\n\nevent: result\ndata: [{"name": "intro", "output": "Owls", '
                    '"type": "output"}]\n\n'
                ),
            }
        },
    },
    400: _error("`invalid_json`: the body is not JSON."),
    **_AUTH,
    402: _error(
        "`spend_cap_reached`: the API key's spend cap is used up, or a call could have passed "
        "it (not sent); the message says how much is left. `results` keeps the elements that "
        "succeeded."
    ),
    **_NOT_FOUND,
    406: _error(
        "`not_acceptable`: a batch of several elements asked only for `text/event-stream` "
        "(only a run of one element streams)."
    ),
    408: _error(
        "`request_timeout`: the whole body did not arrive within the server's body timeout "
        "(default 30 s); the connection is closed."
    ),
    413: _error("`payload_too_large`: the body is over the server's limit (default 10 MiB)."),
    415: _error(
        "`unsupported_media_type`: the body was not sent as JSON "
        "(`Content-Type: application/json`)."
    ),
    422: _error(
        "`invalid_request`: the JSON has the wrong shape; `missing_variable`, "
        "`unknown_variable`, `invalid_variable_type`: variables that do not fit the flow (every "
        "problem listed, with `index` and `variable`); `prompt_too_long`: the values make a "
        "prompt longer than the provider takes (4,000 characters for an image prompt, 1,000,000 "
        "for a text prompt, by default); `batch_too_large`: more elements than the server's "
        "limit. Nothing ran."
    ),
    429: _error(
        "`upstream_rate_limited`: the model provider rate-limited the server; `results` keeps "
        "the elements that succeeded.",
        **_RETRY_AFTER,
    ),
    **_INTERNAL,
    502: _error(
        "`provider_error`: the model provider failed; `results` keeps the elements that "
        "succeeded (null where failed)."
    ),
    504: _error(
        "`provider_timeout`: the model provider did not answer in time; `results` keeps the "
        "elements that succeeded."
    ),
    **CONNECTION_RESPONSES,
}

_BINARY = {"schema": {"type": "string", "format": "binary"}}

MEDIA_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": (
            "The image, with the type its bytes say (PNG, JPEG, WebP or GIF) and "
            "`X-Content-Type-Options: nosniff`."
        ),
        "content": {
            kind: _BINARY for kind in ("image/png", "image/jpeg", "image/webp", "image/gif")
        },
    },
    404: _error("`not_found`: no image with this name."),
    **CONNECTION_RESPONSES,
}


class FlowSummary(BaseModel):
    """A flow the server serves (``GET /api/flows``): its id (for the contract's routes), name,
    variables and outputs, each in node order."""

    model_config = ConfigDict(extra="forbid")
    id: str
    name: str
    variables: list[str]
    outputs: list[str]


FLOWS_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "model": list[FlowSummary],
        "description": (
            "Every flow of the server's folder that loads, by id; a file that does not load is "
            "left out (the server's log and the flow's own routes say why)."
        ),
        "headers": _REQUEST_ID,
    },
    **_AUTH,
    **_INTERNAL,
    **CONNECTION_RESPONSES,
}
