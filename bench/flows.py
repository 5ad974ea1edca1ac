"""The two-node flow every benchmark runs: two independent text nodes over two variables."""

from __future__ import annotations

from typing import Any

PROMPTS = {
    "intro": "Write a {tone} two-sentence intro for a blog post about {topic}.",
    "title": "Suggest a {tone} title for a post about {topic}.",
}


def two_node_flow(model_params: dict[str, Any] | None = None) -> dict:
    """Return an exported flow: variables topic and tone, one text node per prompt in
    :data:`PROMPTS` (with ``model_params``), each feeding an output named like it."""
    params = model_params or {"model": "m"}
    nodes: list[dict] = [
        {"id": f"v-{v}", "type": "variableNode", "data": {"variable": {"label": v, "value": ""}}}
        for v in ("topic", "tone")
    ]
    edges: list[dict] = []
    for name, prompt in PROMPTS.items():
        nodes.append(
            {
                "id": f"a-{name}",
                "type": "actionNode",
                "data": {"name": name, "prompt": prompt, "modelParams": params},
            }
        )
        nodes.append({"id": f"o-{name}", "type": "outputNode", "data": {"name": name}})
        edges += [
            {"id": f"{v}-{name}", "source": f"v-{v}", "target": f"a-{name}"}
            for v in ("topic", "tone")
        ]
        edges.append({"id": f"{name}-out", "source": f"a-{name}", "target": f"o-{name}"})
    return {"nodes": nodes, "edges": edges}
