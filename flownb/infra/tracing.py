"""OpenTelemetry spans for flow runs and provider calls, following the GenAI semantic
conventions (``gen_ai.*`` attributes), for Phoenix, Langfuse, Jaeger or any OTLP collector.

Nothing here sends anything: spans go to the tracer provider the user configured
(``opentelemetry.trace.set_tracer_provider``, or ``opentelemetry-instrument``). With no
provider configured, or without ``opentelemetry-api`` installed (``pip install flownb[otel]``),
every function returns ``None`` and the callers take their untraced path: the package is
imported only when tracing is first looked for, never when flownb is imported.

A flow run is an ``invoke_workflow`` span (``gen_ai.workflow.name``); each provider call under
it a ``chat`` span (``generate_content`` for an image) with the provider as the GenAI registry
names it (``openai``, ``azure.ai.openai``, ``anthropic``, ``gcp.gemini``), ``server.address`` and
``server.port`` of its endpoint, the request and response model, ``gen_ai.response.id``,
``gen_ai.response.finish_reasons``, the token usage, ``flownb.cache_hit`` (answered from the
cache: no provider call made) and ``flownb.cost_usd`` (US dollars the call spent, when known:
0 for a cache hit, whose ``flownb.saved_usd`` is what its answer cost when it was paid for).
A failure sets the span's status, ``error.type`` and ``flownb.error``; a run's span fails when
any of its elements did (``flownb.failed_rows``, and an exception event per failed element
naming its ``flownb.row``).

Usage is counted once: a span carries ``gen_ai.usage.*`` only for a call paid in this run (a
cache hit carries none), and the vendor SDKs' own spans, which would repeat the same tokens
under the same trace, are kept out of the calls flownb makes (the anthropic SDK's
``open_telemetry=False``; the SDK methods the vendors' OpenTelemetry instrumentations wrap,
such as ``opentelemetry-instrumentation-openai-v2``'s, are called unwrapped: see
:func:`flownb.providers.vendor.raw_uninstrumented`), so summing ``gen_ai.usage.*`` over a trace
gives the run log's tokens. A provider batch (``batch_api=True``) is one ``chat`` span when its
answers are collected (:func:`batch_span`): the batch's usage summed, ``flownb.batch_id`` and
``flownb.batch_answers``, from the batch's creation to its collection.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

__all__ = [
    "RunFailures",
    "batch_span",
    "call_span",
    "end_call",
    "flow_span",
    "genai_provider",
    "server_of",
    "traced",
    "tracer",
]

# flownb's provider names -> the OpenTelemetry GenAI registry's ``gen_ai.provider.name`` values.
_GENAI_PROVIDERS = {"azure": "azure.ai.openai", "gemini": "gcp.gemini"}


def genai_provider(name: str) -> str:
    """Return the ``gen_ai.provider.name`` of a flownb provider name (``gemini`` ->
    ``gcp.gemini``, ``azure`` -> ``azure.ai.openai``; others as they are)."""
    return _GENAI_PROVIDERS.get(name, name)


def server_of(base_url: Any) -> tuple[str, int] | None:
    """Return ``(server.address, server.port)`` of an endpoint's base URL (the scheme's port
    when the URL names none), or None when there is no URL."""
    from urllib.parse import urlsplit

    if not isinstance(base_url, str) or not base_url:
        return None
    parts = urlsplit(base_url)
    if not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    return parts.hostname, port or (80 if parts.scheme == "http" else 443)


# What a span reads of a provider call and its answer (flownb.providers.base's Call and
# Generation have these): protocols, so this module sits below the providers it traces.
class Call(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def params(self) -> Mapping[str, Any]: ...
    @property
    def node_id(self) -> str: ...


class Generation(Protocol):
    @property
    def cached(self) -> bool: ...
    @property
    def model(self) -> str | None: ...
    @property
    def usage(self) -> Mapping[str, int] | None: ...
    @property
    def finish_reason(self) -> str | None: ...


C = TypeVar("C", bound=Call)
G = TypeVar("G", bound=Generation)
R = TypeVar("R")

_TRACER_NAME = "flownb"
_UNSET: Any = object()
_api: Any = _UNSET  # the opentelemetry.trace module, None when not installed (looked up once)
_cached: tuple[Any, Any] = (None, None)  # (tracer provider, its flownb tracer)


def _trace_api() -> Any:
    global _api, _get_provider, _unconfigured
    if _api is _UNSET:
        trace: Any
        try:
            from opentelemetry import trace
        except ImportError:  # the otel extra is not installed: tracing stays off
            trace = None
        if trace is not None:
            _get_provider = trace.get_tracer_provider
            _unconfigured = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        _api = trace
    return _api


_get_provider: Any = None
_unconfigured: tuple[type, ...] = ()
# Whether OpenTelemetry has looked in the environment for a provider to load (see tracer()).
_environment_read = False


def tracer() -> Any:
    """Return flownb's tracer when a tracer provider is configured, else ``None``.

    Called once per run and per batch of calls (twice per request of ``flownb serve``), so kept
    cheap: a few attribute reads, no lookup in the environment.
    """
    global _cached, _environment_read
    if _api is _UNSET:
        # A tracer provider is configured through opentelemetry.trace (set_tracer_provider, or
        # opentelemetry-instrument, which imports it at start-up): while nothing has imported it,
        # none is configured, and a run need not pay the package's import to learn so.
        if "opentelemetry.trace" not in sys.modules:
            return None
        _trace_api()
    if _api is None:
        return None
    # While no provider is set, get_tracer_provider() looks in the environment for one to load
    # (OTEL_PYTHON_TRACER_PROVIDER) on every call: several microseconds, on every request of a
    # server. The API's global (None until set_tracer_provider, or that load, sets it; what
    # OpenTelemetry's own test utilities reset) answers the same once the environment was read
    # once. Without that global (another API version), ask the API each time, as before.
    provider = getattr(_api, "_TRACER_PROVIDER", _UNSET)
    if provider is None and _environment_read:
        return None
    if provider is None or provider is _UNSET:
        provider = _get_provider()
        _environment_read = _environment_read or hasattr(_api, "_TRACER_PROVIDER")
    if type(provider) in _unconfigured:
        return None  # nothing configured: spans would go nowhere
    if _cached[0] is not provider:
        _cached = (provider, provider.get_tracer(_TRACER_NAME))
    return _cached[1]


def _operation(kind: str) -> str:
    return "generate_content" if kind == "image" else "chat"


def _error(span: Any, error_type: str, exc: BaseException, description: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", error_type)
    span.set_attribute("flownb.error", str(exc).splitlines()[0][:500] if str(exc) else "")
    span.set_status(Status(StatusCode.ERROR, description))


def _failed(span: Any, exc: BaseException) -> None:
    span.record_exception(exc)
    _error(span, type(exc).__name__, exc, type(exc).__name__)


# Exception events recorded on a run's span, the first failed elements' (each formats its
# traceback; the SDK keeps 128 events a span anyway): flownb.failed_rows counts them all.
_FAILURE_EVENTS = 32


class RunFailures:
    """The elements of a traced run that failed, for its span.

    An element's error reaches the run through its ``on_result`` callback, not as an exception
    out of the run (and ``run`` raises it only after the span has ended), so the runner passes
    ``on_result`` through :meth:`watch`. An untraced run's ``watch`` returns ``on_result``
    itself: nothing is added per element when tracing is off.
    """

    __slots__ = ("_failed", "_lock", "_open", "active")

    def __init__(self, active: bool = True) -> None:
        self.active = active
        self._failed: dict[int, BaseException] = {}
        self._lock = threading.Lock()
        self._open = True

    def watch(
        self, on_result: Callable[[int, R, BaseException | None], None]
    ) -> Callable[[int, R, BaseException | None], None]:
        """Return ``on_result`` noting each failed element for the span (``on_result`` itself
        when the run is not traced)."""
        if not self.active:
            return on_result

        def report(i: int, result: R, exc: BaseException | None) -> None:
            if exc is not None:
                self._note(i, exc)
            on_result(i, result, exc)

        return report

    def note(self, i: int, result: object, exc: BaseException | None) -> None:
        """Note element ``i``'s failure for the span, if it failed (an observer of the run)."""
        if exc is not None:
            self._note(i, exc)

    def _note(self, i: int, exc: BaseException) -> None:
        # Reports come from the event loop's thread; one after the span ended (a run Ctrl-C
        # gave up waiting for) is not the span's to record.
        with self._lock:
            if self._open:
                self._failed[i] = exc

    def close(self) -> dict[int, BaseException]:
        """Stop noting failures; return the failed elements' errors by index."""
        with self._lock:
            self._open = False
            return self._failed


