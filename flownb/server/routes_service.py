"""The service's own routes, beside the contract's: ``/media/{name}`` (generated images),
``/healthz``, and the OpenAPI document (FastAPI's, less the 422 only the run route answers, with
the ``x-api-key`` scheme).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.responses import FileResponse, Response

from ..infra.media import MEDIA_NAME, MediaStore, mark_used
from ..providers.base import Provider
from .errors import ApiProblem, json_response
from .schemas import MEDIA_RESPONSES, Health

_MEDIA_TYPES = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "webp": "image/webp",
    "gif": "image/gif",
}


def _add_media_route(app: FastAPI, media: MediaStore) -> None:
    """Add ``/media/{name}``: generated images, no key needed (names are unguessable digests)."""

    @app.get(
        "/media/{name}",
        summary="A generated image (no key needed: names are unguessable digests)",
        operation_id="getMedia",
        responses=MEDIA_RESPONSES,
        response_class=Response,
        tags=["media"],
    )
    async def get_media(name: str) -> Response:
        match = MEDIA_NAME.fullmatch(name)
        path = media.directory / name
        # Marked used (the media cap deletes the images used longest ago first).
        if match is None or not mark_used(path):
            raise ApiProblem(404, "not_found", "no image with this name")
        return FileResponse(
            path,
            media_type=_MEDIA_TYPES[match.group(1)],
            headers={"Cache-Control": "public, max-age=31536000, immutable"},
        )


def _add_health_route(app: FastAPI, provider: Provider) -> None:
    """Add ``/healthz``: the service is up, and with which provider."""

    @app.get(
        "/healthz",
        summary="Health check",
        operation_id="healthz",
        response_model=Health,
        tags=["service"],
    )
    async def healthz() -> Response:
        return json_response({"status": "ok", "provider": provider.name})


def _openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """Return the app's OpenAPI document maker: FastAPI's, less the 422 that only the run
    route can answer, with the ``x-api-key`` scheme; made once."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            # FastAPI documents a 422 for every route with a parameter; only run can answer it.
            paths = schema["paths"]
            for path in ("/media/{name}",):
                paths[path]["get"]["responses"].pop("422", None)
            for unused in ("HTTPValidationError", "ValidationError"):
                schema["components"]["schemas"].pop(unused, None)
            schema.setdefault("components", {})["securitySchemes"] = {
                "ApiKeyAuth": {"type": "apiKey", "in": "header", "name": "x-api-key"}
            }
            app.openapi_schema = schema
        return app.openapi_schema

    return openapi
