"""The demo notebooks run under nbval in kernels that inherit this process's environment. Before
the first kernel starts, drop the developer's flownb/OpenAI settings (so the notebooks run
offline, as their saved outputs did) and give them a temporary FLOWNB_HOME. With the suite on
several workers (pytest-xdist, ``--dist loadscope``) they all go to one worker, in order, as a
reader runs them: one home between them, as their saved outputs assume."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

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


@pytest.hookimpl(optionalhook=True)  # an xdist hook: harmless when xdist is not installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadscope``: every notebook in one work unit (xdist's own scheduler, with
    the notebooks' scope widened from one file to all of them); other modes are left alone."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class NotebooksTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "notebooks" if path.endswith(".ipynb") else super()._split_scope(nodeid)

    return NotebooksTogether(config, log)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _home is not None:
        shutil.rmtree(_home, ignore_errors=True)
