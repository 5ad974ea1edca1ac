"""The argument parser the ``%flow`` magics share: argparse, but bad arguments raise a one-line
IPython ``UsageError`` instead of exiting the kernel."""

from __future__ import annotations

import argparse
from typing import NoReturn

from IPython.core.error import UsageError

__all__ = ["MagicParser"]


class MagicParser(argparse.ArgumentParser):
    """An argparse parser that raises a one-line UsageError instead of exiting."""

    def error(self, message: str) -> NoReturn:
        """Raise the usage error for ``message``, with the subcommand's usage line."""
        usage = " ".join(self.format_usage().split()[1:])
        raise UsageError(f"%{self.prog}: {message}. Usage: %{usage} (see %flow?)")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        """Raise instead of exiting: a magic must never end the kernel."""
        raise UsageError(message or f"%{self.prog}: invalid arguments")
