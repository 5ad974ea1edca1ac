"""The service's own routes, beside the contract's: ``/media/{name}`` (generated images),
``/healthz``, and the OpenAPI document (FastAPI's, less the 422 only the run route answers).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.responses import FileResponse, Response

from ..infra.media import MEDIA_NAME, MediaStore, mark_used
from ..providers.base import Provider
from .errors import ApiProblem, json_response
from .schemas import CONNECTION_RESPONSES, MEDIA_RESPONSES, Health

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
        responses=CONNECTION_RESPONSES,
        tags=["service"],
    )
    async def healthz() -> Response:
        return json_response({"status": "ok", "provider": provider.name})


def _openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """Return the app's OpenAPI document maker: FastAPI's, less the 422 it documents for every
    route with a parameter (only the run route can answer one, documented in its own words);
    made once."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            for operations in schema["paths"].values():
                for operation in operations.values():
                    answer = operation.get("responses", {}).get("422", {})
                    if "HTTPValidationError" in json.dumps(answer):
                        del operation["responses"]["422"]
            for unused in ("HTTPValidationError", "ValidationError"):
                schema["components"]["schemas"].pop(unused, None)
            app.openapi_schema = schema
        return app.openapi_schema

    return openapi
