"""What a test may leave changed for the tests after it, and the check that it did not.

A test that changes process-wide state and leaves it so passes itself, and breaks (or, worse,
silently changes) whichever test runs after it on the same worker: the order pytest-xdist
hands tests out in differs between runs and machines, so such a leak shows up as a test that
fails only in CI. ``tests/conftest.py`` takes a :func:`snapshot` before each test's node is set
up and calls :func:`check` after it was torn down (a module's node, when its module-wide
fixtures were set up with its first test: they are the module's to restore).

Each :class:`Probe` reads one piece of state. Most leaks fail the test that left them (after
the state was put back, so the tests after it run as they would have): the environment, the
working directory, ``sys.path``, the warning filters and ``showwarning``, the root logger,
asyncio's event-loop policy, the signal handlers, OpenTelemetry instrumentors left on, and
flownb's own module-level state that a finished run or closed notebook should leave as found.
What is process-wide by design is put back silently: OpenTelemetry's global tracer provider (a
docs page sets one as a user would), and flownb's once-per-process warnings (each test sees
them as a fresh process does). Non-daemon threads still running are waited for, a little, then
named.

The snapshot is a tuple of cheap reads (the environment's encoded mapping, not os.environ's
decoded copy; _signal's handlers, not signal's enums): a snapshot and a check cost about 25
microseconds of CPU together, measured over 5,000 of them with flownb and OpenTelemetry
imported.
"""

from __future__ import annotations

import _signal
import asyncio
import gc
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["PROBES", "Probe", "check", "snapshot"]

# The signals a test might catch and forget to give back (SIGALRM is pytest-timeout's, set and
# restored around each test by the plugin itself).
_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGCHLD", "SIGPIPE")
    if hasattr(signal, name)
)

# How long a non-daemon thread a test started may take to end after it (a server's thread
# joined late, a pool shutting down) before it is named as left running.
THREAD_GRACE = 10.0


@dataclass(frozen=True)
class Probe:
    """One piece of global state: how to read it, put it back and say how it changed.

    ``read`` returns a value compared with ``==`` (cheap: called twice per test);
    ``restore(before)`` puts the value read before back; ``fail`` says whether a change is a
    test's fault (reported) or process-wide by design (only put back)."""

    name: str
    read: Callable[[], Any]
    restore: Callable[[Any], None]
    fail: bool = True
    describe: Callable[[Any, Any], str] | None = None
    # What else is no change (besides an equal value, and a flownb module imported meanwhile:
    # its state is new, not left over).
    same: Callable[[Any, Any], bool] | None = None

    def unchanged(self, before: Any, after: Any) -> bool:
        """Return whether ``after`` is no change from ``before``."""
        if before is NOT_IMPORTED or after == before:
            return True
        return self.same is not None and self.same(before, after)


# What a probe of a flownb module reads while that module is not imported.
NOT_IMPORTED: Any = type("NotImported", (), {"__repr__": lambda self: "<not imported>"})()


def _module(name: str) -> Any:
    return sys.modules.get(name)


# --- the interpreter ----------------------------------------------------------------------


def _environ_diff(before: dict[bytes, bytes], after: dict[bytes, bytes]) -> str:
    # Names only: a value may be a key.
    before = {os.fsdecode(k): v for k, v in before.items()}  # type: ignore[misc]
    after = {os.fsdecode(k): v for k, v in after.items()}  # type: ignore[misc]
    added = sorted(after.keys() - before.keys())
    removed = sorted(before.keys() - after.keys())
    changed = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    parts = [
        f"{what} {names}"
        for what, names in (("set", added), ("unset", removed), ("changed", changed))
        if names
    ]
    return "; ".join(parts)


def _restore_environ(before: dict[bytes, bytes]) -> None:
    data = os.environ._data  # type: ignore[attr-defined]
    for name in list(data):
        if name not in before and name not in _NOT_OURS:
            del os.environ[os.fsdecode(name)]  # through os.environ: it unsets the variable
    for name, value in before.items():
        if data.get(name) != value:
            os.environ[os.fsdecode(name)] = os.fsdecode(value)


def _restore_filters(before: tuple[list[Any], Any]) -> None:
    filters, show = before
    warnings.filters[:] = filters
    warnings._filters_mutated()  # type: ignore[attr-defined]  # the module's cache of them
    warnings.showwarning = show


