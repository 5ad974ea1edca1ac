"""The one module that reads environment variables, and the home of every default.

Precedence everywhere is: explicit argument > the endpoint's own setting (an endpoint given, or
named in ``flownb.toml``) > environment > default. Every surface (``load_flow``,
``flownb.Client``, ``ServerConfig`` and ``flownb serve``, the CLI, the magics, ``runs()``,
``reports()``, ``evaluate()``, the provider batches' listing) calls one function,
:func:`resolve_run_config`, once, and passes the frozen :class:`RunConfig` it returns down; nothing
else calls :func:`get_settings` or looks at ``os.environ``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Unpack, overload

from ..errors import ConfigError
from .endpoints import Endpoint, find_endpoint, read_secrets_with
from .options import RunOptions, check_run_options

if TYPE_CHECKING:
    from .endpoints import Endpoint

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_INPUT_MAX",
    "DEFAULT_KEEP_ALIVE",
    "DEFAULT_LIMIT_CONCURRENCY",
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_BODY",
    "DEFAULT_MEDIA_MAX",
    "DEFAULT_PROVIDER",
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT",
    "SERVE_CONFIG",
    "RunConfig",
    "ServeLimits",
    "Settings",
    "VendorKeys",
    "env_secret",
    "env_value",
    "export_serve_config",
    "get_settings",
    "home_dir",
    "imported_serve_config",
    "input_max",
    "media_dir",
    "parse_size",
    "resolve_endpoint",
    "resolve_run_config",
    "resolve_serve_limits",
]

DEFAULT_PROVIDER = "offline"
DEFAULT_CONCURRENCY = 16  # provider calls in flight at once
DEFAULT_BATCH_POLL = 30.0  # seconds between status checks of a provider batch
DEFAULT_RETRIES = 8  # retries of a 429/5xx/timeout/dropped call, after the first attempt
DEFAULT_TIMEOUT = 120.0  # seconds per provider attempt
DEFAULT_MAX_BATCH = 1000  # elements per run request (server limit; client chunk size)
DEFAULT_MAX_BODY = 10 * 1024 * 1024  # bytes per run request body
# flownb serve's connection limits (see flownb/server/protocol.py).
DEFAULT_HEADER_TIMEOUT = 10.0  # seconds a connection may take to send a request's head
# Seconds a request may take to send its whole body (FLOWNB_BODY_TIMEOUT, --body-timeout): a
# 10 MB body needs only 330 kB/s; a client trickling bytes is answered 408 and let go.
DEFAULT_BODY_TIMEOUT = 30.0
DEFAULT_KEEP_ALIVE = 5  # seconds an idle keep-alive connection stays open (uvicorn's default)
DEFAULT_LIMIT_CONCURRENCY = 1000  # connections plus requests in flight before 503s
DEFAULT_SHUTDOWN_TIMEOUT = 3  # seconds a stopping server lets runs in flight finish
DEFAULT_OPENAI_TRANSPORT = "aiohttp"
# Bytes of images kept in FLOWNB_HOME/media (FLOWNB_MEDIA_MAX, flownb serve --media-max-size):
# past it, the images used longest ago are deleted as new ones are written. 0: no cap.
DEFAULT_MEDIA_MAX = 1024**3
# Bytes of an input file a user names (--csv, --json, --data, --scorers and the magics'
# equivalents; FLOWNB_INPUT_MAX): read whole into memory, so a bigger file is refused unread.
DEFAULT_INPUT_MAX = 256 * 1024**2

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str) -> int:
    """Return the bytes in a size like ``500M``, ``2G``, ``750KB``, ``1GiB`` or ``1048576``.

    Raises:
        ConfigError: not such a size.
    """
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ConfigError(f"{text!r} is not a size; write e.g. 500M, 2G or 1048576")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def media_dir(home: Path) -> Path:
    """Return where generated images live under a FLOWNB_HOME: ``home/media``."""
    return home / "media"


# `flownb serve --workers N`: the serve options, as JSON, for the worker processes' app factory.
SERVE_CONFIG = "FLOWNB_SERVE_CONFIG"


@dataclass(frozen=True)
class Settings:
    """A snapshot of flownb's environment. Secrets are kept out of the repr."""

    home: Path
    provider: str
    concurrency: int
    base_url: str | None
    api_key: str | None = field(repr=False)
    openai_api_key: str | None = field(repr=False)
    openai_base_url: str | None
    openai_timeout: float | None
    requests_per_minute: float | None
    openai_transport: str = DEFAULT_OPENAI_TRANSPORT
    retries: int = DEFAULT_RETRIES
    cache: bool = True
    server_cache: bool = False
    runlog: bool = True
    server_runlog: bool = False
    tokens_per_minute: float | None = None
    serve_config: str | None = None  # FLOWNB_SERVE_CONFIG (set by `flownb serve --workers`)
    batch_poll: float = DEFAULT_BATCH_POLL  # FLOWNB_BATCH_POLL
    endpoint: str | None = None  # FLOWNB_ENDPOINT: the name of a flownb.toml endpoint
    # FLOWNB_LIVE: the notebook's live results view; "auto" (a front end that renders widgets),
    # "on" (any Jupyter kernel with ipywidgets) or "off" (the plain progress bar, as before).
    live: str = "auto"
    azure_endpoint: str | None = None  # AZURE_OPENAI_ENDPOINT
    azure_api_version: str | None = None  # OPENAI_API_VERSION
    vendors: VendorKeys | None = None
    media_max: int = DEFAULT_MEDIA_MAX  # FLOWNB_MEDIA_MAX (bytes; 0: no cap)
    body_timeout: float = DEFAULT_BODY_TIMEOUT  # FLOWNB_BODY_TIMEOUT (flownb serve)
    public_url: str | None = None  # FLOWNB_PUBLIC_URL: where clients reach flownb serve
    input_max: int = DEFAULT_INPUT_MAX  # FLOWNB_INPUT_MAX (bytes of an input file)
    # FLOWNB_MEDIA_ALLOW: origins (http://host:port) and address ranges (10.0.0.0/8) image
    # URLs may be fetched from besides public addresses and the endpoint's own origin.
    media_allow: tuple[str, ...] = ()
    # FLOWNB_FORWARDED_ALLOW_IPS: the proxies whose X-Forwarded-* headers flownb serve trusts
    forwarded_allow_ips: str | None = None

    @property
    def media_dir(self) -> Path:
        """Where generated images are written (``FLOWNB_HOME/media``)."""
        return media_dir(self.home)


