"""Endpoints: named ways to reach a model.

An :class:`Endpoint` says which provider kind serves the calls (``openai``, ``azure``,
``anthropic``, ``gemini``, ``offline`` or a plugin's name), at which base URL, where the key comes
from, which extra headers go with each request, and for Azure the api-version and the model ->
deployment map. Endpoints are built in Python, or declared in ``flownb.toml``::

    [endpoints.local]
    provider = "openai"
    base_url = "http://127.0.0.1:11434/v1"
    images = false              # no images endpoint: image nodes are refused at load
    max_tokens_param = "max_tokens"   # the token limit's name this server reads (see below)

    [endpoints.azure-eu]
    provider = "azure"
    base_url = "https://my-resource.openai.azure.com"
    api_key_env = "AZURE_EU_KEY"
    api_version = "2024-10-21"
    deployments = { "gpt-4o-mini" = "mini-eu" }

Files are read from the working folder, then each parent folder, then ``FLOWNB_HOME`` (the
nearest declaration of a name wins, with a warning, once, naming both files: a project's file
must not silently send calls, and keys, where the home's declared otherwise). A file never holds
a key: ``api_key`` in a file is refused. ``flownb endpoints`` (``flownb.endpoints()``) lists what is
declared where (:mod:`flownb.config.endpoint_list`).

**Keys.** A key is named by the environment variable that holds it (``api_key_env``; read from
the environment, else from a ``.env`` file), or given literally in Python (``api_key=``). An
endpoint that names no source uses its provider's usual variable (``OPENAI_API_KEY``,
``AZURE_OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY``), which a local server may
leave unset; but that variable goes only to its vendor's own hosts (:data:`VENDOR_HOSTS`), or to
the base URL the environment pairs with it (``OPENAI_BASE_URL``, ``AZURE_OPENAI_ENDPOINT``). An
endpoint elsewhere that names no variable sends no key (with a warning, once, when the variable
is set): to send it there, name it (``api_key_env = "OPENAI_API_KEY"``). A literal key belongs
to the endpoint's origin (scheme, host, port): :meth:`Endpoint.replace` to another origin asks
for a new one instead of taking it along.

A flow reads its endpoint's key once, when it is loaded (:meth:`Endpoint.bind`), and keeps it in
memory: copies of the flow in this process use that key even if the variable changes later, so
a copy never sends another endpoint's key. Nothing secret is ever in a repr, a file, the run log
or a pickle: a pickled endpoint carries the *name* of its variable and a random token standing
for the key. Unpickled in the same process, the token finds the key again; in another process (a
Dask worker) the named variable is read from that process's environment, and a literal key,
which exists only in the process that was given it, is missing: the worker's flow fails at load
with one line saying to name a variable with ``api_key_env``.
"""

from __future__ import annotations

import secrets
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..show.notices import warn
from .origins import origin, shown

__all__ = [
    "DEFAULT_KEY_ENV",
    "ENDPOINTS_FILE",
    "VENDOR_HOSTS",
    "Declared",
    "Endpoint",
    "declarations",
    "endpoint_files",
    "find_endpoint",
    "load_endpoints",
    "read_secrets_with",
    "table_endpoint",
]


def _no_reader(name: str) -> str | None:
    raise ConfigError(f"cannot read {name}: flownb.config.settings was not imported")


# How a named key is read (environment, then .env). flownb.config.settings, the one module that
# reads
# the environment, plugs its reader in when it is imported (read_secrets_with).
_read_secret: Callable[[str], str | None] = _no_reader


def read_secrets_with(reader: Callable[[str], str | None]) -> None:
    """Make ``reader`` (variable name -> value or None) the way endpoint keys are read."""
    global _read_secret
    _read_secret = reader


ENDPOINTS_FILE = "flownb.toml"

# The variable a provider's key is read from when an endpoint names none.
DEFAULT_KEY_ENV: Mapping[str, str] = {
    "openai": "OPENAI_API_KEY",
    "azure": "AZURE_OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "gemini": "GEMINI_API_KEY",
}

