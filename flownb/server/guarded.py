"""A router behind guards, with a fast path that runs the same guards.

:func:`include_guarded` includes a router with its guards as FastAPI dependencies (so the OpenAPI
document declares them: a guard that is a security scheme, like
:class:`~flownb.server.auth.KeyCheck`, names it on every route) and also mounts each of the
router's routes, first in the app, as a plain Starlette route that awaits the same guards, in the
same order, then calls the same endpoint. FastAPI's per-request work for a route (solving a tree
of dependencies, an exit stack, matching the docs' routes first) cost as much as the whole run
of a small offline flow; the fast route does what that work would have done for these routes and
nothing else. Both paths are one list of guards, so a guard added there (a spend cap per key,
say) is never skipped by either.

A guard is an async callable taking the request alone and returning what it establishes (the key
check returns the :class:`~flownb.server.auth.Caller` and leaves it in ``request.state``, where
a later guard reads it). An endpoint takes the request and string path parameters only.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import Depends, FastAPI, Security
from fastapi.routing import APIRoute, APIRouter
from fastapi.security.base import SecurityBase
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["Guard", "include_guarded"]

Guard = Callable[[Request], Awaitable[Any]]


def include_guarded(
    app: FastAPI, router: APIRouter, guards: Sequence[Guard], *, fast: bool = True
) -> None:
    """Include ``router`` in ``app`` behind ``guards``; with ``fast``, also put a fast route
    for each of its routes first in the app (see the module's docstring).

    Raises:
        TypeError: an endpoint takes something besides the request and path parameters.
    """
    app.include_router(
        router,
        dependencies=[Security(g) if isinstance(g, SecurityBase) else Depends(g) for g in guards],
    )
    if not fast:
        return
    fast_routes: list[Route] = []
    for route in router.routes:
        if isinstance(route, APIRoute):
            fast_routes.append(_fast_route(route, tuple(guards)))
    app.router.routes[:0] = fast_routes


def _fast_route(route: APIRoute, guards: tuple[Guard, ...]) -> Route:
    """Return a Starlette route with ``route``'s path and methods that awaits ``guards`` then
    calls its endpoint with the request and the path parameters it names."""
    endpoint = route.endpoint
    params = inspect.signature(endpoint).parameters
    wants_request = "request" in params
    names = tuple(n for n in params if n != "request")
    unknown = [n for n in names if f"{{{n}}}" not in route.path and f"{{{n}:" not in route.path]
    if unknown:
        raise TypeError(f"{route.path}: a fast route's endpoint takes only path parameters")

    async def handle(request: Request) -> Response:
        for guard in guards:
            await guard(request)
        kwargs: dict[str, Any] = {n: request.path_params[n] for n in names}
        if wants_request:
            kwargs["request"] = request
        return await endpoint(**kwargs)

    fast = Route(route.path, handle, methods=sorted(route.methods or ()))
    fast.include_in_schema = False  # FastAPI's route documents it
    # Same methods as the FastAPI route: no HEAD added (the request-id middleware answers HEAD
    # as GET), 405 with Allow for others.
    fast.methods = set(route.methods or ())
    return fast