def _number(name: str, raw: str | None, kind: type[int] | type[float]) -> float | int | None:
    if raw is None or raw.strip() == "":
        return None
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {raw!r}")
    return value


def home_dir() -> Path:
    """Return ``FLOWNB_HOME`` as the environment says now (default ``~/.flownb``)."""
    return Path(os.environ.get("FLOWNB_HOME") or Path.home() / ".flownb").expanduser()


def get_settings() -> Settings:
    """Return the current settings read from the environment.

    The provider name is checked where providers are known (:mod:`flownb.providers.registry`).

    Raises:
        ConfigError: a variable is set to something unusable (non-number, bad flag).
    """
    return Settings(
        home=home_dir(),
        provider=_word("FLOWNB_PROVIDER", DEFAULT_PROVIDER),
        concurrency=int(_number_var("FLOWNB_CONCURRENCY", int) or DEFAULT_CONCURRENCY),
        base_url=_env("FLOWNB_BASE_URL"),
        api_key=_env("FLOWNB_API_KEY"),
        openai_api_key=_env("OPENAI_API_KEY"),
        openai_base_url=_env("OPENAI_BASE_URL"),
        openai_timeout=_number_var("FLOWNB_TIMEOUT", float),
        requests_per_minute=_number_var("FLOWNB_RPM", float),
        openai_transport=_word("FLOWNB_OPENAI_TRANSPORT", DEFAULT_OPENAI_TRANSPORT),
        retries=_retries(_env("FLOWNB_RETRIES")),
        cache=_flag("FLOWNB_CACHE", _env("FLOWNB_CACHE"), True),
        server_cache=_flag("FLOWNB_SERVER_CACHE", _env("FLOWNB_SERVER_CACHE"), False),
        runlog=_flag("FLOWNB_RUNLOG", _env("FLOWNB_RUNLOG"), True),
        server_runlog=_flag("FLOWNB_SERVER_RUNLOG", _env("FLOWNB_SERVER_RUNLOG"), False),
        tokens_per_minute=_number_var("FLOWNB_TPM", float),
        serve_config=_env(SERVE_CONFIG),
        batch_poll=float(_number_var("FLOWNB_BATCH_POLL", float) or DEFAULT_BATCH_POLL),
        endpoint=(_env("FLOWNB_ENDPOINT") or "").strip() or None,
        live=_live(_env("FLOWNB_LIVE")),
        azure_endpoint=_env("AZURE_OPENAI_ENDPOINT"),
        azure_api_version=_env("OPENAI_API_VERSION"),
        vendors=VendorKeys(
            anthropic_api_key=_env("ANTHROPIC_API_KEY"),
            anthropic_base_url=_env("ANTHROPIC_BASE_URL"),
            gemini_api_key=_env("GEMINI_API_KEY", "GOOGLE_API_KEY"),
            gemini_base_url=_env("GEMINI_BASE_URL", "GOOGLE_GEMINI_BASE_URL"),
        ),
        media_max=_media_max(_env("FLOWNB_MEDIA_MAX")),
        body_timeout=float(_number_var("FLOWNB_BODY_TIMEOUT", float) or DEFAULT_BODY_TIMEOUT),
        public_url=_env("FLOWNB_PUBLIC_URL"),
        input_max=_input_max(_env("FLOWNB_INPUT_MAX")),
        media_allow=_media_allow(_env("FLOWNB_MEDIA_ALLOW")),
        forwarded_allow_ips=_env("FLOWNB_FORWARDED_ALLOW_IPS"),
    )


