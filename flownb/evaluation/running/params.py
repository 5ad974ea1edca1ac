"""What an evaluation knows of each variant's set-up, for trackers: the provider, the model(s),
each generation node's prompt and model parameters (``prompt.<node>``, ``<node>.<param>``)."""

from __future__ import annotations

import urllib.parse

from ...core.flow import FlowCore
from ...core.local import local_of
from ...flowfile.model import ActionNode, ImageNode

__all__ = ["variant_params"]


def _endpoint(url: object) -> str | None:
    """Return ``url`` without any user name, password, query or fragment (never a secret)."""
    if not isinstance(url, str) or not url:
        return None
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def variant_params(flow: FlowCore) -> dict[str, str]:
    """Return ``flow``'s set-up as text parameters: ``flow``, ``provider``, ``endpoint`` (when the
    provider has one), ``model`` (the models its nodes name, comma-separated), and per
    generation node ``prompt.<node>`` and ``<node>.<param>``. A remote flow gives its name."""
    found: dict[str, str] = {"flow": flow.name}
    local = local_of(flow)
    if local is None:
        found["remote"] = "true"
        return found
    found["provider"] = local.provider.name
    endpoint = _endpoint(getattr(local.provider, "base_url", None))
    if endpoint:
        found["endpoint"] = endpoint
    models: set[str] = set()
    for node in local.graph.nodes:
        if isinstance(node, ActionNode | ImageNode):
            label = node.data.name or node.id
            found[f"prompt.{label}"] = node.data.prompt
            for key, value in node.data.modelParams.as_dict().items():
                found[f"{label}.{key}"] = str(value)
                if key == "model":
                    models.add(str(value))
    if models:
        found["model"] = ",".join(sorted(models))
    return found
