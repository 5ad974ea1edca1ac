"""OpenAI's Batch API (half price, results within 24 hours) through the official SDK.

:class:`OpenAIBatches` uploads a JSONL file of requests, creates a batch over it, reads its state,
cancels it and downloads its output and error files. What to put in a batch, and what to do with
its answers, is :mod:`flownb.batching`' business; this module only speaks to the API. The SDK's
exceptions are translated here, at one boundary, into :class:`~flownb.errors.ProviderError`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from ..errors import ProviderError
from .base import BatchState, Call, Generation

__all__ = ["BATCH_LIMITS", "OpenAIBatches"]

# OpenAI's published limits for one batch's input file.
BATCH_LIMITS = {"requests": 50_000, "bytes": 200 * 1024 * 1024}


class BatchingProvider(Protocol):
    """What the Batch API needs of the provider whose calls it batches."""

    base_url: str

    def request(self, call: Call) -> tuple[Any, dict[str, Any]]:
        """Return the node's prepared request and the body that asks for ``call``."""
        ...

    def batch_answer(self, endpoint: str, model: str, data: Mapping[str, Any]) -> Generation:
        """Return the generation a batch line's answer body holds."""
        ...


@contextmanager
def _translated(what: str) -> Iterator[None]:
    import openai

    try:
        yield
    except openai.APIStatusError as exc:
        raise ProviderError(
            f"OpenAI Batch API: {what} failed ({exc.status_code}): {exc.message}",
            status=exc.status_code,
            provider="openai",
        ) from exc
    except openai.APIError as exc:  # connection errors, timeouts, bodies that do not parse
        raise ProviderError(f"OpenAI Batch API: {what} failed: {exc}", provider="openai") from exc


class OpenAIBatches:
    """The Batch API of one OpenAI(-compatible) endpoint. ``api_key`` is held by the SDK client
    and shown nowhere."""

    def __init__(
        self, provider: BatchingProvider, api_key: str | None, *, timeout: float = 120.0
    ) -> None:
        from openai import OpenAI

        self.provider = provider
        base_url = provider.base_url
        self.base_url = base_url
        self.limits: Mapping[str, int] = BATCH_LIMITS
        # A placeholder key for local servers that need none (the SDK insists on one).
        self._client = OpenAI(
            api_key=api_key or "unused", base_url=base_url, max_retries=3, timeout=timeout
        )

    def __repr__(self) -> str:  # never the key
        return f"<OpenAIBatches {self.base_url!r}>"

    def request(self, call: Call) -> tuple[str, str, dict[str, Any]]:
        """Return ``(endpoint, model, body)``: what a batch line asks for ``call`` (the very body
        the provider would post live, so the answer fills the same cache entry)."""
        prepared, body = self.provider.request(call)
        return prepared.endpoint, str(body.get("model", "")), body

    def answer(self, endpoint: str, model: str, data: Mapping[str, Any]) -> Generation:
        """Return the generation a batch line's answer body holds.

        Raises:
            ProviderError: the body is not an answer.
        """
        return self.provider.batch_answer(endpoint, model, data)

    @staticmethod
    def line_url(endpoint: str) -> str:
        """Return the ``url`` a request line names for a provider endpoint (``/chat/completions``
        -> ``/v1/chat/completions``)."""
        return endpoint if endpoint.startswith("/v1/") else f"/v1{endpoint}"

    def submit(self, data: bytes, endpoint: str, metadata: Mapping[str, str]) -> BatchState:
        """Upload ``data`` (JSONL request lines) and create a batch over it.

        Raises:
            ProviderError: the upload or the creation was refused.
        """
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

    def download(self, file_id: str) -> bytes:
        """Return the bytes of a result (output or error) file."""
        with _translated(f"downloading {file_id}"):
            return self._client.files.content(file_id).read()

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