def _env(*names: str) -> str | None:
    """Return the first of the environment variables ``names`` that is set and not empty (a
    variable set to ``""`` counts as unset), else ``None``."""
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


def _word(name: str, default: str) -> str:
    """Return the environment variable ``name`` (else ``default``) stripped and lower-cased."""
    return (_env(name) or default).strip().lower()


def _number_var(name: str, kind: type[int] | type[float]) -> float | int | None:
    """Return the environment variable ``name`` as a positive number, ``None`` when unset.

    Raises:
        ConfigError: not a number, or not positive.
    """
    return _number(name, os.environ.get(name), kind)


def env_secret(name: str) -> str | None:
    """Return the value of the environment variable ``name``, else of ``name`` in the nearest
    ``.env`` file (searched from the working folder up); ``None`` when neither has it. Used for
    an endpoint's key, named by its variable (see :class:`flownb.config.endpoints.Endpoint`)."""
    value = os.environ.get(name)
    if value:
        return value
    from dotenv import dotenv_values, find_dotenv

    path = find_dotenv(usecwd=True)
    return (dotenv_values(path).get(name) or None) if path else None


read_secrets_with(env_secret)


def env_value(name: str) -> str | None:
    """Return the environment variable ``name`` (``None`` when unset or empty): for an endpoint
    whose key is named by a variable, read when its provider is built."""
    return os.environ.get(name) or None


@dataclass(frozen=True)
class VendorKeys:
    """Where the Anthropic and Gemini providers go without an endpoint: ``ANTHROPIC_API_KEY`` /
    ``ANTHROPIC_BASE_URL``, ``GEMINI_API_KEY`` (else ``GOOGLE_API_KEY``) / ``GEMINI_BASE_URL``
    (else ``GOOGLE_GEMINI_BASE_URL``). Keys are kept out of the repr."""

    anthropic_api_key: str | None = field(default=None, repr=False)
    anthropic_base_url: str | None = None
    gemini_api_key: str | None = field(default=None, repr=False)
    gemini_base_url: str | None = None

    def without_keys(self) -> VendorKeys:
        """Return these settings with the keys left out (what may be pickled or shipped)."""
        return dataclasses.replace(self, anthropic_api_key=None, gemini_api_key=None)

    def keys_from(self, other: VendorKeys | None) -> VendorKeys:
        """Return these settings with the keys of ``other`` (this process's environment)."""
        if other is None:
            return self
        return dataclasses.replace(
            self, anthropic_api_key=other.anthropic_api_key, gemini_api_key=other.gemini_api_key
        )


