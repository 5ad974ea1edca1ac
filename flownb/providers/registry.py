"""Finding providers by name: the built-ins, and any installed package's ``flownb.providers``
entry points.

A third-party package adds a provider without editing flownb by declaring, in its
``pyproject.toml``::

    [project.entry-points."flownb.providers"]
    mymodel = "mypackage.provider:MyProvider"   # a flownb.providers.base.Provider subclass

Its name then works everywhere a provider is chosen: ``load_flow(provider="mymodel")``,
``flownb run --provider mymodel``, ``%flow run ... --provider mymodel``, ``FLOWNB_PROVIDER``.
Entry points are read once per process (the first time a name is looked up) and loaded only
when that provider is used. A built-in name cannot be taken over by a plugin.

The registry is an object, :data:`PROVIDERS`: a notebook registers a provider class of its own
in-process with ``PROVIDERS.register("mine", MyProvider)``, and ``PROVIDERS.reset()`` forgets
such registrations (and reads the entry points again).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from importlib.metadata import entry_points

from ..config.settings import RunConfig
from ..errors import ConfigError
from ..infra.media import MediaStore
from .base import Provider

__all__ = [
    "ENTRY_POINT_GROUP",
    "PROVIDERS",
    "ProviderRegistry",
    "make_provider",
    "provider_class",
    "provider_names",
]

ENTRY_POINT_GROUP = "flownb.providers"

# name -> "module:Class"; imported only when chosen (the openai provider pulls in aiohttp).
_BUILTIN: Mapping[str, str] = {
    "offline": "flownb.providers.offline:OfflineProvider",
    "openai": "flownb.providers.openai.provider:OpenAIProvider",
    "azure": "flownb.providers.openai.provider:AzureOpenAIProvider",
    # Optional extras (flownb[anthropic], flownb[gemini]): the SDK is imported when chosen.
    "anthropic": "flownb.providers.anthropic.provider:AnthropicProvider",
    "gemini": "flownb.providers.gemini:GeminiProvider",
}


def _import(target: str) -> object:
    module, _, attr = target.partition(":")
    return getattr(import_module(module), attr)


def _plugins() -> Mapping[str, Callable[[], object]]:
    found: dict[str, Callable[[], object]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        name = ep.name.strip().lower()
        if name not in _BUILTIN:
            found.setdefault(name, ep.load)
    return found


class ProviderRegistry:
    """Provider names -> classes: the built-ins, the installed ``flownb.providers`` entry points
    (read once, on the first look-up), and classes registered in this process with
    :meth:`register` (a notebook's own provider). :meth:`reset` forgets the registered ones and
    reads the entry points again."""

    def __init__(self) -> None:
        self._registered: dict[str, type[Provider]] = {}
        self._found: Mapping[str, Callable[[], object]] | None = None

    def _plugins(self) -> Mapping[str, Callable[[], object]]:
        if self._found is None:
            self._found = _plugins()
        return self._found

    def register(self, name: str, cls: type[Provider]) -> None:
        """Make ``cls`` the provider called ``name`` (case-insensitive) in this process: it then
        works wherever a provider is chosen by name. Registering a name again replaces it.

        Raises:
            ConfigError: ``name`` is a built-in's, or ``cls`` is not a :class:`Provider` subclass.
        """
        chosen = name.strip().lower()
        if chosen in _BUILTIN:
            raise ConfigError(f"provider {chosen!r} is built in and cannot be replaced")
        if not (isinstance(cls, type) and issubclass(cls, Provider)):
            raise ConfigError(f"provider {chosen!r}: {cls!r} is not a Provider subclass")
        self._registered[chosen] = cls

    def reset(self) -> None:
        """Forget every provider registered in this process; read the entry points again."""
        self._registered.clear()
        self._found = None

    def names(self) -> list[str]:
        """Return every provider name that can be chosen: the built-ins first, then the others,
        sorted."""
        return [*_BUILTIN, *sorted({*self._plugins(), *self._registered})]

    def get(self, name: str) -> type[Provider]:
        """Return the provider class registered as ``name`` (case-insensitive).

        Raises:
            ConfigError: no provider has that name (the message lists the names that exist), or
                the plugin cannot be imported or is not a :class:`Provider` subclass.
        """
        chosen = name.strip().lower()
        try:
            if chosen in _BUILTIN:
                cls = _import(_BUILTIN[chosen])
            elif chosen in self._registered:
                cls = self._registered[chosen]
            elif chosen in self._plugins():
                cls = self._plugins()[chosen]()
            else:
                raise ConfigError(
                    f"unknown provider {chosen!r}; choose one of {', '.join(self.names())}"
                )
        except ConfigError:
            raise
        except Exception as exc:  # a broken plugin: say which, and why, in one line
            raise ConfigError(
                f"provider {chosen!r} cannot be loaded: {type(exc).__name__}: {exc}"
            ) from exc
        if not (isinstance(cls, type) and issubclass(cls, Provider)):
            raise ConfigError(
                f"provider {chosen!r} ({ENTRY_POINT_GROUP} entry point) is not a "
                "flownb.providers.base.Provider subclass"
            )
        return cls


# The process's registry: what every surface's provider names and look-ups come from.
PROVIDERS = ProviderRegistry()


def provider_names() -> list[str]:
    """Return every provider name that can be chosen: the built-ins first, then plugins, sorted."""
    return PROVIDERS.names()


def provider_class(name: str) -> type[Provider]:
    """Return the provider class registered as ``name`` (case-insensitive); see
    :meth:`ProviderRegistry.get`.

    Raises:
        ConfigError: no provider has that name, or it cannot be loaded.
    """
    return PROVIDERS.get(name)


def make_provider(config: RunConfig, *, name: str | None = None) -> Provider:
    """Return a new provider: ``name``, else ``config.provider``, set up from ``config``.

    An endpoint in ``config`` prices the provider's calls: its ``prices`` override the price
    table, which is chosen by its provider kind, and its ``price_as`` names the model whose
    list price applies.

    Raises:
        ConfigError: the name is not a provider, or the provider cannot be configured.
    """
    provider = provider_class(name or config.provider).create(
        config, MediaStore(config.media_dir, max_bytes=config.media_max)
    )
    endpoint = config.endpoint
    if endpoint is not None:
        provider.price_kind = endpoint.provider
        if endpoint.prices is not None:
            provider.prices = endpoint.prices
        if endpoint.price_as is not None:
            from ..config.pricing import price_as_model

            provider.price_as = price_as_model(endpoint.price_as)
    from ..config.pricing import uses_table

    # A provider whose calls are priced from the table calls the network (offline's and a
    # plugin's are not): its first answers would wait for the table, and its first retry
    # for tenacity.
    table = provider.price_as is not None or uses_table(
        provider.price_kind or provider.name, provider.prices
    )
    if provider.warm_modules or table:
        from .warmup import warm_up

        warm_up((*provider.warm_modules, "tenacity"), table=table)
    return provider
