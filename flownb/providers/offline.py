"""The offline provider: no key, no network, deterministic.

Text output is the rendered prompt, verbatim. Image output is a PNG drawn with Pillow from the
prompt (same prompt, same bytes), written to the media store under a name derived from the
prompt with the store's secret (:meth:`~flownb.infra.media.MediaStore.name_for`), so a repeated
prompt
costs a file-existence check, not a drawing, and outsiders cannot derive the name.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import re
import textwrap
from collections.abc import AsyncIterator
from typing import ClassVar

from ..config.settings import RunConfig
from ..infra.media import MediaStore
from .base import Call, Generation, Provider

__all__ = ["OfflineProvider", "draw_image"]

SIZE = 256
_VERSION = b"flownb-offline-image-v1\0"
# A word and the whitespace after it (leading whitespace is a piece of its own).
_WORDS = re.compile(r"\s+|\S+\s*")


def draw_image(prompt: str) -> bytes:
    """Return PNG bytes drawn deterministically from ``prompt``: a gradient in colours taken from
    the prompt's digest, with the prompt's words written on it."""
    # Pillow only here: a text-only run (the common offline one) never pays its import.
    from PIL import Image, ImageDraw, ImageFont

    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    top = tuple(digest[0:3])
    bottom = tuple(digest[3:6])
    img = Image.new("RGB", (SIZE, SIZE))
    draw = ImageDraw.Draw(img)
    for y in range(SIZE):
        t = y / (SIZE - 1)
        colour = tuple(round(a + (b - a) * t) for a, b in zip(top, bottom, strict=True))
        draw.line([(0, y), (SIZE, y)], fill=colour)
    # A few discs placed by the digest, so different prompts look different at a glance.
    for i in range(4):
        x, y, r = digest[6 + 3 * i], digest[7 + 3 * i], 12 + digest[8 + 3 * i] % 40
        fill = tuple(digest[18 + i : 21 + i])
        draw.ellipse([x - r, y - r, x + r, y + r], fill=fill, outline=(255, 255, 255))
    font = ImageFont.load_default(size=12)
    lines = textwrap.wrap(prompt, width=38)[:12] or [""]
    box_h = 14 * len(lines) + 10
    draw.rectangle([6, SIZE - box_h - 6, SIZE - 6, SIZE - 6], fill=(0, 0, 0))
    for i, line in enumerate(lines):
        draw.text((12, SIZE - box_h + 14 * i - 1), line, fill=(255, 255, 255), font=font)
    out = io.BytesIO()
    img.save(out, format="PNG", optimize=False)
    return out.getvalue()


class OfflineProvider(Provider):
    """Text = the rendered prompt; image = a deterministic PNG in the media store."""

    name: ClassVar[str] = "offline"
    inline: ClassVar[bool] = True
    cacheable: ClassVar[bool] = False
    supports_images: ClassVar[bool] = True

    def __init__(self, media: MediaStore) -> None:
        self.media = media

    @classmethod
    def create(cls, config: RunConfig, media: MediaStore) -> OfflineProvider:
        """Return the offline provider writing its images to ``media``."""
        return cls(media)

    def generate_inline(self, call: Call) -> Generation:
        """Return the generation at once: the prompt itself, or the image drawn from it."""
        if call.kind == "text":
            return Generation(call.prompt, None, "offline")  # positional: the per-row hot path
        name = self.media.name_for(_VERSION + call.prompt.encode("utf-8"), "png")
        if not self.media.exists(name):
            self.media.save(name, draw_image(call.prompt))
        return Generation("", media=name, model="offline")

    def texts_inline(self, call: Call, prompts: list[str]) -> tuple[list[str], str | None] | None:
        """Return ``prompts`` themselves for a text call (what :meth:`generate_inline` answers
        each), so a whole frame is answered without a call per row; ``None`` for images."""
        if call.kind != "text" or type(self).generate_inline is not OfflineProvider.generate_inline:
            return None  # a subclass that answers otherwise is asked call by call
        return prompts, "offline"

    async def generate(self, call: Call) -> Generation:
        """Return the same as :meth:`generate_inline` (the async seam the engine also uses)."""
        return self.generate_inline(call)

    async def stream(self, call: Call) -> AsyncIterator[str | Generation]:
        """Yield the text word by word (each word with the spaces after it), then the
        generation, as a streaming model would; an image call yields only its generation."""
        gen = self.generate_inline(call)
        if call.kind == "text":
            for word in _WORDS.findall(gen.output):
                yield word
                await asyncio.sleep(0)  # a turn for the consumer between words, as a network gives
        yield gen

    def banner(self) -> str:
        """Return the line that says outputs are offline stand-ins, not model generations."""
        return (
            "provider: offline (no key, no network): text outputs are the rendered prompts, "
            "images are placeholders drawn from the prompt. Use --provider openai for real models."
        )