@dataclass(frozen=True)
class RunConfig:
    """Everything a flow's runs depend on besides the flow itself, resolved once.

    Built by :func:`resolve_run_config` at an entry point and passed down unchanged: the engine,
    providers, cache and run log take their values from it and never read the environment.
    Secrets are kept out of the repr.
    """

    home: Path
    provider: str = DEFAULT_PROVIDER
    concurrency: int = DEFAULT_CONCURRENCY
    cache: bool = True
    runlog: bool = True
    rpm: float | None = None
    tpm: float | None = None
    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES
    openai_base_url: str | None = None
    openai_api_key: str | None = field(default=None, repr=False)
    openai_transport: str = DEFAULT_OPENAI_TRANSPORT
    batch_poll: float = DEFAULT_BATCH_POLL  # seconds between a provider batch's status checks
    # Where calls go (see flownb.config.endpoints); None: the environment's OPENAI_* settings.
    endpoint: Endpoint | None = None
    vendors: VendorKeys = field(default_factory=lambda: VendorKeys())
    # The flow service flow ids run on (FLOWNB_BASE_URL / FLOWNB_API_KEY): the client's.
    service_url: str | None = None
    service_key: str | None = field(default=None, repr=False)
    # Bytes of images kept in home/media before the least recently used go (0: no cap).
    media_max: int = DEFAULT_MEDIA_MAX
    # Where image URLs may also be fetched from (FLOWNB_MEDIA_ALLOW; see _media_allow).
    media_allow: tuple[str, ...] = ()
    # The run settings given explicitly (RunOptions), so that a copy on another endpoint is
    # resolved by the same rule (see :meth:`on_endpoint`): an explicit argument stays.
    given: dict[str, object] = field(default_factory=dict, repr=False, compare=False)

    @property
    def media_dir(self) -> Path:
        """Where generated images are written (``home/media``)."""
        return media_dir(self.home)

    def replace(self, **changes: object) -> RunConfig:
        """Return a copy with ``changes`` applied (the config itself is frozen)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def on_endpoint(self, endpoint: Endpoint | str) -> RunConfig:
        """Return this configuration moved to ``endpoint`` (an :class:`Endpoint`, or a name
        declared in ``flownb.toml``), resolved by :func:`resolve_run_config`'s one rule: the
        settings given explicitly stay, the endpoint's own limits apply to the rest, then the
        environment, then the defaults. Where calls went before (``base_url``, ``api_key``)
        does not come along.

        Raises:
            ConfigError: an unknown endpoint name.
        """
        return resolve_run_config(home=self.home, endpoint=endpoint, **self.given)  # type: ignore[arg-type]


# The run settings that say where calls go: replaced, not kept, when a flow moves endpoint (and
# never kept in a RunConfig's ``given``: a literal key must not travel with a pickled flow).
_WHERE_CALLS_GO = ("endpoint", "base_url", "api_key")


def live_view_mode() -> str:
    """Return ``FLOWNB_LIVE`` as ``"auto"``, ``"on"`` or ``"off"``, read now: the notebook's
    live results view decides when each batch starts, not when its flow was loaded.

    Raises:
        ConfigError: ``FLOWNB_LIVE`` is set to something else than auto, 1 or 0.
    """
    return get_settings().live


def input_max() -> int:
    """Return ``FLOWNB_INPUT_MAX``, read now: the most bytes of an input file a user names
    (``--csv``, ``--json``, ``--data``, ``--scorers``; default :data:`DEFAULT_INPUT_MAX`).

    Raises:
        ConfigError: ``FLOWNB_INPUT_MAX`` (or another variable) is set to something unusable.
    """
    return get_settings().input_max


def event_loop_kind() -> str:
    """Return ``FLOWNB_EVENT_LOOP``, read now: ``"uvloop"`` (the default; asyncio's loop where
    uvloop is not installed) or ``"asyncio"``, the loop the sync API's calls run on.

    Raises:
        ConfigError: ``FLOWNB_EVENT_LOOP`` is set to something else.
    """
    kind = _word("FLOWNB_EVENT_LOOP", "uvloop")
    if kind not in ("uvloop", "asyncio"):
        raise ConfigError(f"FLOWNB_EVENT_LOOP must be uvloop or asyncio, not {kind!r}")
    return kind


def resolve_run_config(
    *,
    provider: str | None = None,
    home: str | Path | None = None,
    server: bool = False,
    local: bool = True,
    media_max: int | None = None,
    **options: Unpack[RunOptions],
) -> RunConfig:
    """Return the run configuration: each explicit argument (``options``: see
    :class:`RunOptions`), else the environment, else the default. Every surface builds its
    configuration here, once. ``server=True`` takes the
    server's defaults for the cache and the run log (``FLOWNB_SERVER_CACHE`` /
    ``FLOWNB_SERVER_RUNLOG``, both off unless set).

    The endpoint (see :func:`resolve_endpoint`) decides the provider kind and, unless given
    here, the concurrency, rpm and tpm. ``local=False`` is for a surface that runs no flow in
    this process (the client, the readers of ``FLOWNB_HOME``, a worker taking this process's
    keys): no endpoint is looked up (no ``flownb.toml`` is read) and ``endpoint`` is ``None``.

    Raises:
        ConfigError: an argument or variable that cannot work (concurrency below 1, ...), an
            unknown endpoint name, or a provider that contradicts the endpoint.
        TypeError: an option that is not a run setting.
    """
    check_run_options(dict(options), "resolve_run_config")
    s = get_settings()
    chosen = (
        resolve_endpoint(
            s,
            endpoint=options.get("endpoint"),
            base_url=options.get("base_url"),
            api_key=options.get("api_key"),
            provider=provider,
            home=home,
        )
        if local
        else None
    )
    provider = _endpoint_provider(chosen, provider)
    wanted = _over_endpoint(options, chosen)
    _check_run_values(wanted, media_max)
    default_cache, default_log = (
        (s.server_cache, s.server_runlog) if server else (s.cache, s.runlog)
    )
    # The rest of the order, after the explicit argument and the endpoint: the environment,
    # then the default (which get_settings already put in place of an unset variable).
    return RunConfig(
        home=Path(home).expanduser() if home is not None else s.home,
        provider=(provider or s.provider).strip().lower(),
        concurrency=_first(wanted.get("concurrency"), default=s.concurrency),
        cache=_first(wanted.get("cache"), default=default_cache),
        runlog=_first(wanted.get("log"), default=default_log),
        rpm=_first(wanted.get("rpm"), s.requests_per_minute),
        tpm=_first(wanted.get("tpm"), s.tokens_per_minute),
        timeout=_first(wanted.get("timeout"), s.openai_timeout, default=DEFAULT_TIMEOUT),
        retries=_first(wanted.get("retries"), default=s.retries),
        openai_base_url=s.openai_base_url,
        openai_api_key=s.openai_api_key,
        openai_transport=s.openai_transport,
        batch_poll=s.batch_poll,
        endpoint=chosen,
        vendors=s.vendors or VendorKeys(),
        service_url=s.base_url,
        service_key=s.api_key,
        media_max=_first(media_max, default=s.media_max),
        media_allow=s.media_allow,
        # Never a key: the configuration travels with a pickled flow (a worker rebuilds it).
        given={k: v for k, v in options.items() if v is not None and k not in _WHERE_CALLS_GO},
    )


# The run settings an endpoint may set for itself (Endpoint.concurrency, .rpm, .tpm).
_ENDPOINT_LIMITS = ("concurrency", "rpm", "tpm")


def _over_endpoint(options: RunOptions, chosen: Endpoint | None) -> RunOptions:
    """Return ``options`` with ``chosen``'s own limits where none was given: an explicit
    argument wins over its endpoint's setting."""
    if chosen is None:
        return options
    wanted = options.copy()
    for knob in _ENDPOINT_LIMITS:
        if wanted.get(knob) is None:
            wanted[knob] = getattr(chosen, knob)  # type: ignore[literal-required]
    return wanted