# The hosts a provider's default key variable may go to when an endpoint names no variable:
# the vendor's own (a name, or a suffix starting with a dot).
VENDOR_HOSTS: Mapping[str, tuple[str, ...]] = {
    "openai": ("api.openai.com",),
    "azure": (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com"),
    "anthropic": ("api.anthropic.com",),
    "gemini": ("generativelanguage.googleapis.com",),
}

# Warnings given once per process: (endpoint, host) a default key was kept from, and
# (name, nearer file, farther file) of a shadowed declaration.
_warned: set[tuple[str, ...]] = set()

# Keys of endpoints pickled in this process, by the random token that stands for them.
_KEYS: dict[str, str] = {}

_FILE_FIELDS = frozenset(
    {
        "provider",
        "base_url",
        "api_key_env",
        "api_version",
        "deployments",
        "headers",
        "prices",
        "price_as",
        "images",
        "max_tokens_param",
        "concurrency",
        "rpm",
        "tpm",
    }
)


def _str_map(value: Any, what: str) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(f"{what} must map strings to strings")
    return dict(value)


def _positive(value: Any, what: str) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{what} must be a positive number, got {value!r}")
    return value


def _check_where(name: Any, provider: Any, base_url: Any, api_key: Any, api_key_env: Any) -> None:
    """Check an endpoint's name, provider kind, base URL and key source.

    Raises:
        ConfigError: naming the field that is missing or of the wrong type, or both a key and
            a key variable.
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"an endpoint needs a name, got {name!r}")
    if not isinstance(provider, str) or not provider.strip():
        raise ConfigError(f"endpoint {name!r}: provider must be a provider name")
    if api_key is not None and api_key_env is not None:
        raise ConfigError(f"endpoint {name!r}: give api_key or api_key_env, not both")
    for label, value in (("base_url", base_url), ("api_key_env", api_key_env)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"endpoint {name!r}: {label} must be a non-empty string")
    if api_key is not None and not isinstance(api_key, str):
        raise ConfigError(f"endpoint {name!r}: api_key must be a string")


def _check_behaviour(
    name: str, images: Any, max_tokens_param: Any, prices: Any, price_as: Any, concurrency: Any
) -> None:
    """Check what an endpoint declares about its server: images, the token limit's name, its
    prices (and the model they are read as) and its concurrency.

    Raises:
        ConfigError: naming the field of the wrong type or value.
    """
    if images is not None and not isinstance(images, bool):
        raise ConfigError(f"endpoint {name!r}: images must be true or false")
    if max_tokens_param not in (None, "max_tokens", "max_completion_tokens"):
        raise ConfigError(
            f'endpoint {name!r}: max_tokens_param must be "max_completion_tokens" or '
            f'"max_tokens", got {max_tokens_param!r}'
        )
    if prices is not None and not isinstance(prices, Mapping):
        raise ConfigError(f"endpoint {name!r}: prices must map model names to prices")
    if price_as is not None:
        _check_price_as(name, price_as)
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise ConfigError(f"endpoint {name!r}: concurrency must be a whole number >= 1")


def _check_price_as(name: str, price_as: Any) -> None:
    """Check that ``price_as`` names a model of the price table.

    Raises:
        ConfigError: not a model name, or one the table does not know (naming the closest).
    """
    if not isinstance(price_as, str) or not price_as.strip():
        raise ConfigError(f"endpoint {name!r}: price_as must be a model name")
    from .pricing import price_as_model

    try:
        price_as_model(price_as.strip())
    except ConfigError as exc:
        raise ConfigError(f"endpoint {name!r}: {exc}") from None


class _Held:
    """Where an endpoint's key is, in memory only: the literal ``key``; the random ``token``
    standing for it in pickles; ``withheld``: a literal key that stayed in another process;
    ``bound``/``resolved``: the key read from its variable when a flow was loaded."""

    __slots__ = ("bound", "key", "resolved", "token", "withheld")

    def __init__(self, key: str | None) -> None:
        self.key = key
        self.token: str | None = None
        self.withheld = False
        self.bound = False
        self.resolved: str | None = None


class Endpoint:
    """A named way to reach a model (see the module docstring).

    ``provider`` is the provider kind; ``base_url`` where requests go (the provider's default
    when ``None``); ``api_key`` a literal key (Python only, kept in memory) or ``api_key_env``
    the environment variable holding it; ``api_version`` and ``deployments`` (model ->
    deployment name) are Azure's; ``headers`` go with every request; ``prices`` override the
    price table for this endpoint's models; ``price_as`` names the model of the price table
    whose list price its calls cost (a model alias, or a Claude model behind an
    OpenAI-compatible gateway; checked against the table); ``images=False`` declares there is
    no images endpoint (image nodes are refused at load); ``max_tokens_param`` is the name an
    OpenAI-kind endpoint's chat requests carry their token limit under
    (``"max_completion_tokens"``, the default for OpenAI and Azure, or ``"max_tokens"``, the
    default for any other server, which often reads only that one); ``concurrency`` / ``rpm``
    / ``tpm`` are this endpoint's own limits (a flow's explicit arguments win).

    Raises:
        ConfigError: a field of the wrong type, both ``api_key`` and ``api_key_env``, or a
            ``price_as`` the price table does not know (naming the closest names it knows).
    """

    __slots__ = (
        "_env_paired",
        "_held",
        "api_key_env",
        "api_version",
        "base_url",
        "concurrency",
        "deployments",
        "headers",
        "images",
        "max_tokens_param",
        "name",
        "price_as",
        "prices",
        "provider",
        "rpm",
        "tpm",
    )

    def __init__(
        self,
        name: str,
        provider: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        api_version: str | None = None,
        deployments: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        prices: Mapping[str, Any] | None = None,
        price_as: str | None = None,
        images: bool | None = None,
        max_tokens_param: str | None = None,
        concurrency: int | None = None,
        rpm: float | None = None,
        tpm: float | None = None,
    ) -> None:
        _check_where(name, provider, base_url, api_key, api_key_env)
        _check_behaviour(name, images, max_tokens_param, prices, price_as, concurrency)
        self.name = name
        self.provider = provider.strip().lower()
        self.base_url = base_url.rstrip("/") if base_url else None
        self._held = _Held(api_key or None)
        self.api_key_env = api_key_env
        self.api_version = api_version
        self.deployments = _str_map(deployments, f"endpoint {name!r}: deployments")
        self.headers = _str_map(headers, f"endpoint {name!r}: headers")
        self.prices = dict(prices) if prices is not None else None
        self.price_as = price_as.strip() if price_as is not None else None
        self.images = images
        self.max_tokens_param = max_tokens_param
        self.concurrency = concurrency
        self.rpm = _positive(rpm, f"endpoint {name!r}: rpm")
        self.tpm = _positive(tpm, f"endpoint {name!r}: tpm")
        # Made from the environment, whose base URL variable pairs with the provider's key
        # variable (OPENAI_BASE_URL with OPENAI_API_KEY): that key may go to that URL.
        self._env_paired = False

    def paired_with_environment(self) -> Endpoint:
        """Return a copy whose base URL came from the environment variable that pairs with its
        provider's default key variable (``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``,
        ``AZURE_OPENAI_ENDPOINT`` / ``AZURE_OPENAI_API_KEY``): that key may be sent there."""
        new = self.replace()
        new._env_paired = True
        return new

    @property
    def from_environment(self) -> bool:
        """Whether this endpoint was made from the environment (``OPENAI_BASE_URL``,
        ``AZURE_OPENAI_ENDPOINT``) rather than declared or built by the user."""
        return self._env_paired

    # -- the key --------------------------------------------------------------------------------

    @property
    def api_key(self) -> str | None:
        """The literal key given in Python, if any (never shown, written or pickled)."""
        return self._held.key

    @property
    def key_env(self) -> str | None:
        """The name of the variable the key is read from (``None`` for a literal key, or for
        no key: the endpoint names no variable and its host is not its vendor's)."""
        if self._held.key is not None or self._held.withheld:
            return None
        if self.api_key_env:
            return self.api_key_env
        return DEFAULT_KEY_ENV.get(self.provider) if self.default_key_allowed else None

    @property
    def default_key_allowed(self) -> bool:
        """Whether the provider's default key variable may be sent to this endpoint's host:
        its vendor's own host (or the vendor's default, no base URL), or the base URL the
        environment pairs with that variable."""
        if not self.base_url or self._env_paired:
            return True
        host = (urllib.parse.urlsplit(self.base_url).hostname or "").lower().rstrip(".")
        return any(
            host == allowed or (allowed.startswith(".") and host.endswith(allowed))
            for allowed in VENDOR_HOSTS.get(self.provider, ())
        )

    @property
    def bound(self) -> bool:
        """Whether the key was read and is held in memory (see :meth:`bind`)."""
        return self._held.bound or self._held.key is not None

    def bind(self) -> Endpoint:
        """Return a copy that holds its key in memory, read now (a flow binds its endpoint when
        it is loaded, so later changes to the environment do not reach its copies).

        Raises:
            ConfigError: as :meth:`key`.
        """
        if self.bound:
            return self
        new = self.replace()
        new._held.resolved, new._held.bound = self.key(), True
        return new

    def key(self) -> str | None:
        """Return the key: the literal one, else the one read by :meth:`bind`, else the named
        variable's value (environment, then ``.env``); ``None`` when the endpoint names no
        variable and its provider's usual one is unset (a local server needing no key).

        Raises:
            ConfigError: the named variable is empty or unset, or the literal key was given to
                another process (it never leaves the one that set it).
        """
        env_secret = _read_secret
        if self._held.key is not None:
            return self._held.key
        if self._held.bound:
            return self._held.resolved
        if self._held.withheld:
            raise ConfigError(
                f"endpoint {self.name!r} was given a literal api_key, which stays in the process "
                "that set it; name the environment variable holding it (api_key_env=...) to use "
                "the endpoint in other processes"
            )
        if self.api_key_env:
            value = env_secret(self.api_key_env)
            if not value:
                raise ConfigError(
                    f"endpoint {self.name!r}: the environment variable {self.api_key_env} "
                    "(its api_key_env) is not set, here or in .env"
                )
            return value
        default = DEFAULT_KEY_ENV.get(self.provider)
        if not default:
            return None
        if not self.default_key_allowed:
            # Never a vendor's key to another host unless the endpoint names the variable.
            if env_secret(default) and ("key", self.name, str(self.host)) not in _warned:
                _warned.add(("key", self.name, str(self.host)))
                warn(
                    f"endpoint {self.name!r} names no key variable and {self.host} is not "
                    f"{self.provider}'s own host: {default} is not sent there (to send it, "
                    f'name it: api_key_env = "{default}")'
                )
            return None
        return env_secret(default)

    # -- identity, copies, display --------------------------------------------------------------

    @property
    def host(self) -> str | None:
        """The base URL's host (with port), or ``None`` for the provider's default."""
        if not self.base_url:
            return None
        return urllib.parse.urlsplit(self.base_url).netloc or self.base_url

    def deployment(self, model: str) -> str:
        """Return the deployment serving ``model`` (Azure): the mapped name, else the model's."""
        return (self.deployments or {}).get(model, model)

    def identity(self) -> dict[str, Any]:
        """Return what decides an answer (provider kind, base URL, api-version, deployments):
        part of cache keys. Never the key, never the headers (they may carry secrets)."""
        ident: dict[str, Any] = {"provider": self.provider, "base_url": self.base_url}
        if self.api_version:
            ident["api_version"] = self.api_version
        if self.deployments:
            ident["deployments"] = dict(sorted(self.deployments.items()))
        return ident

    def replace(self, **changes: Any) -> Endpoint:
        """Return a copy with ``changes`` (constructor arguments) applied. A copy keeps the
        literal key unless ``api_key`` or ``api_key_env`` is changed; a copy moved to another
        origin (``base_url`` on another scheme, host or port) never takes it along.

        Raises:
            ConfigError: ``base_url`` moves an endpoint holding a literal key, or headers, to
                another origin without a new ``api_key`` or ``api_key_env`` (or ``headers``):
                the message asks for them.
        """
        fields = self.fields()
        rekeyed = "api_key" in changes or "api_key_env" in changes
        literal = self._held.key is not None or self._held.withheld
        if literal and not rekeyed and "base_url" in changes and self._moves(changes["base_url"]):
            here = shown(self.base_url) if self.base_url else f"{self.provider}'s default host"
            there = shown(str(changes["base_url"])) if changes["base_url"] else "its default host"
            raise ConfigError(
                f"endpoint {self.name!r} moves from {here} to {there}: its api_key was given for "
                f"{here} and does not go to another host; give one for {there} "
                "(replace(base_url=..., api_key=...), or api_key_env=... naming its variable)"
            )
        moved = "base_url" in changes and self._moves(changes["base_url"])
        if moved and self.headers and "headers" not in changes:
            # Headers may carry credentials too (a gateway's token): they were given for this
            # host, and are given again, on purpose, for another.
            here = shown(self.base_url) if self.base_url else f"{self.provider}'s default host"
            raise ConfigError(
                f"endpoint {self.name!r} moves from {here}: its headers "
                f"({', '.join(sorted(self.headers))}) were given for {here} and do not go to "
                "another host; give them again (replace(base_url=..., headers={...}))"
            )
        if rekeyed:
            fields.pop("api_key_env", None)
        else:
            fields["api_key"] = self._held.key
        fields.update(changes)
        new = Endpoint(**fields)
        if not rekeyed:
            new._held.withheld = self._held.withheld  # a key withheld stays withheld
        # The environment's pairing holds for its own base URL, never for another.
        new._env_paired = self._env_paired and new.base_url == self.base_url
        return new

    def _moves(self, base_url: object) -> bool:
        """Return whether ``base_url`` is on another origin (scheme, host, port) than this
        endpoint's (no base URL: the provider's default, its vendor's own host)."""
        if not base_url:
            return bool(self.base_url)  # back to the default host: moved unless already there
        new = origin(str(base_url))
        if self.base_url:
            return origin(self.base_url) != new
        return new[0] != "https" or new[1] not in VENDOR_HOSTS.get(self.provider, ())

    def fields(self) -> dict[str, Any]:
        """Return the constructor arguments that rebuild this endpoint (never its key)."""
        return {
            "name": self.name,
            "provider": self.provider,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "api_version": self.api_version,
            "deployments": self.deployments,
            "headers": self.headers,
            "prices": self.prices,
            "price_as": self.price_as,
            "images": self.images,
            "max_tokens_param": self.max_tokens_param,
            "concurrency": self.concurrency,
            "rpm": self.rpm,
            "tpm": self.tpm,
        }

    def __reduce__(self) -> tuple[Any, ...]:
        # A key never goes into a pickle: a random token stands in for it, which this process
        # can trade back for the key and any other process cannot.
        held = self._held
        key = held.key if held.key is not None else held.resolved if held.bound else None
        token = None
        if key is not None:
            if held.token is None:
                held.token = secrets.token_hex(16)
            token = held.token
            _KEYS[token] = key
        literal = held.key is not None or held.withheld
        return (_rebuild, (self.fields(), token, literal, self._env_paired))

    def fingerprint(self) -> str:
        """Return a text telling this endpoint from any other, keys included, without any key:
        its repr and the random token standing for its key (set once it is pickled)."""
        return f"{self!r} key={self._held.token or self.key_env or '-'}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Endpoint):
            return NotImplemented
        return self.fields() == other.fields() and self.key_env == other.key_env

    def __hash__(self) -> int:
        return hash((self.name, self.provider, self.base_url))

    def __repr__(self) -> str:
        parts = [repr(self.name), repr(self.provider)]
        if self.base_url:
            parts.append(f"base_url={self.base_url!r}")
        if self._held.key is not None or self._held.withheld:
            parts.append("api_key=***")
        elif self.api_key_env:
            parts.append(f"api_key_env={self.api_key_env!r}")
        labels = ("api_version", "deployments", "images", "max_tokens_param", "concurrency")
        for label in (*labels, "rpm", "tpm"):
            value = getattr(self, label)
            if value is not None:
                parts.append(f"{label}={value!r}")
        if self.headers:
            parts.append(f"headers=[{', '.join(sorted(self.headers))}]")  # names, not values
        if self.prices:
            parts.append(f"prices={self.prices!r}")
        if self.price_as:
            parts.append(f"price_as={self.price_as!r}")
        return f"Endpoint({', '.join(parts)})"


def _rebuild(
    fields: dict[str, Any], token: str | None, literal: bool, env_paired: bool = False
) -> Endpoint:
    endpoint = Endpoint(**fields)
    endpoint._env_paired = env_paired
    held = endpoint._held
    held.token = token  # names the key (not secret): flows with other keys stay apart
    key = _KEYS.get(token) if token is not None else None
    if key is not None:  # the same process: the very key the original held
        if literal:
            held.key = key
        else:
            held.resolved, held.bound = key, True
    elif literal:  # another process: the literal key stayed behind
        held.withheld = True
    return endpoint


# -- flownb.toml ------------------------------------------------------------------------------


def endpoint_files(cwd: Path, home: Path) -> list[Path]:
    """Return the ``flownb.toml`` files that exist, nearest first: ``cwd``, its parents, then
    ``home`` (FLOWNB_HOME)."""
    found: list[Path] = []
    for folder in (cwd, *cwd.parents, home):
        path = folder / ENDPOINTS_FILE
        if path.is_file() and path not in found:
            found.append(path)
    return found


def table_endpoint(name: str, table: Any, path: Path) -> Endpoint:
    """Return the endpoint an ``[endpoints.NAME]`` table of the file ``path`` declares.

    Raises:
        ConfigError: the table is wrong (a key in it, an unknown field, no provider, ...),
            naming the file and the field.
    """
    where = f"{path}: [endpoints.{name}]"
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where} must be a table")
    if "api_key" in table:
        raise ConfigError(
            f"{where}: api_key is not allowed in a file (keys never go to disk); name the "
            'environment variable that holds it: api_key_env = "..."'
        )
    unknown = sorted(set(table) - _FILE_FIELDS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown field{'s' * (len(unknown) > 1)} {', '.join(unknown)}; "
            f"known: {', '.join(sorted(_FILE_FIELDS))}"
        )
    if "provider" not in table:
        raise ConfigError(f'{where} needs provider = "openai" (or azure, anthropic, gemini, ...)')
    try:
        return Endpoint(name, **table)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class Declared:
    """One ``[endpoints.NAME]`` table: the endpoint, the file declaring it, and the farther
    files whose declarations of the same name it hides."""

    endpoint: Endpoint
    file: Path
    shadows: tuple[Path, ...] = ()


