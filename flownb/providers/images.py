"""Images a text call shows the model (a judge grading an image output): marked in the prompt,
sent as each vendor's image part.

A prompt carries an image as a reference, ``[[flownb-image:TARGET]]``, where ``TARGET`` is the
name of a file in the media store (what a judge writes, named by an HMAC of the image's bytes,
so the prompt, and so the cache key, changes with the image and the run log holds a short line,
not the image) or an ``http(s)`` URL the kernel cannot read (sent to the vendor as a URL). A
provider that reads images (``Provider.supports_vision``) splits such a prompt with
:func:`prompt_parts` and sends the text and images in its own message format; the reference
never reaches the model as text. Nothing else in a prompt is read: never a local path.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..infra.media import MediaStore

__all__ = [
    "IMAGE_REF",
    "ImagePart",
    "has_images",
    "image_ref",
    "image_tokens",
    "prompt_parts",
    "text_only_model",
]

# Only a media name or an http(s) URL makes a reference: other text stays text.
IMAGE_REF = re.compile(
    r"\[\[flownb-image:(https?://[^\]\s]+|[0-9a-f]{32,64}\.(?:png|jpg|jpeg|webp|gif))\]\]"
)
_OPEN = "[[flownb-image:"
_MIME = {"png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif"}
_MIME["webp"] = "image/webp"

# Models known to read no images: a vision judge on one is refused before any call. Unknown
# models are tried; a vendor's refusal is then the judge call's error, row by row.
_TEXT_ONLY = re.compile(
    r"^(gpt-3\.5|gpt-4(-\d{4})?(-32k)?$|gpt-4-(0314|0613)|o1-mini|o3-mini|text-|davinci|"
    r"babbage|claude-2|claude-instant|gemini-1\.0-pro$|gemini-pro$)"
)


# What one image is estimated to cost as input, in tokens (before the usage says): about what
# the vendors charge for a 1024x1024 image (OpenAI ~765 at high detail, Anthropic ~1,400,
# Gemini 258 per tile).
IMAGE_TOKENS = 1_000


@dataclass(frozen=True)
class ImagePart:
    """One image of a prompt: its bytes (``None`` when it goes as ``url``) and MIME type."""

    data: bytes | None
    mime: str
    url: str | None = None

    def b64(self) -> str:
        """Return the bytes in base64 (empty when the image goes as a URL)."""
        return base64.b64encode(self.data or b"").decode("ascii")

    def data_url(self) -> str:
        """Return a ``data:`` URL of the bytes, or the http(s) URL when there are none."""
        if self.data is None:
            return self.url or ""
        return f"data:{self.mime};base64,{self.b64()}"


def image_ref(target: str) -> str:
    """Return the prompt line that shows the model ``target`` (a media name or http(s) URL).

    Raises:
        ConfigError: ``target`` is neither.
    """
    from ..infra.media import MEDIA_NAME

    if not (MEDIA_NAME.fullmatch(target) or target.startswith(("http://", "https://"))):
        raise ConfigError(f"an image is shown by media name or http(s) URL, not {target!r}")
    if any(c.isspace() or c == "]" for c in target):
        raise ConfigError(f"an image URL with spaces or ']' cannot be shown: {target!r}")
    return f"{_OPEN}{target}]]"


def has_images(prompt: str) -> bool:
    """Return whether ``prompt`` carries an image reference."""
    return _OPEN in prompt and IMAGE_REF.search(prompt) is not None


def image_tokens(prompt: str) -> int:
    """Return the tokens the images of ``prompt`` are estimated to cost (0 without images)."""
    if _OPEN not in prompt:  # the common case, on every call's path: one substring search
        return 0
    return IMAGE_TOKENS * len(IMAGE_REF.findall(prompt))


def _mime_of(target: str) -> str:
    ext = target.rsplit("?", 1)[0].rsplit(".", 1)[-1].lower()
    return _MIME.get(ext, "image/png")


def prompt_parts(prompt: str, media: MediaStore | None) -> list[str | ImagePart]:
    """Return ``prompt`` as its text and images, in order (empty text between two images left
    out): a media name is read from ``media``, an http(s) URL kept as a URL.

    Raises:
        ConfigError: a media name whose file is not in ``media`` (or there is no media store).
    """
    from ..infra.media import MEDIA_NAME

    parts: list[str | ImagePart] = []
    at = 0
    for match in IMAGE_REF.finditer(prompt):
        text = prompt[at : match.start()]
        if text.strip():
            parts.append(text)
        target = match.group(1)
        if target.startswith(("http://", "https://")):
            parts.append(ImagePart(None, _mime_of(target), target))
        elif MEDIA_NAME.fullmatch(target) and media is not None and media.exists(target):
            parts.append(ImagePart(media.path_for(target).read_bytes(), _mime_of(target)))
        else:
            raise ConfigError(f"the image {target!r} the prompt shows is not in the media store")
        at = match.end()
    rest = prompt[at:]
    if rest.strip() or not parts:
        parts.append(rest)
    return parts


def text_only_model(model: str | None) -> bool:
    """Return whether ``model`` is known to read no images (older OpenAI, Claude 2, Gemini 1.0
    text models); ``False`` for models not known either way."""
    return bool(model) and _TEXT_ONLY.match(str(model)) is not None
