"""How results look: plain text for terminals, Markdown with inline images for notebooks."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    from .result import RunResult

__all__ = ["image_src", "result_bundle", "result_text"]


def result_text(result: RunResult) -> str:
    """Return a terminal-readable rendering: each output under its name."""
    blocks = []
    for name, value in result.items:
        shown = f"[image] {value}" if result.is_image(name) else value
        blocks.append(f"── {name} " + "─" * max(3, 40 - len(name)) + f"\n{shown}")
    return "\n\n".join(blocks) if blocks else "(no outputs)"


def image_src(url: str) -> str:
    """Return a ``src`` a browser can load: ``file://`` images are inlined as data URLs (a
    notebook page cannot read the kernel's disk); http and data URLs pass through."""
    parsed = urlparse(url)
    if parsed.scheme != "file":
        return url
    path = Path(unquote(parsed.path))
    try:
        data = path.read_bytes()
    except OSError:
        return url
    mime = {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp"}.get(
        path.suffix.lower(), "image/png"
    )
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def result_bundle(result: RunResult) -> dict[str, str]:
    """Return the MIME bundle of a result: Markdown (text as Markdown, images inline) and text."""
    parts = []
    for name, value in result.items:
        badge = " *(cached)*" if name in result.cached else ""
        if result.is_image(name):
            body = f'<img src="{html.escape(image_src(value), quote=True)}" alt="{html.escape(name)}" style="max-width:320px"/>'
        else:
            body = value if value.strip() else "*(empty)*"
        parts.append(f"#### {name}{badge}\n\n{body}")
    return {
        "text/plain": result_text(result),
        "text/markdown": "\n\n".join(parts) if parts else "*(no outputs)*",
    }
