"""How the suite is shared among pytest-xdist workers (``scripts/test`` runs two, with
``--dist loadscope``): a module goes to one worker, so its module-wide fixtures start once, and
two families of modules that belong together go to one worker each, in file order:

- the demo notebooks, which share one FLOWNB_HOME as a reader running them in turn would
  (notebooks/conftest.py);
- the reliability suites, whose secrets suite (it sorts last) scans what the others left in
  the same process for keys (tests/reliability/exposure.py).
"""

from __future__ import annotations

from typing import Any

import pytest

# A test file's path -> the work unit it joins, when not its own.
_TOGETHER = (
    (lambda path: path.endswith(".ipynb"), "notebooks"),
    (lambda path: path.startswith("tests/test_reliability_"), "tests/test_reliability_*"),
)


def work_unit(nodeid: str, own: str) -> str:
    """Return the work unit of the test ``nodeid`` (``own``: xdist's, its module or class)."""
    path = nodeid.split("::", 1)[0]
    return next((unit for joins, unit in _TOGETHER if joins(path)), own)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: harmless when xdist is not installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadscope``, xdist's own scheduler with the units widened as above; other
    modes are left alone."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Together(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid, super()._split_scope(nodeid))

    return Together(config, log)
