"""A flow service's answers read as flownb exceptions: its message, status and problems
(:func:`_error_from`), per-element errors of a batch answered in part (:func:`_element_errors`),
a body that is not JSON, and an address that cannot be reached (:func:`_unreachable`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import requests

from ..error_map import from_http, parse_retry_after
from ..errors import (
    ApiError,
    FlownbError,
    Problem,
    ServiceUnavailable,
)


def _path(url: str) -> str:
    parts = urlsplit(url)
    return parts.path or "/"


def _unreachable(method: str, url: str, exc: Exception) -> ServiceUnavailable:
    parts = urlsplit(url)
    return ServiceUnavailable(
        f"cannot reach the flow service at {parts.scheme}://{parts.netloc} "
        f"({method} {parts.path}): {_reason(exc)}"
    )


def _reason(exc: Exception) -> str:
    """Name why a connection failed (refused, name not known, ...) without the URL again."""
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "No route to host",
                   "Network is unreachable", "timed out"):  # fmt: skip
        if marker.lower() in text.lower():
            return marker.lower()
    return type(exc).__name__


def _json(resp: requests.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        raise ApiError(
            f"the service answered {_path(resp.url)} with something that is not JSON "
            f"(HTTP {resp.status_code})",
            status=resp.status_code,
        ) from None


def _json_or_none(resp: requests.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return None


def _problems(body: Any) -> list[Problem]:
    raw = body.get("errors") if isinstance(body, dict) else None
    problems = []
    for e in raw if isinstance(raw, list) else []:
        if isinstance(e, dict) and isinstance(e.get("message"), str):
            index = e.get("index")
            variable = e.get("variable")
            problems.append(
                Problem(
                    str(e.get("code") or "error"),
                    e["message"],
                    index if isinstance(index, int) else None,
                    variable if isinstance(variable, str) else None,
                )
            )
    return problems


def _error_from(resp: requests.Response) -> FlownbError:
    """Return the flownb exception for an error answer; its message is the service's."""
    body = _json_or_none(resp)
    status = resp.status_code
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        message = body["message"]
        code = str(body.get("code") or "")
        request_id = body.get("request_id") or resp.headers.get("x-request-id")
    else:
        text = (resp.text or "").strip().replace("\n", " ")[:200]
        message = f"HTTP {status} from {_path(resp.url)}" + (f": {text}" if text else "")
        code = ""
        request_id = resp.headers.get("x-request-id")
    total = body.get("errors_total") if isinstance(body, dict) else None
    return from_http(
        status,
        code,
        message,
        problems=_problems(body),
        request_id=request_id,
        retry_after=parse_retry_after(resp.headers.get("Retry-After")),
        total=total if isinstance(total, int) else None,
    )


def _element_errors(body: Any, fallback: FlownbError, n: int) -> dict[int, FlownbError]:
    """Map each failed element (index within the request) to its own exception."""
    out: dict[int, FlownbError] = {}
    status = getattr(fallback, "status", None) or 500
    request_id = getattr(fallback, "request_id", None)
    retry_after = getattr(fallback, "retry_after", None)
    for p in _problems(body):
        if p.index is not None and 0 <= p.index < n and p.index not in out:
            out[p.index] = from_http(
                status, p.code, p.message, request_id=request_id, retry_after=retry_after
            )
    return out