_CURRENT_TEST = b"PYTEST_CURRENT_TEST"
# Variables libraries keep for themselves, process-wide by design: left out of the comparison.
_NOT_OURS = (
    _CURRENT_TEST,
    b"__DASK_PARENT_PID",  # distributed, set when it is imported (its process titles)
    b"_MLFLOW_TELEMETRY_SESSION_ID",  # MLflow's telemetry, set and unset as it pleases
    b"_RJEM_MALLOC_CONF",  # polars, set when it is imported (its allocator's settings)
)


def _environ() -> dict[bytes, bytes]:
    # The encoded mapping under os.environ: copied in well under a microsecond, where
    # os.environ.copy() decodes every name and value (a hundred times slower). pytest names the
    # running test and phase there itself (set inside each phase): left out.
    copy = dict(os.environ._data)  # type: ignore[attr-defined]
    for name in _NOT_OURS:
        copy.pop(name, None)
    return copy


def _ours(handler: logging.Handler) -> bool:
    # pytest's capture handlers come and go with each phase of each test.
    return type(handler).__name__ != "LogCaptureHandler"


def _root_logger() -> tuple[list[logging.Handler], int, int]:
    root = logging.getLogger()
    return [h for h in root.handlers if _ours(h)], root.level, logging.root.manager.disable


def _restore_root_logger(before: tuple[list[logging.Handler], int, int]) -> None:
    handlers, level, disable = before
    root = logging.getLogger()
    root.handlers[:] = handlers + [h for h in root.handlers if not _ours(h)]
    root.setLevel(level)
    logging.disable(disable)


def _loop_policy() -> Any:
    # The policy object itself: asyncio.get_event_loop_policy() would make one when none is set.
    return asyncio.events._event_loop_policy  # type: ignore[attr-defined]


def _restore_loop_policy(before: Any) -> None:
    asyncio.events._event_loop_policy = before  # type: ignore[attr-defined]


def _thread_loop() -> Any:
    # The event loop set as this (main) thread's current one.
    policy = asyncio.events._event_loop_policy  # type: ignore[attr-defined]
    local = getattr(policy, "_local", None)
    return getattr(local, "_loop", None)


def _no_closed_loop(before: Any, after: Any) -> bool:
    # Only a closed loop left current is a leak: asyncio.get_event_loop() then answers it to
    # every later test. None (asyncio.run() ends so) and an open one (jupyter_core makes one
    # for the sync jupyter_client API and keeps it for the process) are no harm.
    return after is None or not after.is_closed()


def _restore_thread_loop(before: Any) -> None:
    policy = asyncio.events._event_loop_policy  # type: ignore[attr-defined]
    local = getattr(policy, "_local", None)
    if local is not None:
        local._loop = before if before is not None and not before.is_closed() else None


def _signals() -> tuple[Any, ...]:
    # _signal's getsignal: signal.getsignal wraps each answer in an enum (a few microseconds).
    return tuple(map(_signal.getsignal, _SIGNALS))


def _restore_signals(before: tuple[Any, ...]) -> None:
    if threading.current_thread() is threading.main_thread():
        for sig, handler in zip(_SIGNALS, before, strict=True):
            if handler is not None:  # None: set from C, cannot be put back from Python
                signal.signal(sig, handler)


def _signals_diff(before: tuple[Any, ...], after: tuple[Any, ...]) -> str:
    return ", ".join(
        f"{signal.Signals(s).name}: {b!r} -> {a!r}"
        for s, b, a in zip(_SIGNALS, before, after, strict=True)
        if b != a
    )


# --- OpenTelemetry -------------------------------------------------------------------------


def _tracer_provider() -> Any:
    trace = _module("opentelemetry.trace")
    return None if trace is None else getattr(trace, "_TRACER_PROVIDER", None)


def _restore_tracer_provider(before: Any) -> None:
    trace = _module("opentelemetry.trace")
    provider = getattr(trace, "_TRACER_PROVIDER", None)
    if trace is None or provider is before:
        return
    shutdown = getattr(provider, "shutdown", None)
    if shutdown is not None:
        shutdown()
    trace._TRACER_PROVIDER = before
    # set_tracer_provider() refuses a second provider once one was set: let the next test set
    # its own again, as in a fresh process.
    trace._TRACER_PROVIDER_SET_ONCE._done = before is not None