def _endpoint_provider(chosen: Endpoint | None, provider: str | None) -> str | None:
    """Return the provider kind calls go to: ``chosen``'s, else ``provider``.

    Raises:
        ConfigError: ``provider`` names another kind than ``chosen``'s.
    """
    if chosen is None:
        return provider
    if provider and provider.strip().lower() != chosen.provider:
        raise ConfigError(
            f"endpoint {chosen.name!r} is an {chosen.provider!r} endpoint; "
            f"provider={provider!r} contradicts it"
        )
    return chosen.provider


def _check_run_values(wanted: RunOptions, media_max: int | None) -> None:
    """Check the run settings given (or taken from the endpoint) before they are used.

    Raises:
        ConfigError: naming the first one that cannot work (concurrency below 1, negative
            retries, a timeout, rpm or tpm that is not positive, a negative media cap).
    """
    concurrency, retries, timeout = (
        wanted.get("concurrency"),
        wanted.get("retries"),
        wanted.get("timeout"),
    )
    if concurrency is not None and concurrency < 1:
        raise ConfigError(f"concurrency must be at least 1, got {concurrency}")
    if retries is not None and retries < 0:
        raise ConfigError(f"retries must be 0 or more, got {retries}")
    if timeout is not None and timeout <= 0:
        raise ConfigError(f"timeout must be positive, got {timeout}")
    for knob, value in (("rpm", wanted.get("rpm")), ("tpm", wanted.get("tpm"))):
        if value is not None and value <= 0:
            raise ConfigError(f"{knob} must be positive, got {value}")
    if media_max is not None and media_max < 0:
        raise ConfigError(f"the media size cap must be 0 (none) or more bytes, got {media_max}")


