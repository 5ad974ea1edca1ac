"""The module paths of flownb.evaluation from before it was cut into folders still import, each
name the very object of its new home, with a DeprecationWarning naming where it went."""

from __future__ import annotations

import importlib
import pickle
import warnings

import pytest

import flownb
from flownb.evaluation.record.store import EvalLog
from flownb.evaluation.reports.history import load_report
from flownb.evaluation.reports.report import EvalReport


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("flownb.evaluation.store", "EvalLog", EvalLog),
        ("flownb.evaluation.report", "EvalReport", EvalReport),
        ("flownb.evaluation.history", "load_report", load_report),
    ],
)
def test_an_old_path_gives_the_moved_object_and_says_where_it_went(
    old: str, name: str, new: object
) -> None:
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to flownb\.evaluation\.\w+\.\w+"):
        assert getattr(module, name) is new


def test_a_name_the_new_module_lacks_is_an_attribute_error() -> None:
    module = importlib.import_module("flownb.evaluation.store")
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018


def test_importing_an_old_path_alone_does_not_warn() -> None:
    # Only using a name warns: the import machinery's own probes (__path__, __spec__...) do not.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.reload(importlib.import_module("flownb.evaluation.report"))


def test_a_report_class_pickled_under_the_old_path_loads() -> None:
    # What an earlier version wrote for the class: its old module path (pickle protocol 0).
    old = b"cflownb.evaluation.report\nEvalReport\n."
    assert pickle.loads(pickle.dumps(flownb.EvalReport, protocol=0)) is EvalReport
    with pytest.warns(DeprecationWarning):
        assert pickle.loads(old) is EvalReport