def _instrumented() -> frozenset[type]:
    module = _module("opentelemetry.instrumentation.instrumentor")
    if module is None:
        return frozenset()
    found = set()
    pending = list(module.BaseInstrumentor.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        instance = cls.__dict__.get("_instance")
        if instance is not None and instance._is_instrumented_by_opentelemetry:
            found.add(cls)
    return frozenset(found)


def _uninstrument(before: frozenset[type]) -> None:
    for cls in _instrumented() - before:
        cls().uninstrument()


# --- flownb's own module-level state --------------------------------------------------------


def _attr(module: str, name: str) -> Callable[[], Any]:
    """A reader of ``module.name`` (``NOT_IMPORTED`` while the module is not imported)."""

    def read() -> Any:
        found = _module(module)
        return NOT_IMPORTED if found is None else getattr(found, name)

    return read


def _set_attr(module: str, name: str) -> Callable[[Any], None]:
    def restore(before: Any) -> None:
        found = _module(module)
        if found is not None and before is not NOT_IMPORTED:
            setattr(found, name, before)

    return restore


def _size(module: str, name: str, missing: Any = NOT_IMPORTED) -> Callable[[], Any]:
    """A reader of ``len(module.name)`` (``missing`` while the module is not imported)."""

    def read() -> Any:
        found = _module(module)
        return missing if found is None else len(getattr(found, name))

    return read


def _keys(module: str, name: str) -> Callable[[], Any]:
    """A reader of the keys of the dict ``module.name``."""

    def read() -> Any:
        found = _module(module)
        return NOT_IMPORTED if found is None else frozenset(getattr(found, name))

    return read


def _drop_new_keys(module: str, name: str) -> Callable[[Any], None]:
    def restore(before: Any) -> None:
        found = _module(module)
        if found is not None and before is not NOT_IMPORTED:
            table = getattr(found, name)
            for key in set(table) - before:
                table.pop(key, None)

    return restore


def _flownbs_own(before: Any, after: Any) -> bool:
    # flownb plugs a cheap reader in at ``import flownb`` and the full one when its module is
    # imported: a reader of flownb's own is no leak, a test's stand-in is.
    return getattr(after, "__module__", "").startswith("flownb")


def _cannot_restore(before: Any) -> None:
    """What a run left in flight cannot be put back from here: the failure names it."""


def _forget(module: str, name: str) -> Callable[[Any], None]:
    """Empty the once-per-process set ``module.name``: the next test warns as a fresh process
    does."""

    def restore(before: Any) -> None:
        found = _module(module)
        if found is not None:
            getattr(found, name).clear()

    return restore


PROBES: tuple[Probe, ...] = (
    Probe("os.environ", _environ, _restore_environ, describe=_environ_diff),
    Probe("the working directory", os.getcwd, os.chdir),
    Probe(
        "sys.path", lambda: list(sys.path), lambda before: sys.path.__setitem__(slice(None), before)
    ),
    # pytest's warnings plugin restores both after each test anyway; a module imported during
    # a test may add a filter of its own (OpenTelemetry's SDK does), which is no leak.
    Probe(
        "warnings.filters or warnings.showwarning",
        lambda: (list(warnings.filters), warnings.showwarning),
        _restore_filters,
        fail=False,
    ),
    Probe(
        "the root logger's handlers, level or logging.disable", _root_logger, _restore_root_logger
    ),
    Probe(
        "asyncio's event-loop policy",
        _loop_policy,
        _restore_loop_policy,
        # None: no policy made yet; asyncio makes the default one on first use.
        same=lambda before, after: before is None and type(after).__module__.startswith("asyncio"),
    ),
    Probe(
        "the main thread's current asyncio event loop (left closed)",
        _thread_loop,
        _restore_thread_loop,
        same=_no_closed_loop,
    ),
    Probe("signal handlers", _signals, _restore_signals, describe=_signals_diff),
    Probe("OpenTelemetry instrumentation left on", _instrumented, _uninstrument),
    Probe(
        "OpenTelemetry's global tracer provider",
        _tracer_provider,
        _restore_tracer_provider,
        fail=False,
    ),
    # Once-per-process warnings: a test that expects one must not depend on no test before it
    # having warned the same.
    Probe(
        "flowfile.lint's warned findings",
        _size("flownb.flowfile.lint", "_warned", 0),
        _forget("flownb.flowfile.lint", "_warned"),
        fail=False,
    ),
    Probe(
        "config.endpoints' warned endpoints",
        _size("flownb.config.endpoints", "_warned", 0),
        _forget("flownb.config.endpoints", "_warned"),
        fail=False,
    ),
    # The readers lower layers are handed at import (endpoint keys, media): replaced, every
    # later test reads keys or images some other way.
    Probe(
        "config.endpoints' key reader",
        _attr("flownb.config.endpoints", "_read_secret"),
        _set_attr("flownb.config.endpoints", "_read_secret"),
        same=_flownbs_own,
    ),
    Probe(
        "show.display's media reader",
        _attr("flownb.show.display", "_read_media"),
        _set_attr("flownb.show.display", "_read_media"),
        same=_flownbs_own,
    ),
    # A run ends by taking itself off these: one left on pins every image written after it
    # (the media cap then keeps them) or makes a later run wait for a call nobody finishes.
    Probe("infra.media's runs in progress", _size("flownb.infra.media", "_runs"), _cannot_restore),
    Probe(
        "providers.calls' stopped calls still finishing",
        _size("flownb.providers.calls", "_finishing"),
        _cannot_restore,
    ),
    # A run on Dask's threaded scheduler keeps its gate in the process for good (the run may be
    # computed again; its meters are the only record of its pace): process-wide, not a test's
    # fault. Taken back off, so the table does not grow over the suite.
    Probe(
        "frames.dask.limits' cluster gates",
        _keys("flownb.frames.dask.limits", "_gates"),
        _drop_new_keys("flownb.frames.dask.limits", "_gates"),
        fail=False,
    ),
    # What a notebook session holds: the extension's state per shell, the form's and the
    # magics' hooks on SIGINT and warnings, the live area of the cell.
    Probe("notebook's loaded-extension state", _size("flownb.notebook", "_state"), _cannot_restore),
    Probe(
        "views.widgets' saved SIGINT handler",
        _attr("flownb.views.widgets", "_previous_sigint"),
        _set_attr("flownb.views.widgets", "_previous_sigint"),
    ),
    # The magics put their warnings hook in place once per process by design, saving the one
    # before it; pytest puts its own back after each test, and the magics save that one anew.
    Probe(
        "notebook.magics' saved showwarning",
        _attr("flownb.notebook.magics", "_passed_on"),
        _set_attr("flownb.notebook.magics", "_passed_on"),
        fail=False,
    ),
    Probe(
        "views.live_text's live area",
        _attr("flownb.views.live_text", "_cell_area"),
        _set_attr("flownb.views.live_text", "_cell_area"),
    ),
)


# Threads that live as long as the process by design: the run log's writer, one per FLOWNB_HOME
# used in it (each test has a home of its own; see runtime/runlog.py's open_runlog).
_PROCESS_WIDE_THREADS = ("flownb-runlog",)


def _non_daemon_threads() -> set[threading.Thread]:
    return {
        t
        for t in threading.enumerate()
        if not t.daemon and not t.name.startswith(_PROCESS_WIDE_THREADS) and t.is_alive()
    }


def _library_pools() -> set[threading.Thread]:
    """Return the threads of pools a library keeps for the process by design: Dask's threaded
    scheduler's (its default pool and one per number of workers asked)."""
    threaded = _module("dask.threaded")
    if threaded is None:
        return set()
    pools = [threaded.default_pool]
    pools += [pool for per_thread in threaded.pools.values() for pool in per_thread.values()]
    return {t for pool in pools if pool is not None for t in getattr(pool, "_threads", ())}


@dataclass(frozen=True)
class Snapshot:
    """The probes' values and the non-daemon threads, before a node was set up."""

    values: tuple[Any, ...]
    threads: frozenset[threading.Thread]


def snapshot() -> Snapshot:
    """Return every probe's value now (cheap: called before every test)."""
    return Snapshot(tuple(p.read() for p in PROBES), frozenset(_non_daemon_threads()))


def check(before: Snapshot) -> list[str]:
    """Put back whatever changed since ``before``; return a line for each change that is a
    test's fault (empty: nothing leaked). Threads cannot be put back: ones still running are
    waited for up to ``THREAD_GRACE`` seconds, then named."""
    problems = []
    for probe, was in zip(PROBES, before.values, strict=True):
        now = probe.read()
        if probe.unchanged(was, now):
            continue
        if probe.fail:
            how = probe.describe(was, now) if probe.describe else f"{was!r} -> {now!r}"
            problems.append(f"{probe.name}: {how}")
        probe.restore(was)
    left = _non_daemon_threads() - before.threads
    if left:
        left -= _library_pools()
    if left:
        # A pool nobody shut down ends its threads once it is collected (a thread pool exits
        # its workers when it is freed), and one held in a reference cycle (MLflow's artifact
        # repositories' download pools) only at the collector's next full run: run it now.
        gc.collect()
    for thread in left:
        thread.join(THREAD_GRACE / len(left))
    left = {t for t in left if t.is_alive()}
    if left:
        problems.append(f"non-daemon threads still running: {sorted(t.name for t in left)}")
    return problems
