"""What FLOW on a command line opens: a local flow file, or a flow id on a flow service.

Shared by every command that takes FLOW (``flownb info``, ``flownb run``, ``flownb eval``),
with the two things they all say the same way: the provider banner, and a usage error naming the
option a value was refused for.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..config.settings import resolve_run_config
from ..errors import ConfigError, FlownbError
from .inputs import CLI, flow_location, no_server

if TYPE_CHECKING:
    from ..core.flow import FlowCore
    from ..flows.base import BaseFlow

__all__ = ["MAX_SPEND_OPTION", "banner", "open_flow", "usage_error"]


# --max-spend of flownb run and flownb eval.
MAX_SPEND_OPTION = click.option(
    "--max-spend",
    type=click.FloatRange(min=0),
    default=None,
    metavar="USD",
    help="Stop paying at this many US dollars: a call is sent only if what was spent plus the "
    "most every call in flight could still cost stays within it (rows not run are marked).",
)


def usage_error(option: str, exc: FlownbError) -> click.UsageError:
    """Return a usage error naming the option whose value ``exc`` refused."""
    return click.UsageError(f"{option}: {exc.message}")


def banner(flow: FlowCore) -> None:
    """Say on stderr which provider runs ``flow`` (or that it runs remotely)."""
    from ..core.local import local_of

    local = local_of(flow)
    line = local.provider.banner() if local is not None else f"remote flow {flow.name!r}"
    click.echo(f"flownb: {line}", err=True)


def open_flow(
    flow: str,
    provider: str | None = None,
    concurrency: int | None = None,
    cache: bool | None = None,
    base_url: str | None = None,
    endpoint: str | None = None,
    *,
    ready: bool = True,
) -> BaseFlow:
    """Return the flow FLOW names: a local file, or a flow id on the server at ``base_url`` (or
    FLOWNB_BASE_URL). ``ready=False``: a flow file to look at, not run (see ``load_flow``).

    Raises:
        FlownbError: the file is not a valid flow (or a directory), no server is set for an
            id, or the server cannot be reached or refuses.
        click.UsageError: ``--provider`` / ``--endpoint`` with a flow id.
    """
    location = flow_location(flow)
    if isinstance(location, Path):
        from ..flows.local import load_flow  # imported when a flow file is run, not for --help

        return load_flow(
            location,
            provider=provider,
            ready=ready,
            concurrency=concurrency,
            cache=cache,
            endpoint=endpoint,
        )
    if provider is not None or endpoint is not None:
        option = "--provider" if provider is not None else "--endpoint"
        raise click.UsageError(f"{option} applies to local flow files; the server picks its own")
    config = resolve_run_config(local=False)
    base_url = base_url or config.service_url
    if not base_url:
        raise no_server(flow, CLI)
    if not base_url.startswith(("http://", "https://")):
        raise click.UsageError(f"--base-url: {base_url!r} is not an http(s) URL")
    if not config.service_key:  # checked here to give the advice in command-line terms
        raise ConfigError(
            f"no API key for {base_url}: set FLOWNB_API_KEY "
            "(for flownb serve, create one with: flownb keys create --name NAME)"
        )
    from ..flows.client import Client  # requests only for a flow id

    return Client(base_url, config.service_key).flow(flow)
