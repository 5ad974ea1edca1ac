"""The provider registry is an object: a notebook registers a provider class in-process, and
``reset()`` forgets it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import pytest

import flownb
from flownb import ConfigError
from flownb.providers.base import Call, Generation, Provider
from flownb.providers.registry import PROVIDERS, provider_names
from tests.conftest import make_flow


class ShoutProvider(Provider):
    """Text only: the rendered prompt, upper-cased."""

    name: ClassVar[str] = "shout"
    cacheable: ClassVar[bool] = False
    supports_images: ClassVar[bool] = False

    async def generate(self, call: Call) -> Generation:
        return Generation(call.prompt.upper(), model="shout-1")


@pytest.fixture
def registry() -> Iterator[None]:
    yield
    PROVIDERS.reset()


def test_a_registered_provider_is_chosen_by_name_until_reset(registry: None) -> None:
    flow_json = make_flow({"a": "about {topic}"}, ["topic"], outputs={"out": ["a"]})
    built_in = provider_names()
    PROVIDERS.register("Shout", ShoutProvider)
    assert provider_names() == [*built_in, "shout"]
    flow = flownb.load_flow(flow_json, provider="shout", log=False)
    assert flow.run(topic="owls") == {"out": "ABOUT OWLS"}

    PROVIDERS.reset()
    assert "shout" not in provider_names()
    with pytest.raises(ConfigError, match="unknown provider 'shout'; choose one of offline"):
        flownb.load_flow(flow_json, provider="shout", log=False)


def test_a_built_in_name_or_a_non_provider_is_refused(registry: None) -> None:
    built_in = provider_names()
    with pytest.raises(ConfigError, match="built in"):
        PROVIDERS.register("offline", ShoutProvider)
    with pytest.raises(ConfigError, match="not a Provider subclass"):
        PROVIDERS.register("thing", dict)  # type: ignore[arg-type]
    assert provider_names() == built_in
