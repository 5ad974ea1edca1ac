"""Who is calling: the ``x-api-key`` check as a FastAPI dependency.

:func:`key_dependency` returns the dependency the flow routes' router declares. It answers the
contract's 401s (``missing_api_key`` / ``invalid_api_key``) and yields the :class:`Caller`, the
identity of the key that was accepted (its name and shown prefix, never the key), so a dependency
that builds on it (a spend cap per key, say) declares ``Depends(authenticated)`` and gets the
same caller: FastAPI solves a dependency once per request. Declared through ``Security`` with
:data:`API_KEY`, so the OpenAPI document names the scheme on every route that needs a key.

The caller is also left in the request's state (:data:`CALLER_STATE`): the connection guard
of :mod:`flownb.server.protocol` counts a connection as proven once one of its requests was
authenticated.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fastapi import Request, Security
from fastapi.security import APIKeyHeader

from ..errors import ConfigError
from .errors import ApiProblem, log
from .keys import KeyStore
from .request_id import _rid

__all__ = ["API_KEY", "CALLER_STATE", "Caller", "key_dependency"]

# Where the accepted caller is left in the ASGI scope's "state" (request.state): shared by every
# copy of the scope the middlewares make, and read by the connection guard when a response ends.
CALLER_STATE = "flownb_caller"

# auto_error=False: a missing key is answered by us, in the contract's shape (FastAPI's own
# answer would be a 403 with its own body).
API_KEY = APIKeyHeader(
    name="x-api-key",
    scheme_name="ApiKeyAuth",
    auto_error=False,
)


@dataclass(frozen=True, slots=True)
class Caller:
    """The key a request was accepted with: its name and shown prefix (``fnb_`` and 8
    characters); the key itself is never kept."""

    name: str
    prefix: str


def key_dependency(keys: KeyStore) -> Callable[..., Awaitable[Caller]]:
    """Return the dependency that checks a request's ``x-api-key`` against ``keys``.

    The dependency returns the :class:`Caller`, and raises :class:`ApiProblem`: 401
    ``missing_api_key`` / ``invalid_api_key``, or 500 ``internal_error`` when the key file
    cannot be read (what is wrong goes to the log, not to the caller).
    """

    # async: a plain function would be run in a worker thread on every request.
    async def authenticated(request: Request, key: str | None = Security(API_KEY)) -> Caller:
        try:
            verdict = keys.check(key)
        except ConfigError as exc:  # a corrupt key file: say so in the log, not to callers
            log.error("request %s: %s", _rid(request), exc.message)
            raise ApiProblem(
                500, "internal_error", "the server cannot read its key file; see its log"
            ) from None
        if not verdict.ok:
            raise ApiProblem(401, verdict.code, verdict.message)
        caller = Caller(verdict.name or "", verdict.prefix)
        setattr(request.state, CALLER_STATE, caller)
        return caller

    return authenticated