_T = TypeVar("_T")


@overload
def _first(*values: _T | None, default: _T) -> _T: ...
@overload
def _first(*values: _T | None) -> _T | None: ...
def _first(*values: Any, default: Any = None) -> Any:
    """Return the first of ``values`` that is not ``None`` (they are given in the order of
    precedence), else ``default``."""
    return next((value for value in values if value is not None), default)


@dataclass(frozen=True)
class ServeLimits:
    """``flownb serve``'s own settings besides its run configuration: seconds a request may take
    to send its body, and the public URL image links are made under (``None``: the address each
    request's connection reached)."""

    body_timeout: float
    public_url: str | None
    # The proxies (addresses, networks, or "*") whose X-Forwarded-Proto/-For are believed;
    # None: nobody's, so no caller can make image URLs https or change its own address.
    forwarded_allow_ips: str | None = None


def resolve_serve_limits(
    *,
    body_timeout: float | None = None,
    public_url: str | None = None,
    forwarded_allow_ips: str | None = None,
) -> ServeLimits:
    """Return the server's body timeout, public URL and trusted proxies: each argument, else
    ``FLOWNB_BODY_TIMEOUT`` / ``FLOWNB_PUBLIC_URL`` / ``FLOWNB_FORWARDED_ALLOW_IPS``, else the
    default (30 s, none, none).

    Raises:
        ConfigError: a timeout that is not a positive finite number, a public URL that is
            not an http(s) URL without query or fragment, or a trusted proxy that is not an
            address, a network or ``*``.
    """
    s = get_settings()
    timeout = s.body_timeout if body_timeout is None else body_timeout
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ConfigError(f"the body timeout must be a number of seconds, got {timeout!r}")
    if not (math.isfinite(timeout) and timeout > 0):
        raise ConfigError(f"the body timeout must be a positive number of seconds, got {timeout}")
    url = public_url if public_url is not None else s.public_url
    if url:
        import urllib.parse

        parts = urllib.parse.urlsplit(url.strip())
        plain = not (parts.query or parts.fragment)
        if parts.scheme not in ("http", "https") or not parts.netloc or not plain:
            raise ConfigError(
                f"the public URL must be http(s)://host[:port][/path], got {url!r} "
                "(--public-url / FLOWNB_PUBLIC_URL)"
            )
        url = url.strip().rstrip("/")
    proxies = forwarded_allow_ips if forwarded_allow_ips is not None else s.forwarded_allow_ips
    return ServeLimits(float(timeout), url or None, _trusted_proxies(proxies))