_UNTRACED = RunFailures(active=False)


def _elements_failed(span: Any, failed: Mapping[int, BaseException], rows: int) -> None:
    """Mark a run's span as failed when some of its ``rows`` elements failed: its status,
    ``error.type`` (the elements' error type; ``BatchError``, what a batch with failures
    raises, when they differ), ``flownb.failed_rows`` and an exception event per element."""
    if not failed:
        return
    indexes = sorted(failed)
    for i in indexes[:_FAILURE_EVENTS]:
        span.record_exception(failed[i], attributes={"flownb.row": i})
    types = {type(exc).__name__ for exc in failed.values()}
    error_type = types.pop() if len(types) == 1 else "BatchError"
    span.set_attribute("flownb.failed_rows", len(failed))
    description = error_type if rows == 1 else f"{len(failed)} of {rows} rows failed"
    _error(span, error_type, failed[indexes[0]], description)


@contextmanager
def flow_span(flow: str, provider: str, rows: int) -> Iterator[RunFailures]:
    """Trace a flow run of ``rows`` batch elements as an ``invoke_workflow`` span (current while
    the run's calls are made, so their spans are its children); a no-op without tracing.

    Yields:
        The run's :class:`RunFailures`: pass the run's ``on_result`` through its ``watch``, so
        the span fails when an element does (the run reports it rather than raising it).
    """
    t = tracer()
    if t is None:
        yield _UNTRACED
        return
    from opentelemetry.trace import SpanKind

    attributes = {
        "gen_ai.operation.name": "invoke_workflow",
        "gen_ai.workflow.name": flow,
        "gen_ai.provider.name": genai_provider(provider),
        "gen_ai.system": genai_provider(provider),
        "flownb.flow": flow,
        "flownb.rows": rows,
    }
    with t.start_as_current_span(
        f"invoke_workflow {flow}",
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        failures = RunFailures()
        try:
            yield failures
        except BaseException as exc:
            failed = failures.close()
            _elements_failed(span, failed, rows)
            if not any(exc is e for e in failed.values()):  # a streamed run raises its element's
                _failed(span, exc)  # what the run raised is the span's error
            raise
        _elements_failed(span, failures.close(), rows)


def call_span(provider: str, call: Call, server: tuple[str, int] | None = None) -> Any:
    """Start the span of one provider call (not made current: calls run concurrently), or
    return ``None`` without tracing. ``server`` is the endpoint's address and port (see
    :func:`server_of`). End it with :func:`end_call`."""
    t = tracer()
    if t is None:
        return None
    from opentelemetry.trace import SpanKind

    operation = _operation(call.kind)
    model = call.params.get("model") if call.params else None
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": genai_provider(provider),
        "gen_ai.system": genai_provider(provider),
        "gen_ai.output.type": "image" if call.kind == "image" else "text",
    }
    if server is not None:
        attributes["server.address"], attributes["server.port"] = server
    if model:
        attributes["gen_ai.request.model"] = str(model)
    for name in ("temperature", "max_tokens", "top_p"):
        value = call.params.get(name) if call.params else None
        if value is not None:
            attributes[f"gen_ai.request.{name}"] = value
    if call.node_id:
        attributes["flownb.node"] = call.node_id
    name = f"{operation} {model}" if model else operation
    return t.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)


