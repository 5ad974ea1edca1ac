"""How the root conftest.py shares the suite among xdist workers: every unit its cost table and
its families name is one the suite has, so a module renamed or removed cannot silently fall out
of the table (a long unit left out is handed out among the last and ends a run alone)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def schedule(pytestconfig: pytest.Config) -> ModuleType:
    """Return the root conftest.py as pytest loaded it (importing it again by path would make a
    second copy; by the name ``conftest`` it may be the notebooks' one)."""
    root = (ROOT / "conftest.py").resolve()
    found: list[Any] = [
        plugin
        for plugin in pytestconfig.pluginmanager.get_plugins()
        if isinstance(plugin, ModuleType)
        and Path(getattr(plugin, "__file__", None) or "/").resolve() == root
    ]
    assert len(found) == 1, found
    return found[0]


def _test_files() -> set[str]:
    files = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").glob("test_*.py")}
    return files | {p.relative_to(ROOT).as_posix() for p in (ROOT / "notebooks").glob("*.ipynb")}


def test_every_family_member_is_a_test_module(schedule: ModuleType) -> None:
    files = _test_files()
    for family in (schedule._BROWSER, schedule._VENDOR_SDKS):
        assert family and family <= files, sorted(family - files)


def test_every_unit_in_the_cost_table_exists(schedule: ModuleType) -> None:
    units = {schedule.work_unit(path, path) for path in _test_files()}
    assert set(schedule._COST) <= units, sorted(set(schedule._COST) - units)


def test_a_family_member_joins_its_family_and_other_modules_stay_alone(
    schedule: ModuleType,
) -> None:
    assert schedule.work_unit("tests/test_browser.py::test_x", "own") == "browser"
    assert schedule.work_unit("tests/test_cost.py::test_x", "own") == "vendor SDKs"
    assert schedule.work_unit("notebooks/01-quickstart.ipynb::Cell 0", "own") == "notebooks"
    assert schedule.work_unit("tests/test_cli.py::test_x", "tests/test_cli.py") == (
        "tests/test_cli.py"
    )
    assert schedule.unit_cost("tests/test_cli.py", 30) == 3.0
    assert schedule.unit_cost("browser", 11) == schedule._COST["browser"]