def _trusted_proxies(value: str | None) -> str | None:
    """Return the trusted proxies as a comma-separated list (``None`` when empty).

    Raises:
        ConfigError: an item that is not an IP address, a network or ``*``.
    """
    import ipaddress

    items = [item.strip() for item in (value or "").split(",") if item.strip()]
    for item in items:
        if item == "*":
            continue
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ConfigError(
                f"a trusted proxy must be an IP address, a network (10.0.0.0/8) or '*', got "
                f"{item!r} (--forwarded-allow-ips / FLOWNB_FORWARDED_ALLOW_IPS)"
            ) from None
    return ",".join(items) or None


def resolve_endpoint(
    s: Settings,
    *,
    endpoint: Endpoint | str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    provider: str | None = None,
    home: str | Path | None = None,
) -> Endpoint | None:
    """Return the endpoint calls go to: ``endpoint`` (an :class:`Endpoint`, or a name declared
    in ``flownb.toml``), else ``FLOWNB_ENDPOINT``'s; ``base_url`` / ``api_key`` override its
    fields (or, alone, make an endpoint named ``"custom"`` of ``provider``'s kind, OpenAI by
    default, whose key is ``api_key``, else the provider's usual variable when ``base_url`` is
    the vendor's own host: see :attr:`Endpoint.default_key_allowed`). Without any of
    these, the provider kind decides: ``azure`` takes ``AZURE_OPENAI_ENDPOINT`` and
    ``OPENAI_API_VERSION``, ``openai`` ``OPENAI_BASE_URL`` (its key from ``OPENAI_API_KEY``:
    the environment pairs the two);
    ``None`` for the others (offline, plugins: they read their own settings).

    Raises:
        ConfigError: no ``flownb.toml`` declares the name.
    """
    where = Path(home).expanduser() if home is not None else s.home
    # FLOWNB_ENDPOINT only when nothing else given here says where calls go.
    unsaid = base_url is None and api_key is None and not provider
    chosen = _named_endpoint(s, endpoint, where, environment=unsaid)
    if chosen is None:
        return _unnamed_endpoint(s, base_url=base_url, api_key=api_key, provider=provider)
    changes = {"base_url": base_url, "api_key": api_key}
    changes = {field: value for field, value in changes.items() if value is not None}
    return chosen.replace(**changes) if changes else chosen


def _named_endpoint(
    s: Settings, endpoint: Endpoint | str | None, where: Path, *, environment: bool
) -> Endpoint | None:
    """Return the endpoint given (an :class:`Endpoint`, or a name declared in ``flownb.toml``),
    else ``FLOWNB_ENDPOINT``'s when ``environment`` (nothing else says where calls go), else
    ``None``.

    Raises:
        ConfigError: no ``flownb.toml`` declares the name, or ``endpoint`` is neither.
    """
    if isinstance(endpoint, str):
        return find_endpoint(endpoint.strip(), Path.cwd(), where)
    if endpoint is not None:
        if not isinstance(endpoint, Endpoint):
            raise ConfigError(
                f"endpoint must be a flownb.Endpoint or a name, got {type(endpoint).__name__}"
            )
        return endpoint
    if s.endpoint and environment:
        return find_endpoint(s.endpoint, Path.cwd(), where)
    return None


