"""The ``flownb serve``, ``flownb keys`` and ``flownb gc`` commands (added to the main CLI group).

Heavy imports (FastAPI, uvicorn) happen inside the commands, so ``flownb --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..config.settings import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_KEEP_ALIVE,
    DEFAULT_LIMIT_CONCURRENCY,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_BODY,
    DEFAULT_SHUTDOWN_TIMEOUT,
    resolve_run_config,
)
from .clickhelp import FullHelpGroup, ProviderChoice

# --endpoint NAME (as on flownb run and eval): an endpoint declared in flownb.toml.
ENDPOINT_OPTION = click.option(
    "--endpoint",
    metavar="NAME",
    default=None,
    help="Endpoint declared as [endpoints.NAME] in flownb.toml (default: FLOWNB_ENDPOINT).",
)

__all__ = ["gc", "keys", "serve"]


@click.command()
@click.option(
    "--flows",
    "flows_dir",
    required=True,
    type=click.Path(file_okay=False, dir_okay=True, exists=True),
    help="Folder of exported flows, served as <flow_id>.json (picked up when added or changed).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--provider",
    type=ProviderChoice(),
    default=None,
    help="Model provider (default: FLOWNB_PROVIDER or offline).",
)
@ENDPOINT_OPTION
@click.option(
    "--max-batch",
    default=DEFAULT_MAX_BATCH,
    show_default=True,
    type=click.IntRange(min=1),
    help="Most elements a run's variables array may hold.",
)
@click.option(
    "--max-body-bytes",
    default=DEFAULT_MAX_BODY,
    show_default=True,
    type=click.IntRange(min=1),
    help="Largest request body accepted.",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Server processes sharing the port (and FLOWNB_HOME: keys, media, cache).",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
@click.option(
    "--timeout-keep-alive",
    default=DEFAULT_KEEP_ALIVE,
    show_default=True,
    type=click.IntRange(min=1),
    help="Seconds an idle connection stays open between requests.",
)
@click.option(
    "--header-timeout",
    default=DEFAULT_HEADER_TIMEOUT,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds a connection may take to send a request's head before it is closed "
    "(with --workers: always the default).",
)
@click.option(
    "--body-timeout",
    default=None,
    type=click.FloatRange(min=0.1),
    help=f"Seconds a request may take to send its whole body before it is answered 408 "
    f"(default: FLOWNB_BODY_TIMEOUT, else {DEFAULT_BODY_TIMEOUT:g}).",
)
@click.option(
    "--media-max-size",
    metavar="SIZE",
    default=None,
    help="Cap on the images kept in FLOWNB_HOME/media (500M, 2G; 0: none); the least recently "
    "used go first (default: FLOWNB_MEDIA_MAX, else 1G).",
)
@click.option(
    "--public-url",
    metavar="URL",
    default=None,
    help="Where clients reach this server (https://flows.example.com): image URLs in answers "
    "are made under it (default: FLOWNB_PUBLIC_URL, else the address the connection reached).",
)
@click.option(
    "--forwarded-allow-ips",
    metavar="IPS",
    default=None,
    help="Proxies (addresses or networks, comma-separated; '*': any) whose X-Forwarded-Proto "
    "and X-Forwarded-For are believed (default: FLOWNB_FORWARDED_ALLOW_IPS, else none).",
)
@click.option(
    "--limit-concurrency",
    default=DEFAULT_LIMIT_CONCURRENCY,
    show_default=True,
    type=click.IntRange(min=1),
    help="Open connections plus requests in flight above which requests get 503 at once.",
)
@click.option(
    "--shutdown-timeout",
    default=DEFAULT_SHUTDOWN_TIMEOUT,
    show_default=True,
    type=click.IntRange(min=1),
    help="Seconds a stopping server (Ctrl-C, SIGTERM) lets runs in flight finish before it "
    "cancels them.",
)
def serve(
    flows_dir: str,
    host: str,
    port: int,
    provider: str | None,
    endpoint: str | None,
    max_batch: int,
    max_body_bytes: int,
    workers: int,
    log_level: str,
    timeout_keep_alive: int,
    header_timeout: float,
    body_timeout: float | None,
    media_max_size: str | None,
    public_url: str | None,
    forwarded_allow_ips: str | None,
    limit_concurrency: int,
    shutdown_timeout: int,
) -> None:
    """Serve the flows of a folder over HTTP, as the flow execution service does."""
    import uvicorn

    from ..config.settings import parse_size
    from ..server.app import ServerConfig, create_app
    from ..server.protocol import HTTP_PROTOCOL, bind, http_protocol, listen_options

    config = ServerConfig(
        flows_dir,
        provider=provider,
        max_batch=max_batch,
        max_body_bytes=max_body_bytes,
        endpoint=endpoint,
        body_timeout=body_timeout,
        media_max_bytes=parse_size(media_max_size) if media_max_size is not None else None,
        public_url=public_url,
        forwarded_allow_ips=forwarded_allow_ips,
    )
    app = create_app(config, freeze_heap=True)
    listening = listen_options(
        log_level=log_level,
        timeout_keep_alive=timeout_keep_alive,
        limit_concurrency=limit_concurrency,
        shutdown_timeout=shutdown_timeout,
        forwarded_allow_ips=config.forwarded_allow_ips,
    )
    # Bound before anything is announced: a busy port is one error line, not a false
    # "listening on".
    sock = bind(host, port)
    port = sock.getsockname()[1]
    ids = config.store.ids()
    shown = ", ".join(ids[:20]) + (f", ... ({len(ids) - 20} more)" if len(ids) > 20 else "")
    where = f"[{host}]" if ":" in host else host
    url = f"http://{where}:{port}"
    say = lambda line: click.echo(f"flownb serve: {line}", err=True)  # noqa: E731
    say(config.provider.banner())
    say(f"flows ({len(ids)}) from {flows_dir}: {shown or 'none yet (add <flow_id>.json files)'}")
    skipped = config.store.unservable()
    if skipped:
        rule = "a flow id is 1-128 letters, digits, '_' or '-'"
        say(f"not served ({rule}): {', '.join(skipped[:10])}")
    say(f"listening on {url}  (docs: {url}/docs)")
    n_keys = config.keys.active_count()
    if n_keys:
        say(f"API keys: {n_keys} active (send one in the x-api-key header)")
    else:
        say("no API keys yet: every request is refused until you run")
        say("    flownb keys create --name NAME")
    if workers > 1:
        # Each worker process builds its own app from these options (uvicorn needs an import
        # string to start several); they share keys, media and flows through the disk.
        import json

        from ..config.settings import export_serve_config

        home = str(config.home.resolve())
        options = {"provider": config.provider.name, "max_batch": max_batch, "home": home}
        options.update(flows_dir=str(flows_dir), max_body_bytes=max_body_bytes)
        options.update(
            body_timeout=config.body_timeout,
            media_max_bytes=config.run_config.media_max,
            public_url=config.public_url,
        )
        if endpoint is not None:  # by name: each worker reads the same flownb.toml
            options["endpoint"] = endpoint
        export_serve_config(json.dumps(options))
        say(f"{workers} worker processes")
        # uvicorn's supervisor binds the port itself for its workers: hand it back (the check
        # above has already turned a busy port into one error line).
        sock.close()
        uvicorn.run(
            "flownb.server.app:app_from_env",
            factory=True,
            workers=workers,
            host=host,
            port=port,
            # Imported by each worker process: the default request-head timeout applies.
            http=HTTP_PROTOCOL,
            **listening,
        )
        return
    server = uvicorn.Server(uvicorn.Config(app, http=http_protocol(header_timeout), **listening))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


def _home() -> Path:
    """Return the FLOWNB_HOME the keys and gc commands work on (resolved as every surface does)."""
    return resolve_run_config(local=False).home


@click.group(cls=FullHelpGroup)
def keys() -> None:
    """Create, list and revoke the API keys `flownb serve` accepts (stored in FLOWNB_HOME)."""


@keys.command("create")
@click.option("--name", required=True, help="A name to tell the key apart (e.g. 'laptop', 'ci').")
@click.option(
    "--max-spend",
    type=click.FloatRange(min=0),
    default=None,
    metavar="USD",
    help="What this key may spend in all, in US dollars; the server answers 402 past it.",
)
def keys_create(name: str, max_spend: float | None) -> None:
    """Create a key and print it, alone, on stdout. It is shown this once: store it now."""
    from ..server.keys import KeyStore

    store = KeyStore(_home())
    key = store.create(name, max_spend)
    click.echo(key)
    click.echo(
        f"flownb: created API key {name!r} ({key[:12]}...). It is shown only now; "
        "send it in the x-api-key header (the client reads FLOWNB_API_KEY).",
        err=True,
    )


@keys.command("list")
def keys_list() -> None:
    """List keys: name, prefix, created, last used, spent / spend cap, revoked."""
    from ..server.keys import KeyStore

    records = KeyStore(_home()).load()
    if not records:
        click.echo("no API keys; create one with: flownb keys create --name NAME", err=True)
        return
    from ..show.meter import usd

    spent = KeyStore(_home()).spent()
    rows = [("NAME", "PREFIX", "CREATED", "LAST USED", "SPENT / CAP", "REVOKED")]
    for r in records:
        cap = (
            "-" if r.max_spend is None else f"{usd(spent.get(r.digest, 0.0))} / {usd(r.max_spend)}"
        )
        rows.append((r.name, r.prefix, r.created, r.last_used or "never", cap, r.revoked or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@keys.command("cap")
@click.argument("name")
@click.argument("usd", type=click.FloatRange(min=0), required=False)
def keys_cap(name: str, usd: float | None) -> None:
    """Set the spend cap (US dollars) of the key named NAME; without USD, remove it. What the
    key spent so far still counts; a running server sees the change on its next request."""
    from ..server.keys import KeyStore

    KeyStore(_home()).set_cap(name, usd)
    said = "no spend cap" if usd is None else f"a spend cap of ${usd:g}"
    click.echo(f"flownb: API key {name!r} now has {said}", err=True)


@keys.command("revoke")
@click.argument("name_or_prefix")
def keys_revoke(name_or_prefix: str) -> None:
    """Revoke the key with this name (or whose key starts with this prefix)."""
    from ..server.keys import KeyStore

    revoked = KeyStore(_home()).revoke(name_or_prefix)
    for r in revoked:
        click.echo(f"flownb: revoked API key {r.name!r} ({r.prefix}...)", err=True)


@click.command()
@click.option(
    "--older-than",
    metavar="AGE",
    help="Remove images, cache entries and logged runs older than this (30d, 12h, 45m, 90s).",
)
@click.option(
    "--max-size",
    metavar="SIZE",
    help="Then remove the oldest images until the media folder fits (500M, 2G).",
)
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
def gc(older_than: str | None, max_size: str | None, dry_run: bool) -> None:
    """Prune what flownb keeps in FLOWNB_HOME (images, call cache, run log)."""
    from ..server.housekeeping import parse_age, parse_size, prune

    if older_than is None and max_size is None:
        raise click.UsageError("say what to prune: --older-than AGE and/or --max-size SIZE")
    home = _home()
    pruned = prune(
        home,
        older_than=parse_age(older_than) if older_than is not None else None,
        max_size=parse_size(max_size) if max_size is not None else None,
        dry_run=dry_run,
    )
    for line in pruned.lines(dry_run):
        click.echo(f"flownb gc: {line}")
