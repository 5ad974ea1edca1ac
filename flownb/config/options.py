"""The run settings a surface may give explicitly, spelled once (:class:`RunOptions`), and the
check that refuses a misspelt one as Python refuses an unknown keyword argument."""

from __future__ import annotations

from difflib import get_close_matches
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from .endpoints import Endpoint

__all__ = ["RunOptions", "check_run_options"]


class RunOptions(TypedDict, total=False):
    """The run settings a surface may give explicitly, spelled once: ``load_flow``,
    :func:`resolve_run_config` and the server take them as ``**options``. Each left out (or
    ``None``) is the environment's, else the default."""

    concurrency: int | None
    """Provider calls in flight at once (``FLOWNB_CONCURRENCY``, default 16)."""
    cache: bool | None
    """Use the call cache (``FLOWNB_CACHE``; the server's: ``FLOWNB_SERVER_CACHE``)."""
    log: bool | None
    """Keep runs in the run log (``FLOWNB_RUNLOG``; the server's: ``FLOWNB_SERVER_RUNLOG``)."""
    rpm: float | None
    """Requests per minute (``FLOWNB_RPM``)."""
    tpm: float | None
    """Tokens per minute, estimated before each call (``FLOWNB_TPM``)."""
    timeout: float | None
    """Seconds per provider attempt (``FLOWNB_TIMEOUT``)."""
    retries: int | None
    """Retries per call after a 429/5xx/timeout (``FLOWNB_RETRIES``, default 8)."""
    endpoint: Endpoint | str | None
    """Where calls go: an :class:`Endpoint` or a name in ``flownb.toml`` (``FLOWNB_ENDPOINT``)."""
    base_url: str | None
    """An OpenAI-compatible endpoint's URL, or one that overrides the endpoint's."""
    api_key: str | None
    """The key for ``base_url`` (kept in memory only)."""


_RUN_OPTIONS = frozenset(RunOptions.__annotations__)


def check_run_options(options: dict[str, object], caller: str) -> None:
    """Refuse what is not a run setting, as Python refuses an unknown keyword argument.

    Raises:
        TypeError: naming the first unknown option of ``caller`` (and the setting probably
            meant).
    """
    for name in options:
        if name not in _RUN_OPTIONS:
            close = get_close_matches(name, sorted(_RUN_OPTIONS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{caller}() got an unexpected keyword argument {name!r}{hint}")
