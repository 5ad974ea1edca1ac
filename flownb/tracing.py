"""OpenTelemetry spans for flow runs and provider calls, following the GenAI semantic
conventions (``gen_ai.*`` attributes), for Phoenix, Langfuse, Jaeger or any OTLP collector.

Nothing here sends anything: spans go to the tracer provider the user configured
(``opentelemetry.trace.set_tracer_provider``, or ``opentelemetry-instrument``). With no
provider configured, or without ``opentelemetry-api`` installed (``pip install flownb[otel]``),
every function returns ``None`` and the callers take their untraced path: the package is
imported only when tracing is first looked for, never when flownb is imported.

A flow run is an ``invoke_workflow`` span (``gen_ai.workflow.name``); each provider call under
it a ``chat`` span (``generate_content`` for an image) with the request and response model,
the token usage, and ``flownb.cache_hit`` (answered from the cache: no provider call made);
a failure sets the span's status, ``error.type`` and ``flownb.error``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

__all__ = ["call_span", "end_call", "flow_span", "traced", "tracer"]


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


C = TypeVar("C", bound=Call)
G = TypeVar("G", bound=Generation)

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


def tracer() -> Any:
    """Return flownb's tracer when a tracer provider is configured, else ``None``.

    Called once per run and per batch of calls, so kept cheap (about a microsecond).
    """
    global _cached
    if _api is _UNSET:
        _trace_api()
    if _api is None:
        return None
    provider = _get_provider()
    if type(provider) in _unconfigured:
        return None  # nothing configured: spans would go nowhere
    if _cached[0] is not provider:
        _cached = (provider, provider.get_tracer(_TRACER_NAME))
    return _cached[1]


def _operation(kind: str) -> str:
    return "generate_content" if kind == "image" else "chat"


def _failed(span: Any, exc: BaseException) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", type(exc).__name__)
    span.set_attribute("flownb.error", str(exc).splitlines()[0][:500] if str(exc) else "")
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))


@contextmanager
def flow_span(flow: str, provider: str, rows: int) -> Iterator[None]:
    """Trace a flow run of ``rows`` batch elements as an ``invoke_workflow`` span (current while
    the run's calls are made, so their spans are its children); a no-op without tracing."""
    t = tracer()
    if t is None:
        yield
        return
    from opentelemetry.trace import SpanKind

    attributes = {
        "gen_ai.operation.name": "invoke_workflow",
        "gen_ai.workflow.name": flow,
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,
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
        try:
            yield
        except BaseException as exc:
            _failed(span, exc)
            raise


def call_span(provider: str, call: Call) -> Any:
    """Start the span of one provider call (not made current: calls run concurrently), or
    return ``None`` without tracing. End it with :func:`end_call`."""
    t = tracer()
    if t is None:
        return None
    from opentelemetry.trace import SpanKind

    operation = _operation(call.kind)
    model = call.params.get("model") if call.params else None
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,
        "gen_ai.output.type": "image" if call.kind == "image" else "text",
    }
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
    token usage, the cache hit, the cost when known, or the error."""
    if span is None:
        return
    if gen is not None:
        span.set_attribute("flownb.cache_hit", bool(gen.cached))
        if gen.model:
            span.set_attribute("gen_ai.response.model", gen.model)
            if "gen_ai.request.model" not in getattr(span, "attributes", {}):
                # No model in the node's params: the provider's default answered, by this name.
                span.set_attribute("gen_ai.request.model", gen.model)
        usage = gen.usage or {}
        if not gen.cached:  # a cached answer used no tokens this time
            if usage.get("prompt_tokens") is not None:
                span.set_attribute("gen_ai.usage.input_tokens", int(usage["prompt_tokens"]))
            if usage.get("completion_tokens") is not None:
                span.set_attribute("gen_ai.usage.output_tokens", int(usage["completion_tokens"]))
        cost = getattr(gen, "cost", None)  # set by providers that price their answers
        if cost is not None:
            span.set_attribute("flownb.cost_usd", float(cost))
    if exc is not None:
        _failed(span, exc)
    span.end()


def traced(provider: str, generate: Callable[[C], G]) -> Callable[[C], G]:
    """Return ``generate`` (a synchronous provider call) tracing each call when a tracer is
    configured, else ``generate`` itself (chosen once per batch: no cost per call when off)."""
    if tracer() is None:
        return generate

    def call(c: C) -> G:
        span = call_span(provider, c)
        try:
            gen = generate(c)
        except BaseException as exc:
            end_call(span, None, exc)
            raise
        end_call(span, gen)
        return gen

    return call
