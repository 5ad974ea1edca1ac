"""The lock of the test environment (requirements/test.txt, installed exactly by scripts/test)
agrees with pyproject.toml, so neither can drift without the suite saying so.

Agreeing means: every requirement pyproject.toml declares (core and every extra) is pinned in the
lock at a version its specifier allows; every package the lock says it has *because of* flownb is
still one pyproject.toml asks for; and the lock was made by the documented command. Refresh it
with the command in the docs page docs/development.md, section "The test environment's lock".
"""

from __future__ import annotations

import re
import tomllib
from itertools import pairwise
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements/test.txt"
COMMAND = "uv pip compile pyproject.toml --all-extras --universal --python-version 3.11"

# A pin line: name==version, maybe a marker, and the " \" that continues it onto its hashes.
_PIN = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;]+)\s*(?:;\s*(.+?))?\s*\\?$"
)


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [Requirement(r) for r in project["dependencies"]]
    for extra in project.get("optional-dependencies", {}).values():
        found += [Requirement(r) for r in extra]
    return found


def _locked() -> tuple[dict[str, list[tuple[Version, str | None]]], set[str]]:
    """Return (name -> [(version, marker)], names the lock says flownb itself brings in)."""
    pins: dict[str, list[tuple[Version, str | None]]] = {}
    direct: set[str] = set()
    current: str | None = None
    for line in LOCK.read_text().splitlines():
        match = _PIN.match(line)
        if match:
            current = canonicalize_name(match.group(1))
            pins.setdefault(current, []).append((Version(match.group(2)), match.group(3)))
        elif current and re.search(r"#\s+(via\s+)?flownb \(pyproject\.toml\)", line):
            direct.add(current)
    return pins, direct


def test_the_lock_was_made_by_the_documented_command() -> None:
    header = LOCK.read_text().splitlines()[:3]
    assert any(COMMAND in line for line in header), header
    assert COMMAND in (ROOT / "docs" / "development.md").read_text()


def test_every_declared_requirement_is_pinned_within_its_bounds() -> None:
    pins, _ = _locked()
    for req in _declared():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} is in pyproject.toml but not in {LOCK.name}: refresh the lock"
        for version, _marker in pins[name]:
            assert req.specifier.contains(version, prereleases=True), (
                f"{LOCK.name} pins {name}=={version}, outside pyproject.toml's {req}: "
                "refresh the lock"
            )


def test_the_lock_brings_in_nothing_pyproject_no_longer_asks_for() -> None:
    _, direct = _locked()
    declared = {canonicalize_name(r.name) for r in _declared()}
    stale = sorted(direct - declared)
    assert not stale, f"{LOCK.name} still pins {stale} for flownb: refresh the lock"
    assert direct, "the lock names no package as flownb's own: was it made from pyproject.toml?"


def test_the_lock_is_pinned_exactly() -> None:
    pins, _ = _locked()
    text = LOCK.read_text().splitlines()
    # Requirement lines start at the margin; the indented lines under them are their hashes.
    lines = [ln for ln in text if ln.strip() and not ln.startswith((" ", "#"))]
    # Every requirement line is an exact pin (no ranges, URLs or editable paths).
    assert len(lines) == sum(len(v) for v in pins.values()), [
        ln for ln in lines if not _PIN.match(ln)
    ]
    # ... and every pin names the hashes of its files, so a changed download is refused.
    hashed = sum(1 for a, b in pairwise(text) if _PIN.match(a) and "--hash=sha256:" in b)
    assert hashed == len(lines), "a pin without hashes: refresh the lock with --generate-hashes"
