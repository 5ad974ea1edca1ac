"""The demo notebooks run under nbval in kernels that inherit this process's environment. Before
the first kernel starts, drop the developer's flownb/OpenAI settings (so the notebooks run
offline, as their saved outputs did) and give them a temporary FLOWNB_HOME. With the suite on
several workers they all go to one worker, in order, as a reader runs them: one home between
them, as their saved outputs assume (see the conftest.py at the root)."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_home: str | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    global _home
    if _home is not None or not str(item.path).endswith(".ipynb"):
        return
    for name in list(os.environ):
        if name.startswith(("FLOWNB_", "OPENAI_")):
            del os.environ[name]
    _home = os.environ["FLOWNB_HOME"] = tempfile.mkdtemp(prefix="flownb-notebooks-")


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _home is not None:
        shutil.rmtree(_home, ignore_errors=True)
