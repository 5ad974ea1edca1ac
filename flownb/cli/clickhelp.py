"""Help text for the ``flownb`` command groups (click)."""

from __future__ import annotations

import click

__all__ = ["FullHelpGroup"]


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
