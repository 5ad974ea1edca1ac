"""The local flow users hold: :class:`LocalFlow` is the runnable core of a local flow
(:class:`~flownb.core.local.LocalCore`: a flow file run in-process on a provider, offline by
default, with its variants ``with_params``, ``with_model``, ``with_endpoint``, ...) with the
features of :class:`~flownb.flows.base.BaseFlow` on top; :func:`load_flow` is the way users get
one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Unpack, cast

from ..config.options import RunOptions
from ..core.local import LocalCore, load_local
from ..providers.base import Provider
from .base import BaseFlow

__all__ = ["BaseFlow", "LocalFlow", "load_flow"]


class LocalFlow(BaseFlow, LocalCore):
    """A flow executed in-process by the engine: a :class:`~flownb.core.local.LocalCore`
    (what the server serves and the judges run) with :class:`~flownb.flows.base.BaseFlow`'s
    features (``run_dataframe``, ``preview``, ``form``, the notebook's live views).

    ``config`` holds every setting its runs depend on (see
    :func:`~flownb.config.settings.resolve_run_config`; :func:`load_flow` builds it); ``provider``
    is a provider instance, else the one ``config`` names. ``source`` is the exported JSON the
    graph came from, when known.

    Raises:
        ConfigError: the provider cannot be set up, or cannot run this flow (image nodes on a
            provider without images, model parameters it refuses).
    """


def load_flow(
    source: str | Path | Mapping[str, Any],
    *,
    name: str | None = None,
    provider: Provider | str | None = None,
    ready: bool = True,
    **options: Unpack[RunOptions],
) -> LocalFlow:
    """Load an exported flow (a path to its JSON file, or the decoded JSON) for local runs.

    ``name`` names the flow in the run log and progress bars (default: the file's name without
    ``.json``, or ``"flow"``). ``provider`` is a provider name (``"offline"``, ``"openai"``, or
    an installed plugin's) or instance; by default
    ``FLOWNB_PROVIDER``, else offline. The run settings (``options``, see
    :class:`~flownb.config.options.RunOptions`): ``concurrency`` bounds provider calls in flight
    (``FLOWNB_CONCURRENCY``, default 16); ``rpm`` caps requests per minute (``FLOWNB_RPM``);
    ``timeout`` is seconds per provider attempt (``FLOWNB_TIMEOUT``); ``retries`` per call after
    a 429/5xx/timeout (``FLOWNB_RETRIES``, default 8); ``tpm`` caps tokens per minute
    (``FLOWNB_TPM``; estimated before each call, corrected by the usage reported).
    ``cache=False`` bypasses the call cache (``FLOWNB_CACHE=0``); ``log=False`` keeps runs out
    of the run log (``FLOWNB_RUNLOG=0``).

    ``endpoint`` says where calls go: a :class:`~flownb.Endpoint`, or the name of one declared
    in ``flownb.toml`` (``FLOWNB_ENDPOINT``); it decides the provider kind and, unless given
    here, the concurrency, rpm and tpm. ``base_url`` / ``api_key`` are the quick case (an
    OpenAI-compatible endpoint), or override the endpoint's. A literal ``api_key`` stays in
    this process's memory (see :mod:`flownb.config.endpoints`).

    ``ready=True`` (the default) returns once the provider's HTTP client and the price table
    are imported (a second or so the first time in a process, on a busy machine), so that the
    first run sends its first request at once and does not hold its answers for the table;
    ``ready=False`` returns without waiting, that warm-up going on in the background (for a
    flow that is looked at, not run).

    Returns:
        A :class:`LocalFlow`.

    Raises:
        FlowFileError: the file is missing, not JSON, or not a valid graph.
        ConfigError: the provider or endpoint cannot be set up (unknown name, missing key,
            image nodes on an endpoint without images).
        TypeError: an option that is not a run setting.
    """
    flow = load_local(
        source, name=name, provider=provider, ready=ready, flow_class=LocalFlow, **options
    )
    return cast(LocalFlow, flow)
