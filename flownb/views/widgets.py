"""``flow.form()``: an ipywidgets form with an input per variable and a Run button.

The run happens in a worker thread, so the kernel stays free while the flow works (the user can
run other cells). Every change to the form's widgets, from the kernel's thread (a click) or the
worker's, goes through one lock, so the page never gets half of one change and half of another;
results are written through ``Output.append_*``, which is safe from a thread. Images are
embedded as bytes (a browser cannot load the kernel's ``file://`` URLs), errors are shown in the
form and kept on ``form.error``.

The Stop button, :meth:`FlowForm.stop`, and Jupyter's "Interrupt kernel" while no cell runs
stop a run as Ctrl-C stops a batch: the calls that finished stay in the cache, so running again
pays only for the rest.

While a run is in progress its text outputs grow in a live area as the provider streams them
(``flownb-live``, a few updates a second; see :mod:`flownb.views.live_text`), emptied when the
results are shown; ``FLOWNB_LIVE=0`` turns it off.

Stable CSS classes for tests and styling: ``flownb-form`` (the whole form), ``flownb-input``
plus ``flownb-var-<name>`` (each variable's input), ``flownb-run`` (the button), ``flownb-stop``
(the Stop button), ``flownb-status`` (the status line; also
``flownb-status-running|done|error|stopped``), ``flownb-live`` (the streamed text while a run is
in progress) and ``flownb-output`` (the outputs area).
"""

from __future__ import annotations

import re
import signal
import sys
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from ..config.settings import live_view_mode
from ..errors import InputError, one_line
from ..infra.aio import Stopper
from ..providers.calls import notices_to
from ..show.display import output_bundles
from ..show.escape import html_block, html_text
from ..show.fallback import StaticFallback
from .live_text import LiveText, consume

if TYPE_CHECKING:
    from ..core.flow import FlowCore
    from ..runtime.result import RunResult

__all__ = ["FlowForm"]

# The static copy's table of inputs: names and values read from the left, at the top.
_LEFT = (
    "<style>.flownb-inputs th, .flownb-inputs td{text-align:left !important;"
    "vertical-align:top}</style>"
)

# A default longer than this (or with a newline) gets a Textarea instead of a one-line Text.
LONG_TEXT = 60

_STATES = ("ready", "running", "done", "error", "stopped")

_running: weakref.WeakSet[FlowForm] = weakref.WeakSet()  # forms with a run in progress
_previous_sigint: Any = None  # the kernel's own SIGINT handler while idle, before ours


def css_name(variable: str) -> str:
    """Return the CSS-safe form of a variable name used in its ``flownb-var-...`` class."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", variable).strip("-") or "var"


class _Bundle:
    """A ready MIME bundle, so ``Output.append_display_data`` publishes it as it is."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self.data


