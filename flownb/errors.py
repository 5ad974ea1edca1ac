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
    └── ApiError                     the flow service answered with an error (client side)
        └── AuthError                401: missing, invalid or revoked API key

Other libraries' exceptions are translated into these at one boundary each (``raise ... from``),
so callers catch ``FlownbError`` and nothing else. Errors about bad values (config, flow file,
input) are also ``ValueError`` and a missing flow is also ``LookupError``, so generic handlers
keep working.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    "InputError",
    "Problem",
    "ProviderError",
    "ProviderTimeout",
    "RateLimited",
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
    """No flow with that id."""

    code = "flow_not_found"


class InputError(FlownbError, ValueError):
    """Variables that do not fit the flow. ``problems`` lists every problem found, not just one.

    The message names the first :attr:`MAX_LISTED` problems (then how many more) and ends with
    ``hint``, the one piece of advice that applies to them all, when the raiser gives one.
    """

    code = "invalid_variables"
    MAX_LISTED = 10

    def __init__(self, problems: Sequence[Problem], *, hint: str | None = None) -> None:
        self.problems = list(problems)
        self.hint = hint
        listed = [p.message for p in self.problems[: self.MAX_LISTED]]
        message = "; ".join(listed) or "invalid input"
        more = len(self.problems) - len(listed)
        if more > 0:
            message += f"; and {more} more problem{'s' * (more > 1)}"
        if hint:
            message += f"; {hint}"
        # The most specific code when every problem agrees, so callers can branch on it.
        codes = {p.code for p in self.problems}
        super().__init__(message, code=codes.pop() if len(codes) == 1 else "invalid_variables")


class ProviderError(FlownbError):
    """A model provider failed. Keeps the provider's message, HTTP status and request id."""

    code = "provider_error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        request_id: str | None = None,
        provider: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.request_id = request_id
        self.provider = provider


class ProviderTimeout(ProviderError):
    """The provider did not answer in time."""

    code = "provider_timeout"


class RateLimited(ProviderError):
    """The provider kept refusing us for rate. ``retry_after`` is its hint in seconds, if any."""

    code = "upstream_rate_limited"

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


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


class ApiError(FlownbError):
    """The flow service answered with an error; carries its status, body fields and request id."""

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
    ) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.problems = list(problems)
        self.request_id = request_id
        self.results = results


class AuthError(ApiError):
    """401 from the service: the API key is missing, invalid or revoked."""

    code = "invalid_api_key"
