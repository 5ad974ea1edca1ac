"""Who judges: the flow a judge's (or ``pick_best``'s) calls go through, and what the report says
about it.

A judge runs on, in order of precedence:

1. its own ``endpoint=`` (a :class:`~flownb.Endpoint`, or the name of one in ``flownb.toml``) or
   ``provider=`` (a provider name or instance; an ``Endpoint`` or an endpoint's name given as
   ``provider=`` is taken as the endpoint), with its ``model=`` or else that provider's
   default model;
2. else the provider of the flow it grades (the first variant giving its output) and, without
   ``model=``, that flow's text model;
3. else ``FLOWNB_PROVIDER``'s.

:func:`judge_info` says who that is (endpoint, model sent, vendor) and which graded variants
come from the same vendor: a model tends to prefer its own vendor's answers (self-preference
bias), which reports say, not forbid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config.endpoints import Endpoint
from ..core.flow import FlowCore
from ..core.local import LocalCore, load_local, local_of
from ..errors import ConfigError
from ..flowfile.model import parse_flow
from ..providers.registry import provider_names
from ..providers.vendor import vendor_of

if TYPE_CHECKING:
    from ..providers.base import Provider

__all__ = [
    "JudgeSetup",
    "judge_info",
    "judge_source",
    "judged_by_line",
    "self_preference",
    "variant_vendor",
]


def judge_source(model: str | None) -> dict[str, Any]:
    """Return the one-node flow a judge's calls run through: ``{q}`` in, the answer out."""
    params: dict[str, Any] = {"temperature": 0}
    if model:
        params["model"] = model
    return {
        "nodes": [
            {"id": "v", "type": "variableNode", "data": {"variable": {"label": "q"}}},
            {
                "id": "judge",
                "type": "actionNode",
                "data": {"name": "judge", "prompt": "{q}", "modelParams": params},
            },
            {"id": "o", "type": "outputNode", "data": {"name": "answer"}},
        ],
        "edges": [{"source": "v", "target": "judge"}, {"source": "judge", "target": "o"}],
    }


def _text_model(flow: LocalCore) -> str | None:
    """Return the model the first text node of ``flow`` names, if any."""
    for step in flow.plan.steps:
        model = step.params.get("model")
        if step.kind == "text" and isinstance(model, str) and model:
            return model
    return None


def _split(
    provider: Provider | Endpoint | str | None, endpoint: Endpoint | str | None
) -> tuple[Provider | str | None, Endpoint | str | None]:
    """Return ``(provider, endpoint)`` as a judge was given them: an :class:`Endpoint`, or a
    name that is no provider's, passed as ``provider=`` is the endpoint.

    Raises:
        ConfigError: both a provider and an endpoint, or a bad type.
    """
    if isinstance(provider, Endpoint) or (
        isinstance(provider, str) and provider.strip().lower() not in provider_names()
    ):
        if endpoint is not None:
            raise ConfigError(
                f"judge: endpoint={_name(endpoint)!r} and provider={_name(provider)!r} both say "
                "where its calls go; give one"
            )
        return None, provider
    if endpoint is not None and not isinstance(endpoint, Endpoint | str):
        raise ConfigError(
            f"judge: endpoint= takes a flownb.Endpoint or the name of one in flownb.toml, not "
            f"{type(endpoint).__name__}"
        )
    if endpoint is not None and provider is not None:
        raise ConfigError(
            f"judge: endpoint={_name(endpoint)!r} and provider={_name(provider)!r} both say "
            "where its calls go; give one (an endpoint names its provider kind)"
        )
    return provider, endpoint


def _name(value: Any) -> str:
    return str(getattr(value, "name", value))