def _unnamed_endpoint(
    s: Settings, *, base_url: str | None, api_key: str | None, provider: str | None
) -> Endpoint | None:
    """Return the endpoint ``base_url`` / ``api_key`` make (named ``"custom"``), else the
    environment's for the provider kind (Azure's or OpenAI's), else ``None``."""
    kind = (provider or "").strip().lower()
    if base_url is not None or api_key is not None:
        return Endpoint(
            "custom",
            kind or "openai",
            base_url=base_url or (s.azure_endpoint if kind == "azure" else None),
            api_key=api_key,
            api_version=s.azure_api_version if kind == "azure" else None,
        )
    kind = kind or s.provider
    if kind == "azure":
        return Endpoint(
            "azure", "azure", base_url=s.azure_endpoint, api_version=s.azure_api_version
        ).paired_with_environment()
    if kind == "openai":
        # The environment's endpoint, made explicit so a flow keeps it (and its key) wherever
        # it goes: OPENAI_BASE_URL, the key from OPENAI_API_KEY.
        return Endpoint("openai", "openai", base_url=s.openai_base_url).paired_with_environment()
    return None


def export_serve_config(config: str) -> None:
    """Put ``config`` (JSON) where the worker processes of ``flownb serve --workers`` find it:
    the environment they inherit."""
    os.environ[SERVE_CONFIG] = config


def imported_serve_config() -> str | None:
    """Return what :func:`export_serve_config` put in this worker process's environment
    (``None`` when nothing did): the options ``flownb serve --workers`` handed down, not a
    setting.

    Raises:
        ConfigError: a flownb variable is set to something unusable (see :func:`get_settings`).
    """
    return get_settings().serve_config


def _flag(name: str, raw: str | None, default: bool) -> bool:
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be 1/0 (true/false, on/off), got {raw!r}")


def _live(raw: str | None) -> str:
    value = (raw or "").strip().lower()
    if value in ("", "auto"):
        return "auto"
    if value in ("1", "true", "yes", "on"):
        return "on"
    if value in ("0", "false", "no", "off"):
        return "off"
    raise ConfigError(f"FLOWNB_LIVE must be auto, 1 or 0 (on/off), got {raw!r}")


def _media_max(raw: str | None) -> int:
    if raw is None or raw.strip() == "":
        return DEFAULT_MEDIA_MAX
    if raw.strip().lower() in ("off", "none", "no"):
        return 0
    try:
        return parse_size(raw)
    except ConfigError:
        raise ConfigError(
            f"FLOWNB_MEDIA_MAX must be a size (500M, 2G; 0 for no cap), got {raw!r}"
        ) from None


def _input_max(raw: str | None) -> int:
    if raw is None or raw.strip() == "":
        return DEFAULT_INPUT_MAX
    try:
        value = parse_size(raw)
    except ConfigError:
        value = 0
    if value <= 0:
        raise ConfigError(f"FLOWNB_INPUT_MAX must be a size (100M, 2G), got {raw!r}")
    return value


def _media_allow(raw: str | None) -> tuple[str, ...]:
    """Return ``FLOWNB_MEDIA_ALLOW``'s entries (separated by commas or spaces): each an origin
    (``http://host:port``, ``https://host``) or an address range (``10.0.0.0/8``, ``::1``),
    written as flownb compares them.

    Raises:
        ConfigError: an entry that is neither (naming it).
    """
    import ipaddress

    from .origins import origin, shown

    entries: list[str] = []
    for entry in (raw or "").replace(",", " ").split():
        if "://" in entry:
            scheme, host, port = origin(entry)
            path = entry.split("://", 1)[1].partition("/")[2]
            if scheme in ("http", "https") and host and port and not path:
                entries.append(shown(entry))
                continue
        else:
            try:
                entries.append(str(ipaddress.ip_network(entry, strict=False)))
                continue
            except ValueError:
                pass
        raise ConfigError(
            f"FLOWNB_MEDIA_ALLOW: {entry!r} is neither an origin (http://host:port) nor an "
            "address range (10.0.0.0/8)"
        )
    return tuple(entries)


def _retries(raw: str | None) -> int:
    if raw is None or raw.strip() == "":
        return DEFAULT_RETRIES
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"FLOWNB_RETRIES must be a whole number, got {raw!r}") from None
    if value < 0:
        raise ConfigError(f"FLOWNB_RETRIES must be 0 or more, got {raw!r}")
    return value