def end_call(span: Any, gen: Generation | None, exc: BaseException | None = None) -> None:
    """End a span :func:`call_span` started, with what the call gave: the response model, the
    token usage, the cache hit, the cost when known (0 for a cache hit, whose saving is apart),
    or the error."""
    if span is None:
        return
    if gen is not None:
        span.set_attribute("flownb.cache_hit", bool(gen.cached))
        if gen.model:
            span.set_attribute("gen_ai.response.model", gen.model)
            if "gen_ai.request.model" not in getattr(span, "attributes", {}):
                # No model in the node's params: the provider's default answered, by this name.
                span.set_attribute("gen_ai.request.model", gen.model)
        if not gen.cached:  # a cached answer got no response this time
            response_id = getattr(gen, "response_id", None)
            if response_id:
                span.set_attribute("gen_ai.response.id", str(response_id))
            if gen.finish_reason:
                span.set_attribute("gen_ai.response.finish_reasons", [gen.finish_reason])
        usage = gen.usage or {}
        if not gen.cached:  # a cached answer used no tokens this time
            if usage.get("prompt_tokens") is not None:
                span.set_attribute("gen_ai.usage.input_tokens", int(usage["prompt_tokens"]))
            if usage.get("completion_tokens") is not None:
                span.set_attribute("gen_ai.usage.output_tokens", int(usage["completion_tokens"]))
        # Set by providers that price their answers; NaN: the price is unknown, so left off.
        cost = getattr(gen, "cost", None)
        if cost is not None and math.isnan(cost):
            cost = None
        if gen.cached:
            # A cache hit made no provider call: it spent nothing. Its generation keeps what the
            # answer cost when it was paid for, which is the saving (as RunResult.cache_saving
            # and the run log count it); as cost_usd, a sum over spans would count it twice.
            span.set_attribute("flownb.cost_usd", 0.0)
            if cost is not None:
                span.set_attribute("flownb.saved_usd", float(cost))
        elif cost is not None:
            span.set_attribute("flownb.cost_usd", float(cost))
    if exc is not None:
        _failed(span, exc)
    span.end()


