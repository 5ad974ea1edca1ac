"""Anthropic's Message Batches API for the loopback fake, on a compressed timeline.

Routes (Anthropic's wire format, as the ``anthropic`` SDK's types read it):
``POST /v1/messages/batches`` (``{"requests": [{"custom_id", "params"}, ...]}``),
``GET /v1/messages/batches`` (newest first, ``has_more`` / ``first_id`` / ``last_id``),
``GET /v1/messages/batches/{id}``, ``POST /v1/messages/batches/{id}/cancel`` and
``GET /v1/messages/batches/{id}/results`` (JSONL, one ``{"custom_id", "result"}`` a line).

A batch is ``in_progress`` for ``batch_seconds`` (its requests all counted as ``processing``, as
the real API counts them until the end), then ``ended`` with every request answered as the fake
answers the same request live. It misbehaves as the real one can: requests whose params hold
``batch_fail_marker`` end ``errored`` (with an error body), ``batch_expire=True`` ends the batch
with its second half ``expired``, a cancelled batch ends with its requests ``canceled``, and
``batch_create_delay`` holds the answer to a create for that many seconds after the batch exists
(a client killed meanwhile never learns its id), and ``batch_no_counts=True`` leaves the request
counts out of every batch object (``null``).

It records what a test needs: every created batch's requests, and how many batches were created.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from .fake_batches import BatchSettings, hold, newest_page

__all__ = ["MAX_REQUESTS", "MessageBatches"]

MAX_REQUESTS = 100_000  # Anthropic's limit of requests in one batch
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _stamp(when: float | None) -> str | None:
    """Return an RFC 3339 time, as Anthropic writes them."""
    if when is None:
        return None
    return datetime.fromtimestamp(when, UTC).isoformat().replace("+00:00", "Z")


def _origin(request: web.Request) -> str:
    """Return the scheme, host and port the request reached (for ``results_url``)."""
    return str(request.url.origin()).rstrip("/")


@dataclass
class _Batch:
    id: str
    requests: list[dict[str, Any]]
    created: float
    ended: float | None = None
    cancel_at: float | None = None
    results: list[dict[str, Any]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        found = dict.fromkeys(("processing", "succeeded", "errored", "canceled", "expired"), 0)
        if self.ended is None:
            found["processing"] = len(self.requests)
        else:
            for item in self.results:
                found[item["result"]["type"]] += 1
        return found

    def as_json(self, origin: str, counts: bool = True) -> dict[str, Any]:
        if self.ended is not None:
            status = "ended"
        elif self.cancel_at is not None:
            status = "canceling"
        else:
            status = "in_progress"
        return {
            "id": self.id,
            "type": "message_batch",
            "processing_status": status,
            "request_counts": self.counts() if counts else None,
            "created_at": _stamp(self.created),
            "expires_at": _stamp(self.created + 86400),
            "ended_at": _stamp(self.ended),
            "cancel_initiated_at": _stamp(self.cancel_at),
            "archived_at": None,
            "results_url": (
                f"{origin}/v1/messages/batches/{self.id}/results" if self.ended else None
            ),
        }


class MessageBatches:
    """The message batches one fake server holds. ``answer`` answers one request's params as the
    live Messages route would (set by the server that mounts these routes); ``check`` says why
    params are not a valid Messages request (None: they are)."""

    def __init__(self, settings: BatchSettings) -> None:
        self.settings = settings
        self.answer: Callable[[Mapping[str, Any]], dict[str, Any]] = lambda params: {}
        self.check: Callable[[Mapping[str, Any]], str | None] = lambda params: None
        self.batches: dict[str, _Batch] = {}
        self.submitted: list[list[dict[str, Any]]] = []  # every created batch's requests
        self.created = 0
        self._ids = itertools.count(1)

    @property
    def _counts(self) -> bool:
        return not getattr(self.settings, "batch_no_counts", False)

    def reset(self) -> None:
        self.batches.clear()
        self.submitted.clear()
        self.created = 0

    def _advance(self, batch: _Batch) -> None:
        """Move ``batch`` along its timeline; answer its requests when it ends."""
        if batch.ended is not None:
            return
        now = time.time()
        if batch.cancel_at is not None:
            self._finish(batch, 0, "canceled")
        elif now - batch.created >= self.settings.batch_seconds:
            if self.settings.batch_expire:
                self._finish(batch, len(batch.requests) // 2, "expired")
            else:
                self._finish(batch, len(batch.requests), "expired")  # none left to expire

    def _finish(self, batch: _Batch, answered: int, rest: str) -> None:
        marker = self.settings.batch_fail_marker
        for n, request in enumerate(batch.requests):
            params = request.get("params") or {}
            result: dict[str, Any]
            if n >= answered:
                result = {"type": rest}
            elif marker and marker in json.dumps(params, ensure_ascii=False):
                error = {"type": "invalid_request_error", "message": f"the prompt holds {marker!r}"}
                result = {
                    "type": "errored",
                    "error": {"type": "error", "error": error, "request_id": None},
                }
            else:
                message = dict(self.answer(params))
                message["id"] = f"msg_fake_batch_{n:06d}"
                result = {"type": "succeeded", "message": message}
            batch.results.append({"custom_id": request["custom_id"], "result": result})
        batch.ended = time.time()

    # -- routes --------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        """Register the Message Batches routes on ``app``."""
        app.router.add_post("/v1/messages/batches", self._create)
        app.router.add_get("/v1/messages/batches", self._list)
        app.router.add_get("/v1/messages/batches/{id}", self._retrieve)
        app.router.add_post("/v1/messages/batches/{id}/cancel", self._cancel)
        app.router.add_get("/v1/messages/batches/{id}/results", self._results)

    @staticmethod
    def _error(status: int, kind: str, message: str) -> web.Response:
        body = {"type": "error", "error": {"type": kind, "message": message}}
        return web.json_response(body, status=status, headers={"request-id": "req_fake_batch"})

    def _invalid(self, body: Any) -> str | None:
        """Return why a create body is refused, or None."""
        requests = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(requests, list) or not requests:
            return "requests: at least one request is required"
        if len(requests) > MAX_REQUESTS:
            return f"requests: at most {MAX_REQUESTS} requests per batch"
        seen: set[str] = set()
        for n, request in enumerate(requests):
            custom_id = request.get("custom_id") if isinstance(request, dict) else None
            if not isinstance(custom_id, str) or not _CUSTOM_ID.match(custom_id):
                return f"requests.{n}.custom_id: must match ^[a-zA-Z0-9_-]{{1,64}}$"
            if custom_id in seen:
                return f"requests.{n}.custom_id: {custom_id!r} is not unique in the batch"
            seen.add(custom_id)
            params = request.get("params")
            why = self.check(params) if isinstance(params, dict) else "params: Field required"
            if why is not None:
                return f"requests.{n}.params.{why}"
        return None

    async def _create(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._error(400, "invalid_request_error", "the body is not JSON")
        why = self._invalid(body)
        if why is not None:
            return self._error(400, "invalid_request_error", why)
        batch = _Batch(f"msgbatch_fake{next(self._ids):06d}", body["requests"], time.time())
        self.batches[batch.id] = batch
        self.submitted.append(batch.requests)
        self.created += 1
        await hold(request, self.settings.batch_create_delay)  # it exists; its creator hears late
        return web.json_response(batch.as_json(_origin(request), self._counts))

    def _found(self, request: web.Request) -> _Batch | web.Response:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            ident = request.match_info["id"]
            return self._error(404, "not_found_error", f"No message batch with id {ident!r}")
        self._advance(batch)
        return batch

    async def _list(self, request: web.Request) -> web.Response:
        origin = _origin(request)
        newest = sorted(self.batches.values(), key=lambda b: b.created, reverse=True)
        limit = int(request.query.get("limit", "20"))
        page, more = newest_page(newest, request.query.get("after_id"), limit)
        for batch in page:
            self._advance(batch)
        return web.json_response(
            {
                "data": [b.as_json(origin, self._counts) for b in page],
                "has_more": more,
                "first_id": page[0].id if page else None,
                "last_id": page[-1].id if page else None,
            }
        )

    async def _retrieve(self, request: web.Request) -> web.Response:
        found = self._found(request)
        if isinstance(found, web.Response):
            return found
        return web.json_response(found.as_json(_origin(request), self._counts))

    async def _cancel(self, request: web.Request) -> web.Response:
        found = self._found(request)
        if isinstance(found, web.Response):
            return found
        if found.ended is None:
            found.cancel_at = time.time()
        return web.json_response(found.as_json(_origin(request), self._counts))

    async def _results(self, request: web.Request) -> web.Response:
        found = self._found(request)
        if isinstance(found, web.Response):
            return found
        if found.ended is None:
            return self._error(
                400, "invalid_request_error", f"Message batch {found.id} is still processing"
            )
        data = "".join(json.dumps(item) + "\n" for item in found.results)
        return web.Response(text=data, content_type="application/binary")
