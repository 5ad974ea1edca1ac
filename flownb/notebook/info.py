"""What ``%flow info`` shows: a flow's variables (with defaults) and outputs, as escaped HTML in
a notebook (a default is data, shown as written) and as text elsewhere."""

from __future__ import annotations

from dataclasses import dataclass

from ..flows.base import BaseFlow
from ..show.escape import html_text, no_math, term_text

__all__ = ["FlowInfo"]


@dataclass
class FlowInfo:
    """What ``%flow info`` shows: a flow's variables (with defaults) and outputs."""

    flow: BaseFlow
    source: str

    def _repr_html_(self) -> str:
        # HTML, each name and default escaped: a default is data, shown as written.
        def cell(text: str) -> str:
            text = text.replace("\n", " ")
            return html_text(text if len(text) <= 80 else text[:77] + "...")

        defaults = self.flow.defaults
        rows = "".join(
            f"<tr><td><code>{cell(v)}</code></td><td>{cell(defaults.get(v, ''))}</td></tr>"
            for v in self.flow.variables
        )
        table = (
            "<table><thead><tr><th>variable</th><th>default</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
            if rows
            else "<p><em>(none)</em></p>"
        )
        outs = ", ".join(f"<code>{html_text(o)}</code>" for o in self.flow.outputs)
        return no_math(
            f"<p><b>Flow <code>{html_text(self.flow.name)}</code></b> ({html_text(self.source)})"
            f"</p>{table}<p><b>Outputs:</b> {outs or '<em>(none)</em>'}</p>",
            css="flownb-info",
        )

    def __repr__(self) -> str:
        defaults = self.flow.defaults
        lines = [f"flow: {self.flow.name} ({self.source})", "variables:"]
        for v in self.flow.variables:
            d = defaults.get(v, "")
            lines.append(f"  - {v}" + (f"  (default: {d!r})" if d else ""))
        lines.append("outputs:")
        lines += [f"  - {o}" for o in self.flow.outputs]
        return term_text("\n".join(lines))
