# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""The media folder's size cap (issue 30): enforced as images are written, the least recently
used deleted first, and never an image a cache entry still names without that entry."""

from __future__ import annotations

import json
import re
import sqlite3
import warnings
from pathlib import Path

import pytest

import flownb
from flownb.config.settings import DEFAULT_MEDIA_MAX, resolve_run_config
from flownb.errors import ConfigError
from flownb.infra.media import MEDIA_NAME, MediaStore
from flownb.runtime.cache import CACHE_FILE
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)

PICTURE = make_flow({"pic": "A picture of {topic}."}, ["topic"], images=("pic",))


def _images(home: Path) -> dict[str, int]:
    return {
        p.name: p.stat().st_size for p in (home / "media").iterdir() if MEDIA_NAME.fullmatch(p.name)
    }


def _cached_media(home: Path) -> list[str]:
    db = sqlite3.connect(home / CACHE_FILE)
    try:
        return [json.loads(v).get("media") for (v,) in db.execute("SELECT value FROM calls")]
    finally:
        db.close()


def test_the_media_folder_stays_under_its_cap_and_the_cache_names_only_kept_images(
    fake: FakeOpenAI, flownb_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.configure(image_format="b64_json")
    flow = flownb.load_flow(PICTURE)
    flow.run(topic="size probe")
    size = max(_images(flownb_env).values())
    cap = 6 * size
    monkeypatch.setenv("FLOWNB_MEDIA_MAX", str(cap))
    flow = flownb.load_flow(PICTURE)
    first = flow.run(topic="t0")["pic"]
    for i in range(1, 30):
        flow.run(topic=f"t{i}")
        if i % 3 == 0:  # t0 used again: kept while images written after it go
            again = flow.run(topic="t0")
            assert again.cached == {"pic"}, (i, sorted(_images(flownb_env).values()), size)
        held = _images(flownb_env)
        assert sum(held.values()) <= cap, (i, held)
    held = _images(flownb_env)
    assert 4 <= len(held) <= 6
    assert Path(first.removeprefix("file://")).name in held  # used 2 images ago
    named = _cached_media(flownb_env)
    # Every cache entry names an image that is there, and every kept image has its entry.
    assert sorted(n for n in named if n is not None) == sorted(held)
    calls = len(fake.requests)
    assert flow.run(topic="t29").cached == {"pic"} and len(fake.requests) == calls
    assert flow.run(topic="t1").cached == set() and len(fake.requests) == calls + 1


def test_a_store_alone_evicts_least_recently_used_and_keeps_the_one_written(
    tmp_path: Path,
) -> None:
    store = MediaStore(tmp_path / "media", max_bytes=3000)
    names = [store.save(store.name_for(str(i).encode(), "png"), b"x" * 1000) for i in range(3)]
    assert len(_images(tmp_path)) == 3
    big = store.save(store.name_for(b"big", "png"), b"y" * 5000)  # over the cap alone
    assert list(_images(tmp_path)) == [big]
    assert not any((tmp_path / "media" / n).exists() for n in names)


def test_the_cap_is_a_documented_setting_refused_in_one_line_when_wrong(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert resolve_run_config().media_max == DEFAULT_MEDIA_MAX == 1024**3
    monkeypatch.setenv("FLOWNB_MEDIA_MAX", "20M")
    assert resolve_run_config().media_max == 20 * 1024**2
    monkeypatch.setenv("FLOWNB_MEDIA_MAX", "0")
    assert resolve_run_config().media_max == 0
    monkeypatch.setenv("FLOWNB_MEDIA_MAX", "lots")
    with pytest.raises(ConfigError, match="FLOWNB_MEDIA_MAX must be a size"):
        resolve_run_config()


def _alive(urls: list[str]) -> int:
    return sum(Path(u.removeprefix("file://")).is_file() for u in urls)


def _cap_notices(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "FLOWNB_MEDIA_MAX" in str(w.message)]


def test_a_run_keeps_every_image_it_returns_and_says_once_what_the_cap_did(
    fake: FakeOpenAI, flownb_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.configure(image_format="b64_json")
    flownb.load_flow(PICTURE).run(topic="size probe")
    probe = set(_images(flownb_env))
    cap = 3 * max(_images(flownb_env).values())
    monkeypatch.setenv("FLOWNB_MEDIA_MAX", str(cap))
    flow = flownb.load_flow(PICTURE)
    runs: list[list[str]] = []
    for batch in ("a", "b"):
        before = set(_images(flownb_env))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = flow.run_batch([{"topic": f"{batch}{i}"} for i in range(10)])
        urls = [r["pic"] for r in results]
        runs.append(urls)
        # Every image the run returned is there as it ends, though the folder is over its cap.
        assert _alive(urls) == 10
        assert sum(_images(flownb_env).values()) > cap
        gone = len(before - set(_images(flownb_env)))
        assert gone >= 1  # earlier runs' images made room first
        (notice,) = _cap_notices(caught)  # one notice for the run, not one per image
        assert "over its cap" in notice
        deleted = re.search(r"(\d+) images? of earlier runs were deleted", notice)
        assert deleted is not None and int(deleted.group(1)) == gone, notice
    assert not probe & set(_images(flownb_env))
    # The second run's images made room by deleting the first run's, never its own.
    assert _alive(runs[0]) < 10 and _alive(runs[1]) == 10

    # A run within the cap says nothing.
    monkeypatch.setenv("FLOWNB_MEDIA_MAX", "1G")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flownb.load_flow(PICTURE).run_batch([{"topic": f"c{i}"} for i in range(3)])
    assert _cap_notices(caught) == []