class FlowForm(StaticFallback, widgets.VBox):
    """A form for one flow: labelled inputs prefilled with the defaults, Run, status, outputs.

    Attributes:
        flow: the flow it runs.
        inputs: variable name -> its input widget (``Text``, or ``Textarea`` for long values).
        button: the Run button (disabled while a run is in progress).
        stop_button: the Stop button (enabled while a run is in progress).
        status: the status line (an ``HTML`` widget).
        output: the ``Output`` widget the results or errors go to.
        live: the ``HTML`` widget the text grows in while a run streams (empty otherwise).
        result: the last successful :class:`~flownb.RunResult`, or None.
        error: the exception of the last failed run, or None.
    """

    def __init__(self, flow: FlowCore, **kwargs: Any) -> None:
        self.flow = flow
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._stopper: Stopper | None = None
        self._finished = threading.Event()
        self._finished.set()
        # Every change to these widgets holds this lock (see the module docstring).
        self._ui = threading.RLock()
        defaults = flow.defaults
        self.inputs: dict[str, widgets.Text | widgets.Textarea] = {}
        for name in flow.variables:
            self.inputs[name] = _input(name, defaults.get(name, ""))
        self.button = widgets.Button(
            description="Run", button_style="primary", icon="play", tooltip=f"Run {flow.name}"
        )
        self.button.add_class("flownb-run")
        self.stop_button = widgets.Button(
            description="Stop", icon="stop", disabled=True, tooltip=f"Stop {flow.name}"
        )
        self.stop_button.add_class("flownb-stop")
        self.status = widgets.HTML(value="")
        self.status.add_class("flownb-status")
        self.output = widgets.Output(layout=widgets.Layout(width="100%"))
        self.output.add_class("flownb-output")
        self.live = widgets.HTML(value="", layout=widgets.Layout(width="100%"))
        self.live.add_class("flownb-live")
        self._set_status(
            "ready",
            f"Ready: fill in the {_plural(len(self.inputs), 'variable')} and press Run."
            if self.inputs
            else "Ready: press Run.",
        )
        title = widgets.HTML(value=f"<b>{html_text(flow.name)}</b>")
        title.add_class("flownb-title")
        super().__init__(
            children=[
                title,
                *self.inputs.values(),
                widgets.HBox([self.button, self.stop_button, self.status]),
                self.live,
                self.output,
            ],
            **kwargs,
        )
        self.add_class("flownb-form")
        self.button.on_click(self._on_click)
        self.stop_button.on_click(lambda _button: self.stop())

    def __repr__(self) -> str:
        names = ", ".join(self.inputs) or "no variables"
        return f"<FlowForm {self.flow.name!r}: {names} -> {', '.join(self.flow.outputs)}>"

    def static_html(self) -> str:
        """Return the form as it stands, as HTML for readers without a kernel: the flow's name,
        each variable and its value, the status, and the last run's outputs."""
        rows = "".join(
            f"<tr><th>{html_text(name)}</th><td>{html_block(w.value, css='flownb-value')}</td></tr>"
            for name, w in self.inputs.items()
        )
        table = f'<table class="flownb-inputs">{rows}</table>' if rows else ""
        outputs = "".join(d["text/html"] for d, _ in self._shown_bundles() if "text/html" in d)
        return (
            f"<b>{html_text(self.flow.name)}</b> <i>(a form: run the notebook to use it)</i>"
            f"{_LEFT}{table}<p>{html_text(self._status_text)}</p>{outputs}"
        )

    def static_text(self) -> str:
        """Return the form as it stands, as text: the flow, each variable's value, the status."""
        lines = [f"form {self.flow.name!r} (run the notebook to use it)"]
        lines += [f"  {name} = {w.value!r}" for name, w in self.inputs.items()]
        lines.append(self._status_text)
        return "\n".join(lines)

    def _shown_bundles(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        result = self.result
        return output_bundles(result) if result is not None and not self.running else []

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

    def stop(self) -> None:
        """Stop the run in progress, if any (as the Stop button does); the calls that finished
        stay in the cache. Returns at once; :meth:`wait` for the form to settle."""
        stopper = self._stopper
        if stopper is not None and self.running:
            stopper.stop()

    def _set_status(self, state: str, text: str) -> None:
        color = {"error": "#b00020", "done": "#1b5e20", "stopped": "#8a5300"}.get(state)
        style = f' style="color:{color}"' if color else ""
        with self._ui:
            for s in _STATES:
                self.status.remove_class(f"flownb-status-{s}")
            self.status.add_class(f"flownb-status-{state}")
            self.status.value = f"<span{style}>{html_text(text)}</span>"
            self._status_text = text

    def _set_running(self, running: bool) -> None:
        with self._ui:
            self.button.disabled = running
            self.stop_button.disabled = not running

    def _on_click(self, _button: Any = None) -> None:
        if self.running:  # a second click while running does nothing (the button is disabled)
            return
        values = self.values
        self._finished.clear()
        self._stopper = stopper = Stopper()
        _running.add(self)
        _stop_forms_on_kernel_interrupt()
        self._set_running(True)
        self.error = None
        with self._ui:
            self.output.outputs = ()  # the trait itself, so kernel and page agree
        self._set_status("running", f"Running {self.flow.name}…")
        # The worker starts with a context of its own: this run's notices go to this form, never
        # to a run the cell makes meanwhile (see flownb.providers.calls.notices_to).
        self._thread = threading.Thread(
            target=self._work, args=(values, stopper), name="flownb-form", daemon=True
        )
        self._thread.start()

    def _work(self, values: dict[str, str], stopper: Stopper) -> None:
        started = time.perf_counter()
        running = f"Running {self.flow.name}…"

        def notice(line: str) -> None:  # a slow retry of this form's run, said in the form
            self._set_status("running", f"{running} {line}")

        try:
            with stopper, notices_to(notice):
                if live_view_mode() == "off":
                    result = self.flow.run(values)
                else:  # the text grows in the live area as it streams
                    result = consume(self.flow.stream(values), LiveText(self._show_live))
        except KeyboardInterrupt:  # Stop, or "Interrupt kernel": what finished is cached
            self._set_status(
                "stopped",
                "Stopped: the calls that finished are kept in the cache; "
                "Run again to complete the run.",
            )
        except Exception as exc:  # shown in the form: a widget callback has nowhere else to go
            self.error = exc
            with self._ui:
                self.output.append_stderr(_error_text(exc))
            self._set_status("error", f"Failed: {one_line(exc)}")
        else:
            self.result = result
            with self._ui:
                for data, _metadata in output_bundles(result):
                    self.output.append_display_data(_Bundle(data))
            seconds = time.perf_counter() - started
            cached = " (cached)" if result.cached and result.cached >= set(result) else ""
            count = _plural(len(result.entries), "output")
            self._set_status("done", f"Done in {seconds:.2f} s: {count}{cached}")
        finally:
            with self._ui:
                self.live.value = ""
            _running.discard(self)
            self._set_running(False)
            self._finished.set()

    def _show_live(self, markup: str, plain: str) -> None:
        with self._ui:
            self.live.value = markup


def _on_kernel_interrupt(signum: int, frame: Any) -> None:
    """SIGINT while the kernel is idle ("Interrupt kernel"): stop every form's run, then do
    what the kernel did before (it ignores the signal while idle)."""
    for form in list(_running):
        form.stop()
    if callable(_previous_sigint):
        _previous_sigint(signum, frame)


def _stop_forms_on_kernel_interrupt() -> None:
    """Have "Interrupt kernel" stop form runs while no cell runs (in an IPython kernel only).

    While it handles a message the kernel puts Python's SIGINT handler in place, and puts its
    idle handler (``saved_sigint_handler``) back afterwards; handing it ours as that idle handler
    means an interrupt with no cell running stops the forms, and one during a cell still
    interrupts the cell.
    """
    global _previous_sigint
    kernelbase = sys.modules.get("ipykernel.kernelbase")
    if kernelbase is None or not kernelbase.Kernel.initialized():
        return
    kernel = kernelbase.Kernel.instance()
    idle = getattr(kernel, "saved_sigint_handler", None)
    if idle is None or idle is _on_kernel_interrupt:
        return
    _previous_sigint = idle if idle not in (signal.SIG_DFL, signal.SIG_IGN) else None
    kernel.saved_sigint_handler = _on_kernel_interrupt


def _input(name: str, default: str) -> widgets.Text | widgets.Textarea:
    common: dict[str, Any] = {
        "value": default,
        "description": name,
        "description_allow_html": False,
        "style": {"description_width": "initial"},
        # "auto", not "100%": a box as wide as the area plus its own margin ran past the output
        # area's right edge; the form's column stretches it to the width there is.
        "layout": widgets.Layout(width="auto"),
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