def declarations(cwd: Path, home: Path) -> dict[str, Declared]:
    """Return every declared endpoint name with its nearest declaration (see
    :func:`load_endpoints`).

    Raises:
        ConfigError: a file is not TOML, or an endpoint table is wrong (naming file and field).
    """
    import tomllib  # here: only a run that looks for endpoints reads TOML

    found: dict[str, Declared] = {}
    for path in endpoint_files(cwd, home):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: cannot be read as TOML: {exc}") from None
        tables = data.get("endpoints", {})
        if not isinstance(tables, Mapping):
            raise ConfigError(f"{path}: endpoints must be tables: [endpoints.NAME]")
        for name, table in tables.items():
            nearer = found.get(name)
            if nearer is None:
                found[name] = Declared(table_endpoint(name, table, path), path)
            else:
                found[name] = Declared(nearer.endpoint, nearer.file, (*nearer.shadows, path))
    return found


def load_endpoints(cwd: Path, home: Path) -> dict[str, Endpoint]:
    """Return every endpoint declared in the ``flownb.toml`` files seen from ``cwd`` (the
    nearest declaration of a name wins; a warning, once per process, names the files when one
    hides another's declaration).

    Raises:
        ConfigError: a file is not TOML, or an endpoint table is wrong (naming file and field).
    """
    declared = declarations(cwd, home)
    for name, entry in declared.items():
        for hidden in entry.shadows:
            once = ("shadow", name, str(entry.file), str(hidden))
            if once not in _warned:
                _warned.add(once)
                warn(
                    f"endpoint {name!r} of {entry.file} hides the one of the same name in "
                    f"{hidden}: calls (and keys) go to {entry.endpoint.host or 'the default host'}"
                    " (see `flownb endpoints`)"
                )
    return {name: entry.endpoint for name, entry in declared.items()}


def find_endpoint(name: str, cwd: Path, home: Path) -> Endpoint:
    """Return the endpoint declared as ``name`` in the ``flownb.toml`` files seen from ``cwd``.

    Raises:
        ConfigError: no file declares it (the message lists the names that exist and where
            flownb looked).
    """
    known = load_endpoints(cwd, home)
    endpoint = known.get(name)
    if endpoint is None:
        names = ", ".join(sorted(known)) or "none"
        raise ConfigError(
            f"no endpoint named {name!r} in {ENDPOINTS_FILE} (looked in {cwd}, its parents and "
            f"{home}); declared endpoints: {names}"
        )
    return endpoint
