"""Who is calling: the ``x-api-key`` check as a FastAPI dependency.

:class:`KeyCheck` is the dependency the flow routes' router is included with
(``Security(KeyCheck(keys))``). It answers the contract's 401s (``missing_api_key`` /
``invalid_api_key``) and yields the :class:`Caller`, the identity of the key that was accepted
(its name and shown prefix, never the key), so a dependency that builds on it (a spend cap per
key, say) declares ``Depends(the_same_key_check)`` and gets the same caller: FastAPI solves a
dependency once per request. Being an ``APIKeyHeader``, it makes the OpenAPI document name the
scheme on every route that needs a key.

The caller is also left in the request's state (:data:`CALLER_STATE`): the connection guard
of :mod:`flownb.server.protocol` counts a connection as proven once one of its requests was
authenticated.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from fastapi.security import APIKeyHeader

from ..errors import ConfigError
from .errors import ApiProblem, log
from .keys import KeyStore
from .request_id import _rid

__all__ = ["CALLER_STATE", "Caller", "KeyCheck"]

# Where the accepted caller is left in the ASGI scope's "state" (request.state): shared by every
# copy of the scope the middlewares make, and read by the connection guard when a response ends.
CALLER_STATE = "flownb_caller"


class KeyCheck(APIKeyHeader):
    """The ``x-api-key`` scheme and its check in one: an :class:`APIKeyHeader` (so FastAPI
    documents the scheme wherever it is a dependency) whose call checks the key against a
    :class:`KeyStore`. One dependency, not a header dependency under a check: each level
    FastAPI solves per request was a measurable share of the server's time.

    Calling it returns the :class:`Caller`, and raises :class:`ApiProblem`: 401
    ``missing_api_key`` / ``invalid_api_key``, or 500 ``internal_error`` when the key file
    cannot be read (what is wrong goes to the log, not to the caller).
    """

    def __init__(self, keys: KeyStore) -> None:
        # auto_error=False: a missing key is answered by us, in the contract's shape (FastAPI's
        # own answer would be a 403 with its own body).
        super().__init__(name="x-api-key", scheme_name="ApiKeyAuth", auto_error=False)
        self.keys = keys

    async def __call__(self, request: Request) -> Caller:  # type: ignore[override]
        try:
            verdict = self.keys.check(request.headers.get("x-api-key"))
        except ConfigError as exc:  # a corrupt key file: say so in the log, not to callers
            log.error("request %s: %s", _rid(request), exc.message)
            raise ApiProblem(
                500, "internal_error", "the server cannot read its key file; see its log"
            ) from None
        if not verdict.ok:
            raise ApiProblem(401, verdict.code, verdict.message)
        caller = Caller(verdict.name or "", verdict.prefix, verdict.digest, verdict.max_spend)
        setattr(request.state, CALLER_STATE, caller)
        return caller


@dataclass(frozen=True, slots=True)
class Caller:
    """The key a request was accepted with: its name and shown prefix (``fnb_`` and 8
    characters); the key itself is never kept."""

    name: str
    prefix: str
    digest: str = ""  # the key's stored SHA-256 digest (what its spending is filed under)
    max_spend: float | None = None  # the key's spend cap, US dollars (None: none)
