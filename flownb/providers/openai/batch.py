"""OpenAI's Batch API (half price, results within 24 hours) through the official SDK.

:class:`OpenAIBatches` uploads a JSONL file of requests, creates a batch over it, reads its
state, cancels it, reads its output and error files, and finds a batch again by the digest in
its metadata. What to put in a batch, and what to do with its answers, is
:mod:`flownb.frames.batch_api`' business; this module only speaks to the API. The SDK's exceptions
are
translated here, at one boundary, into :class:`~flownb.errors.ProviderError`.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import orjson

from ...errors import ProviderError
from ..base import BatchState, Call, Generation
from ..images import has_images
from ..redirects import refused_in, sync_httpx_hooks
from ..vendor import tls_context

__all__ = ["BATCH_LIMITS", "OpenAIBatches"]

# OpenAI's published limits for one batch's input file.
BATCH_LIMITS = {"requests": 50_000, "bytes": 200 * 1024 * 1024}


# What stands for a call's key and prompt in a node's line (see OpenAIBatches.lines): text no
# key, parameter or prompt holds.
_KEY_SLOT, _PROMPT_SLOT = "\x00flownb key\x00", "\x00flownb prompt\x00"

# The SDK clients built so far, by (process, base URL, key, timeout).
_clients: dict[tuple[int, str, str | None, float], Any] = {}
_clients_lock = threading.Lock()


class BatchingProvider(Protocol):
    """What the Batch API needs of the provider whose calls it batches."""

    base_url: str

    def request(self, call: Call) -> tuple[Any, dict[str, Any]]:
        """Return the node's prepared request and the body that asks for ``call``."""
        ...

    def batch_answer(self, endpoint: str, model: str, data: Mapping[str, Any]) -> Generation:
        """Return the generation a batch line's answer body holds."""
        ...


def _line_error(line: Mapping[str, Any]) -> str:
    """Return why a result line has no answer, as its error says."""
    error = line.get("error") or (line.get("response") or {}).get("body", {}).get("error") or {}
    if isinstance(error, Mapping):
        return str(error.get("message") or error.get("code") or "no reason given")
    return str(error)


@contextmanager
def _translated(what: str) -> Iterator[None]:
    import openai

    try:
        yield
    except openai.APIError as exc:
        refused = refused_in(exc)
        if refused is not None:
            raise refused from exc
        if isinstance(exc, openai.APIStatusError):
            raise ProviderError(
                f"OpenAI Batch API: {what} failed ({exc.status_code}): {exc.message}",
                status=exc.status_code,
                provider="openai",
            ) from exc
        # connection errors, timeouts, bodies that do not parse
        raise ProviderError(f"OpenAI Batch API: {what} failed: {exc}", provider="openai") from exc


