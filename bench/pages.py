"""The benchmark figures on the pages (README.md's "How fast", docs/benchmarks.md), written by
``python -m bench --write`` only.

Every figure sits in a generated block between ``<!-- bench:start NAME -->`` and
``<!-- bench:end NAME -->`` (NAME a benchmark; ``NAME:brief`` for the few figures README shows
of it, :data:`BRIEF`), stamped with the date, the load average before and after the run and the
number of cores. A block is replaced as a whole each time its benchmark is written, so a figure
the code no longer reaches does not stay; a block not yet written says how to write it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["BRIEF", "PAGES", "Block", "blocks", "render", "write"]

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", ROOT / "docs" / "benchmarks.md")
MARKER = re.compile(r"<!-- bench:(start|end) ([a-z_]+(?::brief)?) -->")

# The figures README shows of a benchmark (its labels as the benchmark returns them).
BRIEF: dict[str, tuple[str, ...]] = {
    "scaling": (
        "1,000,000 rows: default / progress=False",
        "1,000,000 rows: default / str.format loop",
        "1,000,000 rows: run log share of progress=False",
        "1,000,000 rows: run log bytes a row on disk",
    ),
    "cached_rerun": (
        "100,000 rows: run_batch, all hits (run log on) / bare loop",
        "flownb per row, 100,000 / 10,000 rows (run log on)",
    ),
}


@dataclass(frozen=True)
class Block:
    """A generated block of a page: its name and the character span of its body."""

    name: str
    start: int
    end: int


def blocks(text: str) -> list[Block]:
    """Return the generated blocks of ``text`` in page order.

    Raises:
        ValueError: a marker without its pair, blocks nested or a name used twice.
    """
    found: list[Block] = []
    opened: tuple[str, int] | None = None
    for m in MARKER.finditer(text):
        kind, name = m.groups()
        if kind == "start":
            if opened is not None:
                raise ValueError(f"block {name!r} starts inside block {opened[0]!r}")
            opened = (name, m.end())
        else:
            if opened is None or opened[0] != name:
                raise ValueError(f"block {name!r} ends without its start")
            found.append(Block(name, opened[1], m.start()))
            opened = None
    if opened is not None:
        raise ValueError(f"block {opened[0]!r} has no end")
    names = [b.name for b in found]
    twice = {n for n in names if names.count(n) > 1}
    if twice:
        raise ValueError(f"blocks named twice: {', '.join(sorted(twice))}")
    return found


def render(
    name: str,
    figures: Mapping[str, float],
    *,
    loads: tuple[float, float],
    when: datetime,
    cores: int | None,
) -> str:
    """Return the body of block ``name`` (``NAME:brief``: only :data:`BRIEF`'s figures): a
    stamp line and a table of ``figures``."""
    bench, _, brief = name.partition(":")
    shown = {k: v for k, v in figures.items() if not brief or k in BRIEF.get(bench, ())}
    stamp = (
        f"`python -m bench {bench}`, {when:%Y-%m-%d %H:%M} UTC, load average "
        f"{loads[0]:.2f} before / {loads[1]:.2f} after, {cores or '?'} cores"
    )
    lines = ["", stamp, "", "| figure | value |", "|---|---|"]
    lines += [f"| {label} | {_value(value)} |" for label, value in shown.items()]
    return "\n".join(lines) + "\n"


def _value(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def write(
    bench: str,
    figures: Mapping[str, float],
    *,
    loads: tuple[float, float],
    pages: tuple[Path, ...] = PAGES,
) -> list[Path]:
    """Replace the blocks of ``bench`` (and ``bench:brief``) in ``pages`` with ``figures``;
    return the pages changed.

    Raises:
        ValueError: a page's markers are not well-formed (see :func:`blocks`).
    """
    when = datetime.now(UTC)
    changed = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        mine = [b for b in blocks(text) if b.name.partition(":")[0] == bench]
        for block in reversed(mine):  # from the end: the earlier spans stay valid
            body = render(block.name, figures, loads=loads, when=when, cores=os.cpu_count())
            text = text[: block.start] + body + text[block.end :]
        if mine:
            page.write_text(text, encoding="utf-8")
            changed.append(page)
    return changed
