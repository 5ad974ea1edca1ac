"""Help text for the ``flownb`` command groups (click), and the ``--provider`` option's type."""

from __future__ import annotations

from typing import Any

import click

__all__ = ["FullHelpGroup", "ProviderChoice"]


class ProviderChoice(click.ParamType):
    """A provider name (any case), checked against every provider, built-in or plugin, only
    when one is given or a command's help is shown: listing the plugins reads every installed
    package's entry points, which ``flownb --help`` and a command that does not name a provider
    should not pay for. A wrong name is refused naming every choice."""

    name = "provider"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        """Return how a command's own help shows the value: every choice, plugins included, as
        click's Choice does (``flownb --help`` lists commands only, so it never asks)."""
        from ..providers.registry import provider_names

        return f"[{'|'.join(provider_names())}]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """Return the provider's registered name for ``value`` (matched without case).

        Raises:
            click.BadParameter: no provider has that name.
        """
        from ..providers.registry import provider_names

        names = provider_names()
        wanted = str(value).lower()
        for name in names:
            if name.lower() == wanted:
                return name
        self.fail(f"{value!r} is not one of {', '.join(map(repr, names))}.", param, ctx)


class FullHelpGroup(click.Group):
    """A command group whose help lists each command with the whole first sentence of its help,
    wrapped to the terminal, where click would cut it at the line's end with ``...``."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Write the ``Commands:`` section: name, then the first sentence of its help."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                # A limit no first sentence reaches: click stops at the sentence's end.
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
