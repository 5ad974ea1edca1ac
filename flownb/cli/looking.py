"""The commands that look and run nothing: ``flownb check`` (flow lint), ``flownb diff`` (what
differs between two flows), ``flownb batches`` (the provider batches flownb remembers) and
``flownb endpoints`` (what the flownb.toml files declare). :mod:`flownb.cli.main` adds them to
the ``flownb`` group.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import FlowFileError
from ..show.escape import term_text
from .inputs import flow_location

__all__ = ["batches", "check", "diff", "endpoints"]


@click.command()
@click.argument("flows", nargs=-1, required=True, metavar="FLOW...")
def check(flows: tuple[str, ...]) -> None:
    """Check flow files for mistakes a valid graph can hold.

    Reports a {label} that names no variable (with the name probably meant), an empty prompt,
    a variable no prompt uses, an output fed by nothing, a flow with no outputs, and a file that
    is not a flow at all (an empty flow included): one line each on stdout. Exits 1 when some
    flow has errors, 0 when there are only warnings (or nothing to say).
    """
    from ..flowfile.lint import lint
    from ..flowfile.model import load_flow_file

    failed = False
    for flow in flows:
        if not isinstance(flow_location(flow), Path):
            raise click.UsageError(f"{flow!r}: check takes a flow file (.json), not a flow id")
        try:
            findings = lint(load_flow_file(flow))
        except FlowFileError as exc:
            message = exc.message.removeprefix(f"{flow}: ")  # named once, first
            click.echo(f"{flow}: error: {term_text(' '.join(message.split()))}")
            failed = True
            continue
        for finding in findings:
            click.echo(f"{flow}: {finding}")
        errors = sum(f.level == "error" for f in findings)
        failed = failed or errors > 0
        if not findings:
            click.echo(f"{flow}: ok")
    if failed:
        sys.exit(1)


@click.command()
@click.option("--refresh", is_flag=True, help="Ask the provider for the state of running batches.")
@click.option("--cancel", "cancel_id", metavar="ID", help="Cancel this provider batch.")
def batches(refresh: bool, cancel_id: str | None) -> None:
    """List the provider batches flownb remembers (newest first), refresh or cancel one."""
    import pandas as pd

    from ..frames.batch_api import cancel_batch, list_batches

    if cancel_id:
        click.echo(f"{cancel_id}: {cancel_batch(cancel_id)}")
        return
    table = list_batches(refresh=refresh)
    if table.empty:
        click.echo("no provider batches yet (flownb run ... --batch-api submits some)")
        return
    with pd.option_context("display.width", 160, "display.max_rows", 200):
        click.echo(table.to_string(index=False))


@click.command()
def endpoints() -> None:
    """List the endpoints the flownb.toml files declare (this folder, its parents, then
    FLOWNB_HOME): name, provider, host, the key variable sent there, the file, and which
    declarations a nearer file hides."""
    import pandas as pd

    from ..config.endpoint_list import endpoints as declared

    table = declared()
    if table.empty:
        click.echo("no endpoints declared: add [endpoints.NAME] tables to flownb.toml", err=True)
        return
    table = table.rename(columns={"key_env": "key variable"})
    with pd.option_context("display.width", 200, "display.max_colwidth", 80):
        click.echo(table.to_string(index=False))


@click.command()
@click.argument("flow_a", metavar="A")
@click.argument("flow_b", metavar="B")
def diff(flow_a: str, flow_b: str) -> None:
    """Say in words what differs between two flow files: variables, prompts, models,
    parameters, system messages, outputs, how nodes are joined, nodes added or removed, and the
    endpoint a saved flow names. Editor fields (positions, sizes) are not compared.

    Exits 0 when the two do the same thing, 1 when they differ, 2 when a file is not a flow.
    """
    from ..flowfile.diff import diff_flows
    from ..flowfile.model import read_flow_file

    data = []
    for flow in (flow_a, flow_b):
        if not isinstance(flow_location(flow), Path):
            raise click.UsageError(f"{flow!r}: diff takes flow files (.json), not flow ids")
        try:
            data.append(read_flow_file(flow))
        except FileNotFoundError:
            raise FlowFileError(f"{flow}: no such flow file") from None
    lines = diff_flows(data[0], data[1], (flow_a, flow_b))
    if not lines:
        click.echo("no differences: the two flows do the same thing (editor fields aside)")
        return
    click.echo(term_text(f"--- {flow_a}\n+++ {flow_b}"))
    for line in lines:
        click.echo(term_text(line))  # prompts are text a model or a person wrote
    sys.exit(1)
