"""Anthropic's Message Batches (half price, results within 24 hours) through the official SDK.

:class:`AnthropicBatches` creates a batch of Messages requests (``client.messages.batches``),
reads its state, cancels it, reads its results and finds a batch a crashed process created. Each
request's ``custom_id`` is the call's cache key (64 hex characters: exactly what Anthropic's
``^[a-zA-Z0-9_-]{1,64}$`` allows) and its ``params`` are the very request the provider sends live,
so an answer fills the same cache entry. What to put in a batch, and what to do with its
answers, is :mod:`flownb.frames.batch_api`' business; this module only speaks to the API.

Anthropic's batch states are mapped onto flownb's: ``in_progress`` stays, ``canceling`` is
``cancelling``, and an ``ended`` batch is ``cancelled`` (cancelled by request), ``expired`` (some
requests expired) or ``completed``. Requests that errored, expired or were cancelled come back
as failures, named with why.

Anthropic keeps no metadata with a batch, so :meth:`AnthropicBatches.find` recognises one by when
it was created and how many requests it holds (the digest cannot be read back).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import orjson

from ...errors import ConfigError, ProviderError
from ..base import BatchState, Call, Generation
from ..redirects import sync_httpx_hooks
from ..vendor import no_sdk_spans, tls_context

__all__ = ["BATCH_LIMITS", "ENDPOINT", "AnthropicBatches"]

# Anthropic's limits for one batch: 100,000 requests, 256 MB. The byte limit counts the whole
# create body; a megabyte is left for what wraps the requests.
BATCH_LIMITS = {"requests": 100_000, "bytes": 255 * 1024 * 1024}
ENDPOINT = "/v1/messages"

_NOT_RUN = {
    "expired": "the batch expired before this request ran",
    "canceled": "the batch was cancelled before this request ran",
}


class BatchingProvider(Protocol):
    """What Message Batches need of the provider whose calls they batch."""

    base_url: str

    def params_for(self, call: Call) -> dict[str, Any]:
        """Return the Messages API request for ``call``."""
        ...

    def generation_of(self, msg: Any) -> Generation:
        """Return the generation a Messages API answer holds."""
        ...

    def translate(self, exc: Exception) -> ProviderError:
        """Return the flownb error for an exception of the SDK."""
        ...


class AnthropicBatches:
    """The Message Batches API of one Anthropic endpoint. The key is held by the SDK client and
    shown nowhere.

    Raises:
        ConfigError: the installed ``anthropic`` SDK has no Message Batches.
    """

    def __init__(
        self,
        provider: BatchingProvider,
        api_key: str | None,
        headers: Mapping[str, str] | None = None,
        *,
        timeout: float = 120.0,
    ) -> None:
        from anthropic import Anthropic, DefaultHttpxClient

        self.provider = provider
        self.base_url = provider.base_url
        self.limits: Mapping[str, int] = BATCH_LIMITS
        extra = dict(headers or {})
        if api_key:
            extra.setdefault("x-api-key", api_key)
        # A placeholder key for local servers that need none (the SDK insists on one).
        self._client = Anthropic(
            api_key=api_key or "unused",
            base_url=self.base_url,
            max_retries=3,
            timeout=timeout,
            default_headers=extra or None,
            **no_sdk_spans(Anthropic),
            # A redirect to another origin is refused: the key stays with its own.
            http_client=DefaultHttpxClient(
                event_hooks=sync_httpx_hooks(), timeout=timeout, verify=tls_context()
            ),
        )
        if not hasattr(self._client.messages, "batches"):
            raise ConfigError(
                "Message Batches need a newer anthropic SDK: pip install -U 'flownb[anthropic]'"
            )

    def __repr__(self) -> str:  # never the key
        return f"<AnthropicBatches {self.base_url!r}>"

    @contextmanager
    def _translated(self) -> Iterator[None]:
        import anthropic

        try:
            yield
        except anthropic.AnthropicError as exc:
            raise self.provider.translate(exc) from exc

    def line(self, key: str, call: Call) -> tuple[str, str, bytes]:
        """Return ``(endpoint, model, request)``: one batch request, ``{"custom_id", "params"}``,
        serialized.

        Raises:
            ConfigError: the node's params are refused.
        """
        params = self.provider.params_for(call)
        return ENDPOINT, str(params["model"]), orjson.dumps({"custom_id": key, "params": params})

    def lines(self, calls: Iterable[tuple[str, Call]]) -> Iterator[tuple[str, str, bytes]]:
        """Yield what :meth:`line` returns for each ``(key, call)``, in order.

        Raises:
            ConfigError: a node's params are refused.
        """
        for key, call in calls:
            yield self.line(key, call)

    def submit(
        self, lines: Sequence[bytes], endpoint: str, metadata: Mapping[str, str]
    ) -> BatchState:
        """Create a batch of ``lines`` (Anthropic keeps no ``metadata``: it is not sent).

        Raises:
            ProviderError: the API refused the batch or could not be reached.
        """
        requests = [orjson.loads(line) for line in lines]
        with self._translated():
            return self._state(
                self._client.messages.batches.create(requests=requests), len(requests)
            )

    def status(self, batch_id: str) -> BatchState:
        """Return the batch's current state.

        Raises:
            ProviderError: the API cannot be reached or does not know the batch.
        """
        with self._translated():
            return self._state(self._client.messages.batches.retrieve(batch_id))

    def cancel(self, batch_id: str) -> BatchState:
        """Ask the API to cancel the batch; returns its state (``cancelling`` at first)."""
        with self._translated():
            return self._state(self._client.messages.batches.cancel(batch_id))

    def results(
        self, state: BatchState, endpoint: str, model: str
    ) -> Iterator[tuple[str, Generation | str]]:
        """Yield every request of an ended batch: ``(custom_id, generation)`` when it
        succeeded, ``(custom_id, why)`` when it errored, expired or was cancelled.

        Raises:
            ProviderError: the results cannot be read.
        """
        with self._translated():
            for item in self._client.messages.batches.results(state.id):
                result = item.result
                if result.type == "succeeded":
                    yield item.custom_id, self.provider.generation_of(result.message)
                elif result.type == "errored":
                    error = getattr(result.error, "error", None)
                    kind = getattr(error, "type", "error")
                    yield item.custom_id, f"{kind}: {getattr(error, 'message', 'no reason given')}"
                else:
                    yield item.custom_id, _NOT_RUN.get(result.type, f"{result.type}")

    def find(self, digest: str, since: float, total: int) -> list[BatchState]:
        """Return the batches created at or after ``since`` (a minute's clock skew allowed)
        holding ``total`` requests, newest first (Anthropic keeps no digest to match).

        Raises:
            ProviderError: the API cannot be reached.
        """
        found = []
        with self._translated():
            for batch in self._client.messages.batches.list(limit=100):  # newest first
                if batch.created_at.timestamp() < since - 60:
                    break
                state = self._state(batch)
                if state.total == total:
                    found.append(state)
        return found

    @staticmethod
    def _state(batch: Any, requests: int | None = None) -> BatchState:
        """Return the state of an Anthropic batch object. A reply missing its request counts
        (or some of them) counts them as 0, and ``requests`` (the number just submitted) stands
        for the total: the batch was made and must be remembered, not lost to a TypeError.

        Raises:
            ProviderError: the reply has no batch id (nothing to remember or ask about).
        """
        batch_id = getattr(batch, "id", None)
        if not isinstance(batch_id, str) or not batch_id:
            raise ProviderError("Anthropic answered a batch request without a batch id")
        counts = getattr(batch, "request_counts", None)
        succeeded, errored, expired, canceled, processing = (
            _count(counts, name)
            for name in ("succeeded", "errored", "expired", "canceled", "processing")
        )
        total = succeeded + errored + expired + canceled + processing
        if requests is not None and total == 0:
            total = requests
        processing_status = getattr(batch, "processing_status", None)
        if processing_status == "ended":
            if getattr(batch, "cancel_initiated_at", None) is not None:
                status = "cancelled"
            elif expired:
                status = "expired"
            else:
                status = "completed"
        elif processing_status == "canceling":
            status = "cancelling"
        else:
            status = "in_progress"
        return BatchState(
            batch_id,
            status,
            total=total,
            completed=succeeded,
            failed=errored + expired + canceled,
        )


def _count(counts: Any, name: str) -> int:
    """Return one request count of a batch reply (0 when missing or not a whole number)."""
    value = getattr(counts, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
