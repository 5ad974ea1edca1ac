"""Every error flownb raises, under one root.

    FlownbError                      anything flownb raises on purpose
    ├── ConfigError                  a setting or argument that cannot work (bad provider name, ...)
    ├── FlowFileError                not a valid flow graph (names the file and the node or edge)
    ├── FlowNotFound                 no flow with that id (server store or remote service)
    ├── InputError                   run variables that do not fit the flow; ``.problems`` lists all
    ├── ProviderError                a model provider failed; keeps its message, status, request id
    │   ├── ProviderTimeout          ... did not answer in time
    │   ├── RateLimited              ... kept refusing us for rate; ``.retry_after`` in seconds
    │   ├── RedirectRefused          ... redirected to another origin (no key is sent there)
    │   └── ImageNotFetched          ... made (and billed) an image flownb could not download
    ├── BatchError                   batch elements failed at run time; ``.results`` keeps the rest
    ├── SpendCapReached              a call not sent: it could have taken the run past ``max_spend``
    ├── ServiceUnavailable           the flow service cannot be reached (refused, unreachable, ...)
    ├── ServiceTimeout               the flow service did not answer in time
    └── ApiError                     an error answer of the flow service (client and server side)
        └── AuthError                401: missing, invalid or revoked API key

Other libraries' exceptions are translated into these at one boundary each (``raise ... from``),
so callers catch ``FlownbError`` and nothing else. Errors about bad values (config, flow file,
input) are also ``ValueError`` and a missing flow is also ``LookupError``, so generic handlers
keep working. The service errors are also ``ConnectionError`` / ``TimeoutError``.

This module is the ground floor: it imports nothing of flownb. How each class travels over HTTP
(status, code, ``Retry-After``) is :mod:`flownb.error_map`'s. :func:`one_line` is the one way to
show any error on one line (CLI, DataFrame ``error`` column, run log, form, server bodies).
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "ApiError",
    "AuthError",
    "BatchError",
    "ConfigError",
    "FlowFileError",
    "FlowNotFound",
    "FlownbError",
    "ImageNotFetched",
    "InputError",
    "Problem",
    "ProviderError",
    "ProviderTimeout",
    "RateLimited",
    "RedirectRefused",
    "ServiceTimeout",
    "ServiceUnavailable",
    "SpendCapReached",
    "one_line",
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
    its ``Retry-After`` hint in seconds (``retry_after``), which is honoured on 5xx too.

    Raised for a row of a flow with several generation nodes, it names the node(s) that failed
    (``failed_nodes``) and keeps what the row's other nodes produced: ``partial`` is a
    :class:`~flownb.runtime.result.RunResult` of every output whose nodes all succeeded (``None``
    when
    the error is not about a row).
    """

    code = "provider_error"
    partial: Any = None
    failed_nodes: tuple[str, ...] = ()

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

    def in_row(self, nodes: Sequence[str], partial: Any) -> ProviderError:
        """Return a copy of this error (same class) for a row where ``nodes`` failed: its
        message names them, and ``partial`` keeps the row's outputs that were produced."""
        row = copy.copy(self)
        label = f"node {nodes[0]!r}" if len(nodes) == 1 else f"nodes {', '.join(map(repr, nodes))}"
        row.message = f"{label} failed: {self.message}"
        row.args = (row.message,)
        row.failed_nodes = tuple(nodes)
        row.partial = partial
        row.__cause__ = self
        return row


class ProviderTimeout(ProviderError):
    """The provider did not answer in time."""

    code = "provider_timeout"


class RateLimited(ProviderError):
    """The provider kept refusing us for rate. ``retry_after`` is its hint in seconds, if any;
    ``rate_limits`` what its rate-limit headers said (a
    :class:`~flownb.providers.base.RateLimits`), for the run's limiter to pace by."""

    code = "upstream_rate_limited"

    # Typed loosely so this module imports nothing of flownb (RateLimits is a provider's type).
    def __init__(self, message: str, *, rate_limits: Any = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.rate_limits = rate_limits


class RedirectRefused(ProviderError):
    """A provider's endpoint redirected a request to another origin (scheme, host and port):
    flownb sends a key or an endpoint's headers only to the origin they were given for, so the
    redirect is not followed. The message names both origins, never the key. Never retried."""

    code = "redirect_refused"


class ImageNotFetched(ProviderError):
    """An image was generated, and so billed, but its URL could not be downloaded (refused by
    the media rules, not an image, or failing after the download's own retries). The
    generation is not bought again: ``paid_usd`` is what it cost (NaN: an unknown price; set
    by the call runner from ``paid``, the generation as billed), and
    the message says it was paid for and names the URL's host. Never retried."""

    code = "image_not_fetched"

    # ``paid`` is typed loosely so this module imports nothing of flownb (a Generation).
    def __init__(
        self, message: str, *, paid: Any = None, paid_usd: float | None = None, **kw: Any
    ) -> None:
        super().__init__(message, **kw)
        self.paid = paid  # the generation as billed: model, usage, priced_as
        self.paid_usd = paid_usd

    def priced(self, usd: float) -> ImageNotFetched:
        """Return a copy of this error (raised from it) saying it cost ``usd``."""
        priced = copy.copy(self)
        priced.paid_usd = usd
        priced.__cause__ = self
        return priced


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


class SpendCapReached(FlownbError):
    """A call was not sent: what was spent plus the most the calls in flight and this one could
    still cost would have passed the cap (``max_spend=``, or an API key's cap on the server).
    Nothing was paid for it; a re-run with a higher cap buys it. ``cap``, ``spent`` and
    ``left`` are US dollars (``left``: what the cap still allows).
    """

    code = "spend_cap_reached"

    def __init__(self, message: str, *, cap: float = math.nan, spent: float = math.nan) -> None:
        super().__init__(message)
        self.cap = cap
        self.spent = spent
        # NaN when not known (an answer of a served flow, decoded from its message).
        self.left = max(0.0, cap - spent) if cap == cap and spent == spent else math.nan


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


# -- one line per error ---------------------------------------------------------------------------

# Line breaks and runs of whitespace inside a message.
_SPACE = re.compile(r"\s+")
# A lone surrogate (bytes a command line could not decode, a JSON "\ud800") quoted in a message:
# written as its escape, so the line can be printed, logged and sent as UTF-8.
_SURROGATE = re.compile("[\ud800-\udfff]")


def one_line(exc: BaseException, *, code: bool = False) -> str:
    """Return ``exc`` as one line of plain text, no traceback: the one way every surface words
    an error (the CLI, the DataFrame ``error`` column, the run log, the form, the server).

    A flownb error is its message (an :class:`InputError`'s names each problem, up to
    ``InputError.MAX_LISTED``, then how many more); any other exception is
    ``"TypeName: message"`` (just the type name when it has no message). ``code=True`` puts the
    error's code first, ``"provider_timeout: ..."``, for places read by programs as well as
    people (the ``error`` column, the run log). Line breaks and runs of whitespace become single
    spaces; a lone surrogate becomes its escape (``\\udcff``).
    """
    if isinstance(exc, FlownbError):
        text = f"{exc.code}: {exc.message}" if code else exc.message
    else:
        detail = str(exc)
        text = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    text = _SPACE.sub(" ", text).strip()
    if not text.isascii():
        text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text
