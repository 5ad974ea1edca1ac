"""Model providers: the offline one (the default) and OpenAI-compatible servers."""

from __future__ import annotations

from .base import Call, Generation, Provider
from .registry import make_provider

__all__ = ["Call", "Generation", "Provider", "make_provider"]
