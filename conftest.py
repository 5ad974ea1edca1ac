"""How the suite is shared among pytest-xdist workers (``scripts/test`` runs four, with
``--dist loadscope``): a module goes to one worker, so its module-wide fixtures start once, and
families of modules that belong together go to one worker each, in file order:

- the demo notebooks, which share one FLOWNB_HOME as a reader running them in turn would
  (notebooks/conftest.py);
- the reliability suites, whose secrets suite (it sorts last) scans what the others left in
  the same process for keys (tests/reliability/exposure.py);
- the real-browser modules, which share one JupyterLab server, one chromium and one
  JupyterLab page in it (tests/conftest.py's ``jupyterlab`` and ``chromium``, started once per
  worker; tests/browser/notebook.py's shared tab), where a worker per module would start one
  of each per module;
- the modules that call the Anthropic and Gemini providers in the test process, so one worker
  imports those vendors' SDKs instead of every worker (``_VENDOR_SDKS``).

The units are handed out longest first (``_COST``, then the number of tests), so the last ones
to start are short and the workers end at about the same time; xdist's own order (most tests
first) left the one-test browser modules, the slowest units of all, to the end.

``--shuffle SEED`` runs the suite in another order, the same one for the same seed: the modules
in a shuffled order and, in each module not marked ``keep_order``, its tests too (a notebook's
cells always run in turn). A test that passes only after some other test is found that way
(tests/conftest.py's leak check names what a test left changed).
"""

from __future__ import annotations

import random
import signal
import sys
from collections.abc import Callable
from typing import Any

import pytest

# nbval (loaded here, after the line below, rather than as an entry point: pyproject.toml's
# addopts say "-p no:nbval") imports nbformat, which imports jsonschema, whose format checker
# imports rfc3987_syntax when it is installed (jupyter-events asks for it): that builds Lark
# parsers for the "iri" formats, 1.5 to 2 s of CPU in every pytest process, the controller and
# each xdist worker. Nothing in a pytest process checks an IRI format (flownb uses no JSON
# schema; schemathesis runs in a process of its own, untouched; the JupyterLab and nbconvert
# processes the tests start leave it out too, tests/kernels.py's jupyter_app), and jsonschema
# leaves those formats unchecked when the import fails.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
pytest_plugins = ["nbval.plugin"]

# The real-browser modules (see above): one unit, where they were two halves on two workers.
# With a browser context cheaper by the renderers chromium no longer starts for it
# (tests/browser/chromium.py), the ten tests take about two thirds of a run's length on one
# worker, and one JupyterLab server and one chromium are started instead of two of each (about
# 2 CPU-s each pair, and playwright imported by one worker).
_BROWSER = frozenset(
    f"tests/test_{name}.py"
    for name in (
        "browser", "display_browser", "eval_browser", "server_docs",
        "live_browser", "stream_browser", "review_browser", "pairwise_browser",
    )
)  # fmt: skip

# The modules whose tests run flows through the Anthropic and Gemini providers in this process:
# their first call imports the vendor's SDK (anthropic about 1.2 CPU-s, google-genai 0.3, on
# top of what the rest of the suite imports), paid once per worker that runs one. Spread over
# the four workers, each paid it; as one unit, one worker does.
_VENDOR_SDKS = frozenset(
    f"tests/test_{name}.py"
    for name in (
        "batch_api_anthropic", "cost", "endpoint_keys", "fakes_received", "frontier",
        "gateway_prices", "image_judge", "judges", "model_notes", "money", "params_range",
        "redirect_keys", "streaming", "system_vendors", "tracing_instrumented",
        "tracing_vendors", "vendor_rules", "vendors",
    )
)  # fmt: skip

# A test file's path -> the work unit it joins (None: none of these).
_TOGETHER: tuple[Callable[[str], str | None], ...] = (
    lambda path: "notebooks" if path.endswith(".ipynb") else None,
    lambda path: "tests/test_reliability_*" if path.startswith("tests/test_reliability_") else None,
    lambda path: "browser" if path in _BROWSER else None,
    lambda path: "vendor SDKs" if path in _VENDOR_SDKS else None,
)


