"""The demo notebooks run under nbval in kernels that inherit this process's environment. Before
the first kernel starts, drop the developer's flownb/OpenAI settings (so the notebooks run
offline, as their saved outputs did) and give them a temporary FLOWNB_HOME. With the suite on
several workers they all go to one worker, in order, as a reader runs them: one home between
them, as their saved outputs assume (see the conftest.py at the root)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

_home: str | None = None
_kernels: str | None = None
# While notebooks run: the environment's values they replaced (None: unset), put back after the
# last notebook in a row, so a test that runs after them on the same worker (they are one work
# unit, but other units share the worker, and --shuffle interleaves them under -n 0) starts from
# the environment it would have had without them; the leak check (tests/conftest.py) charged
# what they left to the session whenever a test had run before them.
_saved: dict[str, str | None] | None = None


def _is_notebook(item: pytest.Item | None) -> bool:
    return item is not None and str(item.path).endswith(".ipynb")


def _enter() -> None:
    """Give the notebooks their environment: no developer settings, their one FLOWNB_HOME and
    kernel folders (made the first time), remembering what it replaced."""
    global _home, _kernels, _saved
    if _home is None:
        _home = tempfile.mkdtemp(prefix="flownb-notebooks-")
        # nbval's kernels get an IPython folder (history in memory) and a Jupyter runtime folder
        # of their own: nothing of a kernel's start-up is shared with the other workers' kernels.
        _kernels = tempfile.mkdtemp(prefix="flownb-kernels-")
        profile = Path(_kernels) / "ipython" / "profile_default"
        profile.mkdir(parents=True)
        (profile / "ipython_kernel_config.py").write_text(
            "c.HistoryManager.hist_file = ':memory:'\n", encoding="utf-8"
        )
    assert _kernels is not None
    own = {
        "FLOWNB_HOME": _home,
        "IPYTHONDIR": str(Path(_kernels) / "ipython"),
        "JUPYTER_RUNTIME_DIR": str(Path(_kernels) / "runtime"),
    }
    dropped = [name for name in os.environ if name.startswith(("FLOWNB_", "OPENAI_"))]
    _saved = {name: os.environ.get(name) for name in [*dropped, *own]}
    for name in dropped:
        del os.environ[name]
    os.environ.update(own)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if _is_notebook(item) and _saved is None:
        _enter()


@pytest.hookimpl(trylast=True)  # after nbval's own teardown, which stops the notebook's kernel
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    global _saved
    if _saved is None or _is_notebook(nextitem):
        return
    for name, value in _saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _saved = None


def pytest_sessionfinish(session: pytest.Session) -> None:
    for folder in (_home, _kernels):
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