@dataclass
class JudgeSetup:
    """Where a judge's calls go (see the module docstring) and the flows built for them."""

    model: str | None
    # As given; after set-up a provider name or instance, and an endpoint apart (see _split).
    provider: Provider | Endpoint | str | None
    endpoint: Endpoint | str | None = None
    # (purpose, id of the provider borrowed or 0) -> (that provider, the flow built for it)
    flows: dict[tuple[str, int], tuple[Any, LocalCore]] = field(default_factory=dict)
    graded: LocalCore | None = None

    def __post_init__(self) -> None:
        self.provider, self.endpoint = _split(self.provider, self.endpoint)

    @property
    def own(self) -> bool:
        """Whether the judge names its own provider or endpoint (it borrows nothing)."""
        return self.provider is not None or self.endpoint is not None

    def flow(self, purpose: str) -> LocalCore:
        """Return the one-node flow judge calls run through (built once per provider): the
        engine's cache, limits, retries and run log apply to them as to any call.

        Raises:
            ConfigError: the judge's provider or endpoint cannot be set up (an unknown name:
                the message lists the providers and the endpoints declared).
        """
        graded = self.graded if not self.own else None
        key = (purpose, id(graded.provider) if graded is not None else 0)
        held = self.flows.get(key)
        if held is not None and (graded is None or held[0] is graded.provider):
            return held[1]
        if graded is not None:
            source = judge_source(self.model or _text_model(graded))
            # The graded flow's provider instance (its endpoint, key, connections) and its run
            # configuration (home: cache and run log), as its variants share them.
            flow = LocalCore(
                parse_flow(source, purpose),
                name=purpose,
                config=graded.config,
                provider=graded.provider,
                source=source,
            )
        else:
            flow = self._own_flow(purpose)
        self.flows[key] = (graded.provider if graded is not None else None, flow)
        return flow

    def _own_flow(self, purpose: str) -> LocalCore:
        source = judge_source(self.model)
        provider = None if isinstance(self.provider, Endpoint) else self.provider  # see _split
        try:
            return load_local(source, name=purpose, provider=provider, endpoint=self.endpoint)
        except ConfigError as exc:
            if isinstance(self.endpoint, str) and "no endpoint named" in str(exc):
                names = ", ".join(provider_names())
                raise ConfigError(
                    f"judge: {self.endpoint!r} is neither a provider ({names}) nor an endpoint: "
                    f"{exc}"
                ) from None
            raise


def variant_vendor(flow: FlowCore) -> str | None:
    """Return the vendor whose model a variant's first text node sends (``OpenAI``,
    ``Anthropic``, ``Google``, else its provider kind); None for a flow served elsewhere or run
    offline (no model answers it)."""
    local = local_of(flow)
    if local is None or local.provider.name == "offline":
        return None
    for step in local.plan.steps:
        if step.kind == "text":
            return vendor_of(local.provider, local.provider.priced_model("text", step.params))
    return None


def judge_info(flow: LocalCore) -> dict[str, str]:
    """Return who a judge's calls go to: ``endpoint`` (the endpoint's name, else the
    provider's), ``model`` (the model sent, defaults applied) and ``vendor``."""
    endpoint = flow.config.endpoint
    params = flow.plan.steps[0].params
    model = flow.provider.priced_model("text", params) or "the provider's default model"
    return {
        "endpoint": endpoint.name if endpoint is not None else flow.provider.name,
        "model": model,
        "vendor": vendor_of(flow.provider, model),
    }


def self_preference(vendor: str, vendors: Mapping[str, str | None]) -> list[str]:
    """Return the variants (of ``vendors``: variant -> its vendor) from the judge's ``vendor``."""
    return [v for v, found in vendors.items() if found is not None and found == vendor]


def judged_by_line(name: str, info: Mapping[str, Any], same: Sequence[str]) -> str:
    """Return one line naming a judge's endpoint and model, and the variants of its vendor."""
    line = f"judge {name!r}: endpoint {info['endpoint']}, model {info['model']}"
    if same:
        line += (
            f"; the same vendor ({info['vendor']}) as variant{'s' * (len(same) > 1)} "
            f"{', '.join(map(repr, same))}: a judge may favour its own vendor's answers "
            "(self-preference)"
        )
    return line
