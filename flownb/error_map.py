"""How flownb's errors travel over HTTP: one table shared by the server and the client.

:data:`HTTP_ERRORS` maps each class of :mod:`flownb.errors` to its HTTP status and code: the
server answers with :func:`http_status` and the client turns answers back into classes with
:func:`from_http`, so the two sides cannot drift. :func:`parse_retry_after` is the one reader of
a ``Retry-After`` header (client and providers).
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Mapping, Sequence

from .errors import (
    ApiError,
    AuthError,
    FlowFileError,
    FlownbError,
    FlowNotFound,
    InputError,
    Problem,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    SpendCapReached,
)

__all__ = ["HTTP_ERRORS", "VARIABLE_CODES", "from_http", "http_status", "parse_retry_after"]


# Exception class -> (HTTP status, code), most specific class first. The server answers with it
# (:func:`http_status`), the client decodes with it (:func:`from_http`).
HTTP_ERRORS: tuple[tuple[type[FlownbError], int, str], ...] = (
    (AuthError, 401, "invalid_api_key"),
    (FlowNotFound, 404, "flow_not_found"),
    (SpendCapReached, 402, "spend_cap_reached"),
    (InputError, 422, "invalid_variables"),
    (ProviderTimeout, 504, "provider_timeout"),
    (RateLimited, 429, "upstream_rate_limited"),
    (ProviderError, 502, "provider_error"),
    # A flow file the server cannot load is the operator's problem, not the caller's: a 500
    # whose message names the flow and what is wrong (decoded as a plain ApiError).
    (FlowFileError, 500, "internal_error"),
)
# Problem codes of invalid variables (values making a prompt longer than the provider takes
# included): a 422 listing only these is an InputError.
VARIABLE_CODES = frozenset(
    {
        "missing_variable",
        "unknown_variable",
        "invalid_variable_type",
        "invalid_variable_value",
        "prompt_too_long",
    }
)
# Statuses whose answers are decoded by status when the code is unknown (another service).
_BY_STATUS: Mapping[int, type[FlownbError]] = {
    401: AuthError,
    429: RateLimited,
    502: ProviderError,
    503: ProviderError,
    504: ProviderTimeout,
}


def http_status(exc: BaseException) -> tuple[int, str]:
    """Return the (HTTP status, code) the server answers ``exc`` with.

    An :class:`ApiError` carries its own; a class in :data:`HTTP_ERRORS` gets its row (an
    :class:`InputError` its own code, the most specific its problems share); anything else is
    ``(500, "internal_error")``.
    """
    if isinstance(exc, ApiError):
        return exc.status, exc.code
    for cls, status, code in HTTP_ERRORS:
        if isinstance(exc, cls):
            return status, exc.code if cls is InputError else code
    return 500, "internal_error"


def from_http(
    status: int,
    code: str,
    message: str,
    *,
    problems: Sequence[Problem] = (),
    request_id: str | None = None,
    retry_after: float | None = None,
    total: int | None = None,
) -> FlownbError:
    """Return the exception for an error answer of the flow service (the inverse of
    :func:`http_status`): by code first, then by status, else :class:`ApiError`."""
    if status == 422 and problems and all(p.code in VARIABLE_CODES for p in problems):
        return InputError(problems, total=total)
    cls = _decoded_class(status, code)
    if cls is FlowNotFound:
        return FlowNotFound(message, status=status, request_id=request_id)
    if cls is not None and issubclass(cls, ProviderError):
        return cls(
            message,
            status=status,
            request_id=request_id,
            provider="remote",
            code=code or None,
            retry_after=retry_after,
        )
    if cls is SpendCapReached:
        return SpendCapReached(message)
    if cls is AuthError:
        return AuthError(
            message, status=status, code=code or None, problems=problems, request_id=request_id
        )
    return ApiError(
        message,
        status=status,
        code=code or None,
        problems=problems,
        request_id=request_id,
        total=total,
    )


def _decoded_class(status: int, code: str) -> type[FlownbError] | None:
    """Return the class an error answer decodes to: by code first (a batch element's code,
    under the answer's overall status), then by status; ``None`` for a plain :class:`ApiError`
    (an internal error, an upstream 504 of a code not known here, any other status)."""
    if code != "internal_error":
        for row_cls, _, row_code in HTTP_ERRORS:
            if code == row_code:
                return row_cls
    unmapped = code == "internal_error" or (code.startswith("upstream") and status == 504)
    if not unmapped and status in _BY_STATUS:
        return _BY_STATUS[status]
    if status == 404 and code in ("", "flow_not_found"):
        return FlowNotFound
    return None


def parse_retry_after(value: str | None) -> float | None:
    """Return a ``Retry-After`` header's wait in seconds (>= 0), or ``None`` when it is absent
    or unreadable. Takes both forms HTTP allows: seconds, or an HTTP date."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


# The one retry policy of flownb's HTTP clients (providers and flownb.Client): the longest
# wait without a hint (exponential backoff reaches it after a few attempts), and the longest
# a Retry-After is honoured (a server asking for more is not waited on that long).
MAX_BACKOFF = 20.0
MAX_RETRY_AFTER = 60.0


def retry_delay(attempt: int, retry_after: float | None, *, base: float = 0.5) -> float:
    """Return seconds to wait before retry number ``attempt + 1`` (``attempt`` counts from 0):
    the server's ``Retry-After`` when it gave one (at most :data:`MAX_RETRY_AFTER`; ``0`` means
    at once, plus a few ms of jitter so a burst does not come back in lockstep), else
    exponential backoff with full jitter, ``base`` doubling per attempt up to
    :data:`MAX_BACKOFF` (0.5 s, 1 s, 2 s, ... by default)."""
    if retry_after is not None:
        hint = min(float(retry_after), MAX_RETRY_AFTER)
        return hint + random.uniform(0.0, 0.005 + 0.1 * min(hint, 1.0))
    return random.uniform(0.0, min(MAX_BACKOFF, base * 2**attempt))
