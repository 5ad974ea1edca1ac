"""``flow.form()``: an ipywidgets form with an input per variable and a Run button.

The run happens in a worker thread, so the kernel stays free while the flow works (the user can
run other cells); the results are written into the form through ``Output.append_*``, which is
safe from a thread. Images are embedded as bytes (a browser cannot load the kernel's
``file://`` URLs), errors are shown in the form and kept on ``form.error``.

Stable CSS classes for tests and styling: ``flownb-form`` (the whole form), ``flownb-input``
plus ``flownb-var-<name>`` (each variable's input), ``flownb-run`` (the button),
``flownb-status`` (the status line; also ``flownb-status-running|done|error``) and
``flownb-output`` (the outputs area).
"""

from __future__ import annotations

import html
import re
import threading
import time
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from ..display import output_bundles
from ..errors import InputError, one_line

if TYPE_CHECKING:
    from ..flow import BaseFlow
    from ..result import RunResult

__all__ = ["FlowForm"]

# A default longer than this (or with a newline) gets a Textarea instead of a one-line Text.
LONG_TEXT = 60

_STATES = ("ready", "running", "done", "error")


def css_name(variable: str) -> str:
    """Return the CSS-safe form of a variable name used in its ``flownb-var-...`` class."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", variable).strip("-") or "var"


class _Bundle:
    """A ready MIME bundle, so ``Output.append_display_data`` publishes it as it is."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self.data


class FlowForm(widgets.VBox):
    """A form for one flow: labelled inputs prefilled with the defaults, Run, status, outputs.

    Attributes:
        flow: the flow it runs.
        inputs: variable name -> its input widget (``Text``, or ``Textarea`` for long values).
        button: the Run button (disabled while a run is in progress).
        status: the status line (an ``HTML`` widget).
        output: the ``Output`` widget the results or errors go to.
        result: the last successful :class:`~flownb.RunResult`, or None.
        error: the exception of the last failed run, or None.
    """

    def __init__(self, flow: BaseFlow, **kwargs: Any) -> None:
        self.flow = flow
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._finished = threading.Event()
        self._finished.set()
        defaults = flow.defaults
        self.inputs: dict[str, widgets.Text | widgets.Textarea] = {}
        for name in flow.variables:
            self.inputs[name] = _input(name, defaults.get(name, ""))
        self.button = widgets.Button(
            description="Run", button_style="primary", icon="play", tooltip=f"Run {flow.name}"
        )
        self.button.add_class("flownb-run")
        self.status = widgets.HTML(value="")
        self.status.add_class("flownb-status")
        self.output = widgets.Output(layout=widgets.Layout(width="100%"))
        self.output.add_class("flownb-output")
        self._set_status(
            "ready",
            f"Ready: fill in the {_plural(len(self.inputs), 'variable')} and press Run."
            if self.inputs
            else "Ready: press Run.",
        )
        title = widgets.HTML(value=f"<b>{html.escape(flow.name)}</b>")
        title.add_class("flownb-title")
        super().__init__(
            children=[
                title,
                *self.inputs.values(),
                widgets.HBox([self.button, self.status]),
                self.output,
            ],
            **kwargs,
        )
        self.add_class("flownb-form")
        self.button.on_click(self._on_click)

    def __repr__(self) -> str:
        names = ", ".join(self.inputs) or "no variables"
        return f"<FlowForm {self.flow.name!r}: {names} -> {', '.join(self.flow.outputs)}>"

    @property
    def running(self) -> bool:
        """Whether a run is in progress."""
        return not self._finished.is_set()

    @property
    def values(self) -> dict[str, str]:
        """The variables as currently typed into the form."""
        return {name: w.value for name, w in self.inputs.items()}

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the current run (if any) ends; return False if ``timeout`` ran out."""
        return self._finished.wait(timeout)

    def _set_status(self, state: str, text: str) -> None:
        for s in _STATES:
            self.status.remove_class(f"flownb-status-{s}")
        self.status.add_class(f"flownb-status-{state}")
        color = {"error": "#b00020", "done": "#1b5e20"}.get(state)
        style = f' style="color:{color}"' if color else ""
        self.status.value = f"<span{style}>{html.escape(text)}</span>"

    def _on_click(self, _button: Any = None) -> None:
        if self.running:  # a second click while running does nothing (the button is disabled)
            return
        values = self.values
        self._finished.clear()
        self.button.disabled = True
        self.error = None
        self.output.outputs = ()  # the trait itself, so kernel and page agree
        self._set_status("running", f"Running {self.flow.name}…")
        self._thread = threading.Thread(
            target=self._work, args=(values,), name="flownb-form", daemon=True
        )
        self._thread.start()

    def _work(self, values: dict[str, str]) -> None:
        started = time.perf_counter()
        try:
            result = self.flow.run(values)
        except Exception as exc:  # shown in the form: a widget callback has nowhere else to go
            self.error = exc
            self.output.append_stderr(_error_text(exc))
            self._set_status("error", f"Failed: {one_line(exc)}")
        else:
            self.result = result
            for data, _metadata in output_bundles(result):
                self.output.append_display_data(_Bundle(data))
            seconds = time.perf_counter() - started
            cached = " (cached)" if result.cached and result.cached >= set(result) else ""
            count = _plural(len(result.entries), "output")
            self._set_status("done", f"Done in {seconds:.2f} s: {count}{cached}")
        finally:
            self.button.disabled = False
            self._finished.set()


def _input(name: str, default: str) -> widgets.Text | widgets.Textarea:
    common: dict[str, Any] = {
        "value": default,
        "description": name,
        "description_allow_html": False,
        "style": {"description_width": "initial"},
        "layout": widgets.Layout(width="100%"),
    }
    if "\n" in default or len(default) > LONG_TEXT:
        rows = min(12, max(3, default.count("\n") + 1, len(default) // 80 + 1))
        w: widgets.Text | widgets.Textarea = widgets.Textarea(rows=rows, **common)
    else:
        w = widgets.Text(**common)
    w.add_class("flownb-input")
    w.add_class(f"flownb-var-{css_name(name)}")
    return w


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, InputError):
        return "".join(f"{type(exc).__name__}: {p.message}\n" for p in exc.problems)
    return f"{type(exc).__name__}: {exc}\n"
