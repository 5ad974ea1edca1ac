"""How a ``%flow`` magic fails: one line, as the command line says it, and a failed cell.

IPython shows a plain ``UsageError`` as one line on stderr, but sends the front end no ``error``
message, so a notebook test (nbval) does not see the cell fail. Any other exception shows a
full traceback. A magic's user errors (bad arguments, a missing or broken flow file, variables
that do not fit, a failed run) are neither a bug nor something to read a traceback for, so they
go through :func:`one_line_failure`: the cell fails with an ``error`` output whose traceback is
the single line ``Name: message`` (IPython's ``_render_traceback_`` hook). The exception keeps
its class, so ``except InputError`` around the magic still works.
"""

from __future__ import annotations

from IPython.core.error import UsageError

from ..errors import FlownbError, one_line
from ..show.escape import term_text

__all__ = ["FlowUsageError", "one_line_failure"]


class FlowUsageError(UsageError):
    """A ``%flow`` usage error: shown as the one line ``UsageError: ...`` and failing the cell
    (unlike a plain ``UsageError``, the front end receives it as an error)."""

    def _render_traceback_(self) -> list[str]:
        """Return the traceback IPython shows: this one line."""
        return [f"UsageError: {' '.join(str(self).split())}"]


def one_line_failure(exc: BaseException) -> BaseException:
    """Return what a magic raises for ``exc``: a :class:`FlowUsageError` for a usage error, the
    same flownb error shown as one line for a :class:`~flownb.errors.FlownbError`, and ``exc``
    itself for anything else (a bug keeps its traceback)."""
    if isinstance(exc, FlowUsageError):
        return exc
    if isinstance(exc, UsageError):
        return FlowUsageError(str(exc))
    if isinstance(exc, FlownbError):
        # Shown as text: a model's escape sequence in the message is not obeyed (JupyterLab
        # renders ANSI colours in tracebacks).
        line = term_text(f"{type(exc).__name__}: {one_line(exc)}")
        # An instance attribute, read by IPython's showtraceback: the class stays the caller's.
        setattr(exc, "_render_traceback_", lambda: [line])  # noqa: B010
    return exc
