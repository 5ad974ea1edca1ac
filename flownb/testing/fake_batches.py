"""OpenAI's Files and Batches APIs for the loopback fake server, on a compressed timeline.

Routes (under ``/v1``): ``POST /files`` (multipart: ``purpose``, ``file``), ``GET /files/{id}``,
``GET /files/{id}/content``, ``POST /batches``, ``GET /batches``, ``GET /batches/{id}``,
``POST /batches/{id}/cancel``. A batch moves ``validating -> in_progress -> finalizing ->
completed`` over ``batch_seconds`` (checked lazily, on each read), then answers every line as
the fake answers the same request live (``answer``). It can misbehave as a provider does:
lines whose prompt holds ``batch_fail_marker`` fail (they go to the error file), and with
``batch_expire=True`` the batch ends ``expired`` with only its first half answered; with
``batch_create_delay`` a create is answered that many seconds after the batch exists (a client
killed meanwhile never learns its id).

It records what a test needs: every uploaded file's bytes, and how many batches were created.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from aiohttp import web

from .fake_checks import openai_refusal

__all__ = ["BatchBackend", "BatchSettings", "hold", "newest_page"]

# (path, body) -> the JSON body the fake answers that request with live.
Answer = Callable[[str, Mapping[str, Any]], dict[str, Any]]

_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")


class BatchSettings(Protocol):
    """How batches behave (the fake's ``FakeConfig`` has these): seconds from creation to
    completion, the marker of lines that fail, whether batches expire half done, and seconds a
    create's answer is held back after the batch exists."""

    batch_seconds: float
    batch_fail_marker: str
    batch_expire: bool
    batch_create_delay: float


async def hold(request: web.Request, seconds: float) -> None:
    """Wait ``seconds`` before answering ``request``, or less if its client goes away (a killed
    client leaves no answer pending when the server stops)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if request.transport is None or request.transport.is_closing():
            return
        await asyncio.sleep(0.05)


class _Listed(Protocol):
    id: str


_B = TypeVar("_B", bound=_Listed)


def newest_page(newest: list[_B], after: str | None, limit: int) -> tuple[list[_B], bool]:
    """Return the page of at most ``limit`` batches that follows the batch ``after`` in
    ``newest`` (from the first when ``after`` is empty; none when it is unknown), and whether
    more follow: how both providers page their batch lists."""
    if after:
        ids = [b.id for b in newest]
        newest = newest[ids.index(after) + 1 :] if after in ids else []
    return newest[:limit], len(newest) > limit


@dataclass
class _Batch:
    id: str
    input_file_id: str
    endpoint: str
    created: float
    metadata: dict[str, Any]
    status: str = "validating"
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = field(
        default_factory=lambda: {"total": 0, "completed": 0, "failed": 0}
    )
    cancelled_at: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": None,
            "input_file_id": self.input_file_id,
            "completion_window": "24h",
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": int(self.created),
            "in_progress_at": None,
            "expires_at": int(self.created + 86400),
            "completed_at": None,
            "failed_at": None,
            "expired_at": None,
            "cancelled_at": int(self.cancelled_at) if self.cancelled_at else None,
            "request_counts": dict(self.counts),
            "metadata": self.metadata,
        }


class BatchBackend:
    """The files and batches one fake server holds; ``answer`` answers one request body."""

    def __init__(self, settings: BatchSettings, answer: Answer) -> None:
        self.settings = settings
        self.answer = answer
        self.files: dict[str, tuple[str, bytes]] = {}  # id -> (purpose, bytes)
        self.batches: dict[str, _Batch] = {}
        self.uploads: list[bytes] = []  # every file uploaded for purpose "batch", in order
        self.created = 0  # batches created
        self._ids = itertools.count(1)

    def reset(self) -> None:
        self.files.clear()
        self.batches.clear()
        self.uploads.clear()
        self.created = 0

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}-fake{next(self._ids):06d}"

    def _lines(self, batch: _Batch) -> list[dict[str, Any]]:
        raw = self.files[batch.input_file_id][1]
        return [json.loads(line) for line in raw.splitlines() if line.strip()]

    def _advance(self, batch: _Batch) -> None:
        """Move ``batch`` along its timeline; answer its lines when it ends."""
        if batch.status in ("completed", "expired", "cancelled", "failed"):
            return
        lines = self._lines(batch)
        batch.counts["total"] = len(lines)
        if batch.status == "cancelling":
            self._finish(batch, lines[:0], "cancelled")
            return
        elapsed = time.time() - batch.created
        span = max(self.settings.batch_seconds, 1e-6)
        if elapsed < span / 3:
            batch.status = "validating"
        elif elapsed < 2 * span / 3:
            batch.status = "in_progress"
            batch.counts["completed"] = len(lines) // 2
        elif elapsed < span:
            batch.status = "finalizing"
        elif self.settings.batch_expire:
            self._finish(batch, lines[: len(lines) // 2], "expired")
        else:
            self._finish(batch, lines, "completed")

    def _finish(self, batch: _Batch, done: list[dict[str, Any]], status: str) -> None:
        out: list[str] = []
        err: list[str] = []
        marker = self.settings.batch_fail_marker
        for line in done:
            custom_id, body = line["custom_id"], line.get("body") or {}
            request_id = self._new_id("req")
            if marker and marker in json.dumps(body, ensure_ascii=False):
                error = {"code": "invalid_prompt", "message": f"the prompt holds {marker!r}"}
                err.append(
                    json.dumps(
                        {"id": request_id, "custom_id": custom_id, "response": None, "error": error}
                    )
                )
                continue
            url = line.get("url", batch.endpoint)
            checked = isinstance(body, dict) and url.endswith(("/chat/completions", "/completions"))
            refusal = openai_refusal(url, body) if checked else None
            if refusal is not None:  # refused as the live route refuses it, in its line
                refused: dict[str, str | None] = {
                    "message": refusal.message,
                    "type": "invalid_request_error",
                    "param": refusal.param,
                    "code": refusal.code,
                }
                body_400 = {"error": refused}
                response = {"status_code": 400, "request_id": request_id, "body": body_400}
            else:
                answered = self.answer(url, body)
                response = {"status_code": 200, "request_id": request_id, "body": answered}
            line_out = {"id": request_id, "custom_id": custom_id, "response": response}
            out.append(json.dumps({**line_out, "error": None}))
        if out:
            batch.output_file_id = self._store("batch_output", "\n".join(out).encode() + b"\n")
        if err:
            batch.error_file_id = self._store("batch_output", "\n".join(err).encode() + b"\n")
        batch.counts.update(completed=len(out), failed=len(err))
        batch.status = status

    def _store(self, purpose: str, data: bytes) -> str:
        file_id = self._new_id("file")
        self.files[file_id] = (purpose, data)
        return file_id

    # -- routes --------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        """Register the Files and Batches routes on ``app``."""
        app.router.add_post("/v1/files", self._upload)
        app.router.add_get("/v1/files/{id}", self._file)
        app.router.add_get("/v1/files/{id}/content", self._content)
        app.router.add_post("/v1/batches", self._create)
        app.router.add_get("/v1/batches", self._list)
        app.router.add_get("/v1/batches/{id}", self._retrieve)
        app.router.add_post("/v1/batches/{id}/cancel", self._cancel)

    @staticmethod
    def _missing(what: str, ident: str) -> web.Response:
        body = {"error": {"message": f"No such {what}: {ident}", "type": "invalid_request_error"}}
        return web.json_response(body, status=404)

    def _file_json(self, file_id: str) -> dict[str, Any]:
        purpose, data = self.files[file_id]
        return {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": f"{file_id}.jsonl",
            "purpose": purpose,
            "status": "processed",
        }

    async def _upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form.get("file")
        purpose = str(form.get("purpose", ""))
        if upload is None or not hasattr(upload, "file"):
            return web.json_response({"error": {"message": "file is required"}}, status=400)
        data = upload.file.read()
        file_id = self._store(purpose, data)
        if purpose == "batch":
            self.uploads.append(data)
        return web.json_response(self._file_json(file_id))

    async def _file(self, request: web.Request) -> web.Response:
        file_id = request.match_info["id"]
        if file_id not in self.files:
            return self._missing("file", file_id)
        return web.json_response(self._file_json(file_id))

    async def _content(self, request: web.Request) -> web.Response:
        file_id = request.match_info["id"]
        if file_id not in self.files:
            return self._missing("file", file_id)
        return web.Response(body=self.files[file_id][1], content_type="application/jsonl")

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        file_id = body.get("input_file_id", "")
        if file_id not in self.files:
            return self._missing("file", file_id)
        if body.get("endpoint") not in _ENDPOINTS:
            message = f"endpoint must be one of {', '.join(_ENDPOINTS)}"
            return web.json_response({"error": {"message": message}}, status=400)
        batch = _Batch(
            self._new_id("batch"),
            file_id,
            body["endpoint"],
            time.time(),
            body.get("metadata") or {},
        )
        self.batches[batch.id] = batch
        self.created += 1
        self._advance(batch)
        await hold(request, self.settings.batch_create_delay)  # it exists; its creator hears late
        return web.json_response(batch.as_json())

    async def _list(self, request: web.Request) -> web.Response:
        # Newest first, a page of ``limit`` after the batch ``after``, as OpenAI lists them.
        newest = list(reversed(self.batches.values()))
        limit = int(request.query.get("limit", "20"))
        page, more = newest_page(newest, request.query.get("after"), limit)
        for batch in page:
            self._advance(batch)
        data = [b.as_json() for b in page]
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": more,
            }
        )

    async def _retrieve(self, request: web.Request) -> web.Response:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return self._missing("batch", request.match_info["id"])
        self._advance(batch)
        return web.json_response(batch.as_json())

    async def _cancel(self, request: web.Request) -> web.Response:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return self._missing("batch", request.match_info["id"])
        if batch.status not in ("completed", "expired", "failed", "cancelled"):
            batch.status = "cancelling"
            batch.cancelled_at = time.time()
        return web.json_response(batch.as_json())
