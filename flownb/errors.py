"""Every error flownb raises, under one root.

    FlownbError                      anything flownb raises on purpose
    ├── ConfigError                  a setting or argument that cannot work (bad provider name, ...)
    ├── FlowFileError                not a valid flow graph (names the file and the node or edge)
    ├── FlowNotFound                 no flow with that id (server store or remote service)
    ├── InputError                   run variables that do not fit the flow; ``.problems`` lists all
    ├── ProviderError                a model provider failed; keeps its message, status, request id
    │   ├── ProviderTimeout          ... did not answer in time
    │   └── RateLimited              ... kept refusing us for rate; ``.retry_after`` in seconds
    ├── BatchError                   batch elements failed at run time; ``.results`` keeps the rest
    ├── ServiceUnavailable           the flow service cannot be reached (refused, unreachable, ...)
    ├── ServiceTimeout               the flow service did not answer in time
    └── ApiError                     an error answer of the flow service (client and server side)
        └── AuthError                401: missing, invalid or revoked API key

Other libraries' exceptions are translated into these at one boundary each (``raise ... from``),
so callers catch ``FlownbError`` and nothing else. Errors about bad values (config, flow file,
input) are also ``ValueError`` and a missing flow is also ``LookupError``, so generic handlers
keep working. The service errors are also ``ConnectionError`` / ``TimeoutError``.

One table, :data:`HTTP_ERRORS`, maps each class to its HTTP status and code: the server answers
with :func:`http_status` and the client turns answers back into classes with :func:`from_http`,
so the two sides cannot drift. :func:`one_line` is the one way to show any error on one line
(CLI, DataFrame ``error`` column, run log, form, server bodies).
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .providers.base import RateLimits

__all__ = [
    "ApiError",
    "AuthError",
    "BatchError",
    "ConfigError",
    "FlowFileError",
    "FlowNotFound",
    "FlownbError",
    "InputError",
    "Problem",
    "ProviderError",
    "ProviderTimeout",
    "RateLimited",
    "ServiceTimeout",
    "ServiceUnavailable",
    "from_http",
    "http_status",
    "one_line",
    "parse_retry_after",
]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a request: the shape of an entry of an error body's ``errors``."""

    code: str
    message: str
    index: int | None = None
    variable: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form, leaving out ``index``/``variable`` when they do not apply."""
        return {k: v for k, v in asdict(self).items() if v is not None}


class FlownbError(Exception):
    """Root of every error flownb raises. ``code`` is the machine-readable error code."""

    code = "flownb_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class ConfigError(FlownbError, ValueError):
    """A setting or argument that cannot work."""

    code = "config_error"


class FlowFileError(FlownbError, ValueError):
    """A flow file that cannot be loaded: malformed JSON or not a valid graph."""

    code = "invalid_flow"


class FlowNotFound(FlownbError, LookupError):
    """No flow with that id. From a remote service, ``status`` and ``request_id`` say which
    answer it came from (``None`` when raised locally)."""

    code = "flow_not_found"

    def __init__(
        self, message: str, *, status: int | None = None, request_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.request_id = request_id


class InputError(FlownbError, ValueError):
    """Variables that do not fit the flow. ``problems`` lists every problem found (or the first
    ones, when a check stopped early); ``total`` is how many there are in all.

    The message names the first :attr:`MAX_LISTED` problems (then how many more) and ends with
    ``hint``, the one piece of advice that applies to them all, when the raiser gives one.
    """

    code = "invalid_variables"
    MAX_LISTED = 10

    def __init__(
        self, problems: Sequence[Problem], *, hint: str | None = None, total: int | None = None
    ) -> None:
        self.problems = list(problems)
        self.hint = hint
        self.total = max(total or 0, len(self.problems))
        listed = [p.message for p in self.problems[: self.MAX_LISTED]]
        message = "; ".join(listed) or "invalid input"
        more = self.total - len(listed)
        if more > 0:
            message += f"; and {more} more problem{'s' * (more > 1)}"
        if hint:
            message += f"; {hint}"
        # The most specific code when every problem agrees, so callers can branch on it.
        codes = {p.code for p in self.problems}
        super().__init__(message, code=codes.pop() if len(codes) == 1 else "invalid_variables")


class ProviderError(FlownbError):
    """A model provider failed. Keeps the provider's message, HTTP status and request id, and
    its ``Retry-After`` hint in seconds (``retry_after``), which is honoured on 5xx too."""

    code = "provider_error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        request_id: str | None = None,
        provider: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.request_id = request_id
        self.provider = provider
        self.retry_after = retry_after


class ProviderTimeout(ProviderError):
    """The provider did not answer in time."""

    code = "provider_timeout"


class RateLimited(ProviderError):
    """The provider kept refusing us for rate. ``retry_after`` is its hint in seconds, if any;
    ``rate_limits`` what its rate-limit headers said (a
    :class:`~flownb.providers.base.RateLimits`), for the run's limiter to pace by."""

    code = "upstream_rate_limited"

    def __init__(self, message: str, *, rate_limits: RateLimits | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.rate_limits = rate_limits


class BatchError(FlownbError):
    """Some elements of a batch failed at run time.

    ``results`` holds every element's result in input order (``None`` where it failed), and
    ``errors`` maps each failed index to its exception: the paid-for work is never lost.
    """

    code = "batch_failed"

    def __init__(self, results: list[Any], errors: dict[int, BaseException]) -> None:
        self.results = results
        self.errors = errors
        first_index = min(errors)
        first = errors[first_index]
        n = len(errors)
        message = (
            f"{n} of {len(results)} batch element{'s' * (n > 1)} failed; "
            f"first, element {first_index}: {first}"
        )
        codes = {getattr(e, "code", "internal_error") for e in errors.values()}
        super().__init__(message, code=codes.pop() if len(codes) == 1 else "batch_failed")


class ServiceUnavailable(FlownbError, ConnectionError):
    """The flow service cannot be reached: nothing listens there, the host is unreachable, or
    the connection was cut off (after the client's retries)."""

    code = "service_unavailable"


class ServiceTimeout(FlownbError, TimeoutError):
    """The flow service did not answer within the client's timeout."""

    code = "service_timeout"


class ApiError(FlownbError):
    """An error answer of the flow service: its status, code, every problem, request id.

    The client raises it for answers no more specific class fits; the server raises it to
    answer a request with an error (``headers`` are sent with the answer, ``results`` keep a
    partly failed batch's done elements; ``total`` counts the problems when only the first are
    listed).
    """

    code = "api_error"

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str | None = None,
        problems: Sequence[Problem] = (),
        request_id: str | None = None,
        results: list[Any] | None = None,
        headers: Mapping[str, str] | None = None,
        total: int | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.problems = list(problems)
        self.request_id = request_id
        self.results = results
        self.headers = dict(headers or {})
        self.total = max(total or 0, len(self.problems))


class AuthError(ApiError):
    """401 from the service: the API key is missing, invalid or revoked."""

    code = "invalid_api_key"


# -- the one error map ----------------------------------------------------------------------------

# Exception class -> (HTTP status, code), most specific class first. The server answers with it
# (:func:`http_status`), the client decodes with it (:func:`from_http`).
HTTP_ERRORS: tuple[tuple[type[FlownbError], int, str], ...] = (
    (AuthError, 401, "invalid_api_key"),
    (FlowNotFound, 404, "flow_not_found"),
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
    cls: type[FlownbError] | None = None
    for row_cls, _, row_code in HTTP_ERRORS:
        # By code alone: a batch element's code, under the answer's overall status.
        if code == row_code and code != "internal_error":
            cls = row_cls
            break
    unmapped = code == "internal_error" or (code.startswith("upstream") and status == 504)
    if cls is None and not unmapped:
        cls = _BY_STATUS.get(status)
    if cls is None and status == 404 and code in ("", "flow_not_found"):
        cls = FlowNotFound
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


# Line breaks and runs of whitespace inside a message.
_SPACE = re.compile(r"\s+")


def one_line(exc: BaseException, *, code: bool = False) -> str:
    """Return ``exc`` as one line of plain text, no traceback: the one way every surface words
    an error (the CLI, the DataFrame ``error`` column, the run log, the form, the server).

    A flownb error is its message (an :class:`InputError`'s names each problem, up to
    ``InputError.MAX_LISTED``, then how many more); any other exception is
    ``"TypeName: message"`` (just the type name when it has no message). ``code=True`` puts the
    error's code first, ``"provider_timeout: ..."``, for places read by programs as well as
    people (the ``error`` column, the run log). Line breaks and runs of whitespace become single
    spaces.
    """
    if isinstance(exc, FlownbError):
        text = f"{exc.code}: {exc.message}" if code else exc.message
    else:
        detail = str(exc)
        text = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return _SPACE.sub(" ", text).strip()
