"""What an image generation costs where the token price table has no price: one small table of
the vendors' published per-image list prices, by model, quality and size.

OpenAI bills ``dall-e-2`` and ``dall-e-3`` per image, not per token, so ``genai-prices`` (a
token table) has no entry for them; ``gpt-image-1`` is billed by tokens, which its answers
report, and this table prices it only when an answer reports no usage (a compatible server).
Azure OpenAI lists the same per-image prices for the same models.

Source: OpenAI's API pricing page, "Image generation" (:data:`SOURCE`), as listed on
:data:`AS_OF`. A price is for one image; a request for ``n`` images costs ``n`` times it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["AS_OF", "DEFAULTS", "IMAGE_PRICES", "SOURCE", "image_price"]

SOURCE = "https://platform.openai.com/docs/pricing#image-generation"
AS_OF = "2025-10-01"

# model -> (quality, size) -> US dollars per image.
IMAGE_PRICES: Mapping[str, Mapping[tuple[str, str], float]] = MappingProxyType(
    {
        "dall-e-3": MappingProxyType(
            {
                ("standard", "1024x1024"): 0.040,
                ("standard", "1024x1792"): 0.080,
                ("standard", "1792x1024"): 0.080,
                ("hd", "1024x1024"): 0.080,
                ("hd", "1024x1792"): 0.120,
                ("hd", "1792x1024"): 0.120,
            }
        ),
        "dall-e-2": MappingProxyType(
            {
                ("standard", "256x256"): 0.016,
                ("standard", "512x512"): 0.018,
                ("standard", "1024x1024"): 0.020,
            }
        ),
        "gpt-image-1": MappingProxyType(
            {
                ("low", "1024x1024"): 0.011,
                ("low", "1024x1536"): 0.016,
                ("low", "1536x1024"): 0.016,
                ("medium", "1024x1024"): 0.042,
                ("medium", "1024x1536"): 0.063,
                ("medium", "1536x1024"): 0.063,
                ("high", "1024x1024"): 0.167,
                ("high", "1024x1536"): 0.250,
                ("high", "1536x1024"): 0.250,
            }
        ),
    }
)

# What the API does when a request leaves quality or size out. gpt-image-1's default is
# "auto" (the API chooses, and the price with it): unknown here, not guessed.
DEFAULTS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "dall-e-3": ("standard", "1024x1024"),
        "dall-e-2": ("standard", "1024x1024"),
    }
)


def image_price(model: str | None, params: Mapping[str, Any]) -> float:
    """Return the US dollars one images request costs at list price: the per-image price of
    ``model`` at the request's ``quality`` and ``size`` (the API's defaults where it leaves them
    out; dall-e-3's ``hd`` and ``standard``, gpt-image-1's ``low``/``medium``/``high``) times
    its ``n``. NaN when the table has no such model, quality or size (``auto`` included)."""
    prices = IMAGE_PRICES.get(model or "")
    if prices is None:
        return math.nan
    quality, size = DEFAULTS.get(model or "", ("", ""))
    quality = str(params.get("quality") or quality).lower()
    size = str(params.get("size") or size).lower()
    per_image = prices.get((quality, size))
    if per_image is None:
        return math.nan
    try:
        n = int(params.get("n") or 1)
    except (TypeError, ValueError):
        return math.nan
    return per_image * max(n, 1)
