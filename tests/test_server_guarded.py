"""A router included behind guards answers the same through its fast routes and through FastAPI's
own: every guard runs, in order, on both paths, and the OpenAPI document is FastAPI's."""

from __future__ import annotations

import pytest
from fastapi import APIRouter, FastAPI, HTTPException, Request
from starlette.responses import JSONResponse, Response
from starlette.testclient import TestClient

from flownb.server.guarded import include_guarded


def _app(fast: bool) -> tuple[FastAPI, list[str]]:
    seen: list[str] = []

    async def first(request: Request) -> None:
        seen.append("first")
        request.state.who = request.headers.get("x-who")

    async def second(request: Request) -> None:  # a later guard reads what the first left
        seen.append("second")
        if request.state.who != "ok":
            raise HTTPException(402, "no budget")

    router = APIRouter()

    @router.post("/run/{item:path}")
    async def run(request: Request, item: str) -> Response:
        return JSONResponse({"item": item, "who": request.state.who})

    app = FastAPI()
    include_guarded(app, router, [first, second], fast=fast)
    return app, seen


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "fastapi"])
def test_every_guard_runs_in_order_on_either_path(fast: bool) -> None:
    app, seen = _app(fast)
    with TestClient(app) as client:
        refused = client.post("/run/a/b", headers={"x-who": "stranger"})
        assert refused.status_code == 402 and seen == ["first", "second"]
        seen.clear()
        ok = client.post("/run/a/b", headers={"x-who": "ok"})
        assert ok.json() == {"item": "a/b", "who": "ok"} and seen == ["first", "second"]
        assert client.get("/run/a").status_code == 405


def test_the_fast_routes_come_first_and_stay_out_of_the_document() -> None:
    app, _ = _app(True)
    assert getattr(app.router.routes[0], "path", None) == "/run/{item:path}"
    assert list(app.openapi()["paths"]) == ["/run/{item}"]


def test_an_endpoint_that_takes_more_than_path_parameters_has_no_fast_route() -> None:
    router = APIRouter()

    @router.get("/x")
    async def x(q: str) -> Response:
        return Response(q)

    with pytest.raises(TypeError, match="only path parameters"):
        include_guarded(FastAPI(), router, [])
