"""A URL's origin (scheme, host, port): what a key, an endpoint's headers and the images an
endpoint answers with are bound to."""

from __future__ import annotations

import urllib.parse

__all__ = ["Origin", "origin", "shown"]

Origin = tuple[str, str, int | None]
_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> Origin:
    """Return the origin of ``url``: scheme, host (lower case, no trailing dot) and port (the
    scheme's default when none is written; None for a port that is not a number)."""
    parts = urllib.parse.urlsplit(url.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower().rstrip("."), port or _PORTS.get(scheme)


def shown(url: str) -> str:
    """Return ``scheme://host[:port]`` of ``url``: what a message may name (no user, password,
    path or query, where tokens could hide)."""
    scheme, host, port = origin(url)
    where = f"[{host}]" if ":" in host else host
    return f"{scheme}://{where}" + (f":{port}" if port and port != _PORTS.get(scheme) else "")
