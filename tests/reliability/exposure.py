"""What the reliability suites leave behind, for the secrets suite to scan at the end.

Each suite registers the keys it used and the places a key could leak to: FLOWNB_HOME folders,
server logs, captured CLI output, error bodies. The secrets suite (its file sorts last among the
reliability suites) scans everything registered in the same pytest session, plus its own run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Exposure", "find_leaks", "record", "recorded"]


@dataclass
class Exposure:
    """Keys a suite used and where they must not appear."""

    suite: str
    secrets: set[str] = field(default_factory=set)
    paths: list[Path] = field(default_factory=list)  # files or folders (scanned recursively)
    texts: list[str] = field(default_factory=list)  # error bodies, captured output


_RECORDED: list[Exposure] = []


def record(exposure: Exposure) -> None:
    """Register what a suite used, for the secrets suite."""
    _RECORDED.append(exposure)


def recorded() -> list[Exposure]:
    """Return every exposure registered so far in this session."""
    return list(_RECORDED)


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        return [p for p in sorted(path.rglob("*")) if p.is_file()]
    return []


def find_leaks(exposure: Exposure) -> list[str]:
    """Return where any of the exposure's secrets appears in plain text (bytes of its UTF-8
    encoding), as ``"<secret prefix>... in <place>"`` lines; ``[]`` means no leak."""
    needles = {s: s.encode("utf-8") for s in exposure.secrets if s}
    leaks: list[str] = []
    for path in exposure.paths:
        for f in _files(path):
            data = f.read_bytes()
            leaks.extend(f"{s[:6]}... in {f}" for s, b in needles.items() if b in data)
    for i, text in enumerate(exposure.texts):
        leaks.extend(f"{s[:6]}... in text #{i}: {text[:200]!r}" for s in needles if s in text)
    return leaks
