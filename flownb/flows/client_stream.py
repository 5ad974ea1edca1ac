"""Reading the run route's event stream (the ``Accept: text/event-stream`` extension of
``flownb serve``; see :mod:`flownb.server.sse`) on the client side: the server-sent events of
one response, each as ``(event name, decoded data)``, and the flownb exception an ``error``
event stands for."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..error_map import from_http
from ..errors import ApiError, FlownbError, Problem

__all__ = ["error_of", "read_events"]


def read_events(lines: Iterator[bytes]) -> Iterator[tuple[str, Any]]:
    """Yield ``(event, data)`` for each server-sent event read from ``lines`` (``data`` decoded
    from JSON; an event without a name is ``"message"``).

    Raises:
        ApiError: an event's data is not JSON.
    """
    name = "message"
    data: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8").rstrip("\r")
        if not line:
            if data:
                try:
                    yield name, json.loads("\n".join(data))
                except ValueError:
                    raise ApiError(
                        "the service streamed an event that is not JSON", status=200
                    ) from None
            name, data = "message", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)


def error_of(data: Any) -> FlownbError:
    """Return the exception a streamed run's ``error`` event stands for (the error body and
    its ``status``), as the same answer without streaming would have raised."""
    body = data if isinstance(data, dict) else {}
    raw = body.get("status")
    status = raw if isinstance(raw, int) else 500
    problems = [
        Problem(str(e.get("code") or "error"), str(e["message"]))
        for e in body.get("errors") or []
        if isinstance(e, dict) and isinstance(e.get("message"), str)
    ]
    return from_http(
        status,
        str(body.get("code") or ""),
        str(body.get("message") or f"HTTP {status}"),
        problems=problems,
        request_id=body.get("request_id"),
    )
