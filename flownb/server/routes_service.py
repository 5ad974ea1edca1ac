"""The service's own routes, beside the contract's: ``/media/{name}`` (generated images),
``/healthz``, and the OpenAPI document (FastAPI's, less the 422 only the run route answers).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.responses import FileResponse, Response

from ..infra.media import MEDIA_NAME, MediaStore, mark_used
from ..providers.base import Provider
from .errors import ApiProblem, json_response, log
from .schemas import CONNECTION_RESPONSES, MEDIA_RESPONSES, Health

# The image types /media serves, by their first bytes (each format's signature): the type sent is
# what the file holds, whatever its name says.
_SIGNATURES: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"WEBP", 8, "image/webp"),  # after "RIFF" and the chunk size
)
_HEAD_BYTES = 12
# Caches may keep an image forever (its name is its content's digest); nosniff keeps a browser
# from reading it as anything but the type said.
_MEDIA_HEADERS = {
    "Cache-Control": "public, max-age=31536000, immutable",
    "X-Content-Type-Options": "nosniff",
}


def image_type(head: bytes) -> str | None:
    """Return the media type of an image from its first bytes (PNG, JPEG, GIF, WebP), or
    ``None`` when they are none of these."""
    for signature, offset, media_type in _SIGNATURES:
        if head[offset : offset + len(signature)] == signature:
            if media_type == "image/webp" and not head.startswith(b"RIFF"):
                continue
            return media_type
    return None


def _sniffed(path: Path) -> str | None:
    """Return the image type of the file at ``path`` (``None``: gone or not an image)."""
    try:
        with open(path, "rb") as fh:
            return image_type(fh.read(_HEAD_BYTES))
    except OSError:
        return None


def _add_media_route(app: FastAPI, media: MediaStore) -> None:
    """Add ``/media/{name}``: generated images, no key needed (names are unguessable digests).
    Served with the type their bytes say; a file that is not an image is not served."""

    @app.get(
        "/media/{name}",
        summary="A generated image (no key needed: names are unguessable digests)",
        operation_id="getMedia",
        responses=MEDIA_RESPONSES,
        response_class=Response,
        tags=["media"],
    )
    async def get_media(name: str) -> Response:
        path = media.directory / name
        # Marked used (the media cap deletes the images used longest ago first).
        if MEDIA_NAME.fullmatch(name) is None or not mark_used(path):
            raise ApiProblem(404, "not_found", "no image with this name")
        media_type = _sniffed(path)
        if media_type is None:  # never sent as something a browser might run
            log.warning("media file %s is not an image of a known type; not served", name)
            raise ApiProblem(404, "not_found", "no image with this name")
        return FileResponse(path, media_type=media_type, headers=_MEDIA_HEADERS)


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
