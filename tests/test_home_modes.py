# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""FLOWNB_HOME is private (issue 30): after a run its folders are 0700 and its files 0600,
SQLite's WAL and shared-memory files included, and a home an older flownb left readable is
tightened with one notice."""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import pandas as pd

import flownb
from flownb.infra import private
from flownb.server.keys import KeyStore
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)

FLOW = make_flow(
    {"intro": "Intro about {topic}.", "pic": "A picture of {topic}."},
    ["topic"],
    images=("pic",),
)


def _modes(home: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(home.stat().st_mode)}
    for root, folders, files in os.walk(home):
        for name in folders + files:
            path = Path(root, name)
            found[str(path.relative_to(home))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def _use_everything(home: Path) -> None:
    flow = flownb.load_flow(FLOW)
    flow.run_batch([{"topic": "owls"}, {"topic": "bats"}])
    report = flownb.evaluate({"v": flow}, pd.DataFrame({"topic": ["moths"]}), [], progress=False)
    report.label(0, "v", passed=True)
    KeyStore(home).create("laptop")


def test_after_a_run_every_folder_is_0700_and_every_file_0600(
    fake: FakeOpenAI, flownb_env: Path
) -> None:
    fake.configure(image_format="b64_json")
    os.umask(0o022)  # the usual umask, which made 0755 folders and 0644 files
    _use_everything(flownb_env)
    modes = _modes(flownb_env)
    names = set(modes)
    # What the probe found readable, and SQLite's own files, are all there to be checked.
    assert {"media", "cache.sqlite", "runs.sqlite", "keys.json"} <= names
    assert any(n.endswith("-wal") for n in names) and any(n.endswith("-shm") for n in names)
    assert any(n.startswith("media/") for n in names)
    loose = {
        name: oct(mode)
        for name, mode in modes.items()
        if mode != (0o700 if (flownb_env / name).is_dir() else 0o600)
    }
    assert loose == {}


def test_a_home_left_readable_by_an_older_version_is_tightened_with_one_notice(
    fake: FakeOpenAI, flownb_env: Path
) -> None:
    fake.configure(image_format="b64_json")
    _use_everything(flownb_env)
    for name in _modes(flownb_env):  # as an older flownb left it
        path = flownb_env / name
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    private._secured.clear()  # a new process: it has not looked at this home yet
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flownb.load_flow(FLOW).run_batch([{"topic": "owls"}, {"topic": "eels"}])
        flownb.load_flow(FLOW).run(topic="newts")
    notices = [str(w.message) for w in caught if "could be read by other users" in str(w.message)]
    assert len(notices) == 1 and str(flownb_env) in notices[0]
    assert {oct(m) for m in _modes(flownb_env).values()} <= {oct(0o700), oct(0o600)}
