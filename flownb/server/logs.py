"""Logging for ``flownb serve``: uvicorn's own configuration, with query strings kept out of the
access log (a key pasted into a URL by mistake must not land in a log file). Headers, where keys
belong, are never logged by uvicorn's access log."""

from __future__ import annotations

import copy
import logging
import re
from typing import Any

from .keys import KEY_PREFIX

__all__ = ["RedactQuery", "log_config"]

_KEY_SHAPED = re.compile(re.escape(KEY_PREFIX) + r"[^/?#]*")


class RedactQuery(logging.Filter):
    """Replaces the query string of an access-log line's path with ``?[redacted]``, and any
    key-shaped path segment (``fnb_...``) with ``fnb_[redacted]``."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            path, sep, _ = args[2].partition("?")
            redacted = _KEY_SHAPED.sub(KEY_PREFIX + "[redacted]", path) + (
                "?[redacted]" if sep else ""
            )
            if redacted != args[2]:
                record.args = (args[0], args[1], redacted, args[3], args[4])
        return True


def log_config(log_level: str = "info") -> dict[str, Any]:
    """Return uvicorn's default logging configuration with :class:`RedactQuery` on the access
    log, and flownb's own lines logged from ``log_level`` up (as uvicorn's are)."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_query"] = {"()": RedactQuery}
    config["handlers"]["access"]["filters"] = ["redact_query"]
    # flownb's own lines (internal errors, broken flow files, the event loop) go where
    # uvicorn's errors go, at the level asked for: --log-level warning leaves out info lines.
    config["loggers"]["flownb"] = {
        "handlers": ["default"],
        "level": log_level.upper(),
        "propagate": False,
    }
    return config