# Seconds a work unit takes, roughly (the per-unit wall time of a whole run on two cores busy
# with other work too, rounded; measured again after the browser unit shrank): only the order
# matters. A unit not listed costs a tenth of a second per test, so every unit of ten seconds or
# more is listed: a long one left out (the cache-scale module, at 9 tests, counted 0.9 s) was
# handed out among the last and could end a run alone. tests/test_schedule.py checks that
# every unit named here exists.
_COST = {
    "vendor SDKs": 130,
    "tests/test_reliability_*": 130,
    "browser": 120,
    "notebooks": 85,
    "tests/test_cache_scale.py": 75,
    "tests/test_docs.py": 55,
    "tests/test_dask.py": 42,
    "tests/test_warmup.py": 42,
    "tests/test_schemathesis.py": 39,
    "tests/test_mlflow.py": 35,
    "tests/test_serve_command.py": 29,
    "tests/test_batch_api.py": 27,
    "tests/test_live_kernel.py": 25,
    "tests/test_evaluate.py": 22,
    "tests/test_template.py": 21,
    "tests/test_frame_bulk.py": 21,
    "tests/test_repeats.py": 21,
    "tests/test_openai_throughput.py": 18,
    "tests/test_server_hardening.py": 17,
    "tests/test_inflight.py": 17,
    "tests/test_cli_help.py": 16,
    "tests/test_binder.py": 16,
    "tests/test_labels.py": 13,
    "tests/test_threads.py": 12,
    "tests/test_architecture.py": 12,
    "tests/test_server_bounded_work.py": 11,
    "tests/test_live_text.py": 11,
    "tests/test_provider_plugins.py": 11,
    "tests/test_cli_stream.py": 10,
    "tests/test_import_laziness.py": 10,
}


def unit_cost(unit: str, tests: int) -> float:
    """Return the rough seconds work unit ``unit`` of ``tests`` tests takes (see ``_COST``)."""
    return _COST.get(unit, 0.1 * tests)


def work_unit(nodeid: str, own: str) -> str:
    """Return the work unit of the test ``nodeid`` (``own``: xdist's, its module or class)."""
    path = nodeid.split("::", 1)[0]
    return next((unit for joins in _TOGETHER if (unit := joins(path)) is not None), own)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--shuffle SEED`` (off by default)."""
    parser.addoption(
        "--shuffle",
        metavar="SEED",
        type=int,
        default=None,
        help="run the test modules, and the tests in each module not marked keep_order, in an "
        "order shuffled reproducibly by SEED (an integer)",
    )


def shuffled(items: list[pytest.Item], seed: int) -> list[pytest.Item]:
    """Return ``items`` reordered by ``seed``: the modules (files) shuffled, then the tests
    inside each one shuffled unless it is a notebook or marked ``keep_order``. The same seed
    gives the same order in every process (xdist's workers must collect alike)."""
    rng = random.Random(seed)
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    order = list(modules)
    rng.shuffle(order)
    result: list[pytest.Item] = []
    for path in order:
        tests = modules[path]
        # Cells of a notebook build on each other; a module says so with keep_order.
        if not path.endswith(".ipynb") and tests[0].get_closest_marker("keep_order") is None:
            rng.shuffle(tests)
        result.extend(tests)
    return result


@pytest.hookimpl(trylast=True)  # after pytest's own grouping by fixture, which it would undo
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--shuffle SEED``, reorder the collected tests (see ``shuffled``)."""
    seed = config.getoption("shuffle")
    if seed is not None:
        items[:] = shuffled(items, seed)


def pytest_report_header(config: pytest.Config) -> str | None:
    """Name the seed in the header, so a failing order can be run again."""
    seed = config.getoption("shuffle")
    return None if seed is None else f"shuffled: --shuffle {seed}"


def pytest_configure(config: pytest.Config) -> None:
    """Let SIGINT raise ``KeyboardInterrupt`` here (and so in each xdist worker, which runs this
    too) even when the suite was started with it ignored, as a non-interactive shell starts a
    background job (``cmd &``): the Ctrl-C tests send it to their own process, and with it
    ignored they would fail or hang."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line(
        "markers", "keep_order: --shuffle keeps this module's tests in their written order"
    )


@pytest.hookimpl(optionalhook=True)  # an xdist hook: harmless when xdist is not installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadscope``, xdist's own scheduler with the units widened and ordered as
    above (under ``--shuffle``, in the shuffled order instead); other modes are left alone."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Together(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid, super()._split_scope(nodeid))

        def _assign_work_unit(self, node: Any) -> None:
            # The queue is complete before the first unit is handed out (schedule() fills it,
            # then assigns): order it once, longest first.
            if not getattr(self, "_longest_first", False) and config.getoption("shuffle") is None:
                units = sorted(self.workqueue.items(), key=lambda u: -unit_cost(u[0], len(u[1])))
                self.workqueue.clear()
                self.workqueue.update(units)
                self._longest_first = True
            super()._assign_work_unit(node)

    return Together(config, log)
