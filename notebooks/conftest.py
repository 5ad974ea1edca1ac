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


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    global _home
    if _home is not None or not str(item.path).endswith(".ipynb"):
        return
    for name in list(os.environ):
        if name.startswith(("FLOWNB_", "OPENAI_")):
            del os.environ[name]
    _home = os.environ["FLOWNB_HOME"] = tempfile.mkdtemp(prefix="flownb-notebooks-")
    # nbval's kernels get an IPython folder (history in memory) and a Jupyter runtime folder of
    # their own: nothing of a kernel's start-up is shared with the other workers' kernels.
    global _kernels
    _kernels = tempfile.mkdtemp(prefix="flownb-kernels-")
    profile = Path(_kernels) / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_kernel_config.py").write_text(
        "c.HistoryManager.hist_file = ':memory:'\n", encoding="utf-8"
    )
    os.environ["IPYTHONDIR"] = str(profile.parent)
    os.environ["JUPYTER_RUNTIME_DIR"] = str(Path(_kernels) / "runtime")


def pytest_sessionfinish(session: pytest.Session) -> None:
    for folder in (_home, _kernels):
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