def batch_span(
    provider: str,
    model: str | None,
    batch_id: str,
    answers: Iterable[Generation],
    created: float | None = None,
) -> None:
    """Record a provider batch whose answers were just collected as one ``chat`` span (a no-op
    without tracing): the usage summed over its ``answers`` (what the run log counts for them),
    their cost when known (``flownb.cost_usd``), ``flownb.batch_id`` and ``flownb.batch_answers``,
    from ``created`` (the batch's creation, seconds since the epoch) to now."""
    t = tracer()
    if t is None:
        return
    from opentelemetry.trace import SpanKind

    count = inp = out = 0
    costs: list[float] = []
    for gen in answers:
        count += 1
        usage = gen.usage or {}
        inp += int(usage.get("prompt_tokens", 0) or 0)
        out += int(usage.get("completion_tokens", 0) or 0)
        cost = getattr(gen, "cost", None)
        if cost is not None and not math.isnan(cost):
            costs.append(float(cost))
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": genai_provider(provider),
        "gen_ai.system": genai_provider(provider),
        "gen_ai.output.type": "text",
        "gen_ai.usage.input_tokens": inp,
        "gen_ai.usage.output_tokens": out,
        "flownb.batch_id": batch_id,
        "flownb.batch_answers": count,
    }
    if model:
        attributes["gen_ai.request.model"] = model
    if costs:
        attributes["flownb.cost_usd"] = sum(costs)
    start = int(created * 1e9) if created is not None else None
    name = f"chat {model}" if model else "chat"
    t.start_span(name, kind=SpanKind.CLIENT, attributes=attributes, start_time=start).end()


def traced(
    provider: str, generate: Callable[[C], G], server: tuple[str, int] | None = None
) -> Callable[[C], G]:
    """Return ``generate`` (a synchronous provider call) tracing each call when a tracer is
    configured, else ``generate`` itself (chosen once per batch: no cost per call when off)."""
    if tracer() is None:
        return generate

    def call(c: C) -> G:
        span = call_span(provider, c, server)
        try:
            gen = generate(c)
        except BaseException as exc:
            end_call(span, None, exc)
            raise
        end_call(span, gen)
        return gen

    return call