class OpenAIBatches:
    """The Batch API of one OpenAI(-compatible) endpoint. ``api_key`` is held by the SDK client
    and shown nowhere."""

    def __init__(
        self, provider: BatchingProvider, api_key: str | None, *, timeout: float = 120.0
    ) -> None:
        from openai import DefaultHttpxClient, OpenAI

        self.provider = provider
        base_url = provider.base_url
        self.base_url = base_url
        self.limits: Mapping[str, int] = BATCH_LIMITS
        # One SDK client per endpoint, key and process, kept for later runs: building one
        # (its HTTP client and TLS context) costs tens of milliseconds of CPU. A forked child
        # builds its own rather than share its parent's connections.
        slot = (os.getpid(), base_url, api_key, timeout)
        with _clients_lock:
            client = _clients.get(slot)
            if client is None:
                # A placeholder key for local servers that need none (the SDK insists on one).
                client = _clients[slot] = OpenAI(
                    api_key=api_key or "unused",
                    base_url=base_url,
                    max_retries=3,
                    timeout=timeout,
                    # A redirect to another origin is refused: the key stays with its own.
                    http_client=DefaultHttpxClient(
                        event_hooks=sync_httpx_hooks(), verify=tls_context()
                    ),
                )
        self._client = client

    def __repr__(self) -> str:  # never the key
        return f"<OpenAIBatches {self.base_url!r}>"

    def line(self, key: str, call: Call) -> tuple[str, str, bytes]:
        """Return ``(endpoint, model, line)``: the JSONL line asking for ``call`` under the custom
        id ``key`` (its body is the very one the provider would post live, so the answer fills
        the same cache entry)."""
        prepared, body = self.provider.request(call)
        line = {
            "custom_id": key,
            "method": "POST",
            "url": self.line_url(prepared.endpoint),
            "body": body,
        }
        return prepared.endpoint, str(body.get("model", "")), orjson.dumps(line)

    def lines(self, calls: Iterable[tuple[str, Call]]) -> Iterator[tuple[str, str, bytes]]:
        """Yield what :meth:`line` returns for each ``(key, call)``, in order, a few times
        faster: a node's line is made once, by :meth:`line`, around placeholders, and each
        call's key and prompt are spliced in as JSON strings (a body depends on the prompt only
        through where it goes, and whether it shows images: such a prompt, and a node whose
        line does not hold the prompt as one whole string, go through :meth:`line`)."""
        frames: dict[tuple[int, str, str, str | None], tuple[str, str, bytes, bytes, bytes] | None]
        frames = {}
        dumps = orjson.dumps
        for key, call in calls:
            node = (id(call.params), call.kind, call.node_id, call.system)
            if node not in frames:
                frames[node] = self._frame(call)
            frame = frames[node]
            if frame is None or has_images(call.prompt):
                yield self.line(key, call)
                continue
            endpoint, model, head, middle, tail = frame
            yield endpoint, model, b"".join((head, dumps(key), middle, dumps(call.prompt), tail))

    def _frame(self, call: Call) -> tuple[str, str, bytes, bytes, bytes] | None:
        """Return ``(endpoint, model, head, middle, tail)``: the line of ``call``'s node, cut
        where its key and its prompt go; None when the prompt is not one JSON string of it."""
        endpoint, model, line = self.line(_KEY_SLOT, dataclasses.replace(call, prompt=_PROMPT_SLOT))
        key, prompt = orjson.dumps(_KEY_SLOT), orjson.dumps(_PROMPT_SLOT)
        if line.count(key) != 1 or line.count(prompt) != 1 or line.index(key) > line.index(prompt):
            return None
        head, rest = line.split(key)
        middle, tail = rest.split(prompt)
        return endpoint, model, head, middle, tail

    @staticmethod
    def line_url(endpoint: str) -> str:
        """Return the ``url`` a request line names for a provider endpoint (``/chat/completions``
        -> ``/v1/chat/completions``)."""
        return endpoint if endpoint.startswith("/v1/") else f"/v1{endpoint}"

    def submit(
        self, lines: Sequence[bytes], endpoint: str, metadata: Mapping[str, str]
    ) -> BatchState:
        """Upload ``lines`` as one JSONL file and create a batch over it (``metadata`` goes
        with the batch, where :meth:`find` reads it back).

        Raises:
            ProviderError: the upload or the creation was refused.
        """
        data = b"\n".join(lines) + b"\n"
        with _translated("uploading the batch file"):
            uploaded = self._client.files.create(file=("flownb-batch.jsonl", data), purpose="batch")
        with _translated("creating the batch"):
            batch = self._client.batches.create(
                input_file_id=uploaded.id,
                endpoint=self.line_url(endpoint),  # type: ignore[arg-type]
                completion_window="24h",
                metadata=dict(metadata),
            )
        return self._state(batch)

    def find(self, digest: str, since: float, total: int) -> list[BatchState]:
        """Return the batch whose metadata carries ``flownb_digest == digest``, created after
        ``since`` (a minute's clock skew allowed); empty when there is none.

        Raises:
            ProviderError: the API cannot be reached.
        """
        with _translated("listing batches"):
            for batch in self._client.batches.list(limit=100):  # newest first, page by page
                if batch.created_at < since - 60:
                    break
                if (batch.metadata or {}).get("flownb_digest") == digest:
                    return [self._state(batch)]
        return []

    def status(self, batch_id: str) -> BatchState:
        """Return the batch's current state.

        Raises:
            ProviderError: the API cannot be reached or does not know the batch.
        """
        with _translated(f"reading batch {batch_id}"):
            return self._state(self._client.batches.retrieve(batch_id))

    def cancel(self, batch_id: str) -> BatchState:
        """Ask the API to cancel the batch; returns its state (``cancelling`` at first)."""
        with _translated(f"cancelling batch {batch_id}"):
            return self._state(self._client.batches.cancel(batch_id))

    def results(
        self, state: BatchState, endpoint: str, model: str
    ) -> Iterator[tuple[str, Generation | str]]:
        """Yield every line of an ended batch's output and error files: ``(custom_id,
        generation)`` for an answer, ``(custom_id, why)`` for a failed line.

        Raises:
            ProviderError: a file cannot be downloaded.
        """
        for file_id in (state.output_file_id, state.error_file_id):
            if not file_id:
                continue
            with _translated(f"downloading {file_id}"):
                data = self._client.files.content(file_id).read()
            for raw in data.splitlines():
                if not raw or raw.isspace():  # (no copy of the line, as strip() makes)
                    continue
                line = orjson.loads(raw)
                key = str(line.get("custom_id", ""))
                response = line.get("response") or {}
                status = response.get("status_code")
                if status == 200:
                    try:
                        yield (
                            key,
                            self.provider.batch_answer(endpoint, model, response.get("body") or {}),
                        )
                    except ProviderError as exc:
                        yield key, str(exc)
                else:
                    why = _line_error(line)
                    yield key, f"{status}: {why}" if status else why

    @staticmethod
    def _state(batch: Any) -> BatchState:
        counts = batch.request_counts
        errors = (
            [e.message or e.code or "" for e in (batch.errors.data or [])] if batch.errors else []
        )
        return BatchState(
            batch.id,
            batch.status,
            total=getattr(counts, "total", 0) or 0,
            completed=getattr(counts, "completed", 0) or 0,
            failed=getattr(counts, "failed", 0) or 0,
            output_file_id=batch.output_file_id,
            error_file_id=batch.error_file_id,
            errors=[e for e in errors if e],
        )
