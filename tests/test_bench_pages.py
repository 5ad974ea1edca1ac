"""The benchmark pages: every figure in README's "How fast" and docs/benchmarks.md sits in a
block ``python -m bench --write`` generates, and writing a block replaces it whole."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS
from bench.pages import BRIEF, PAGES, blocks, write

ROOT = Path(__file__).resolve().parent.parent
# A measured figure: a ratio ("1.2x") or a size; aims are written without a unit, and what a
# benchmark sets up (50 ms answers, 10% of calls refused) is not a figure it measured.
FIGURE = re.compile(r"\b\d+(?:\.\d+)?x\b|\b\d+(?:\.\d+)?\s?(?:MiB|KiB|bytes)\b")


def outside_blocks(text: str) -> str:
    """Return ``text`` without the bodies of its generated blocks."""
    kept, at = [], 0
    for block in blocks(text):
        kept.append(text[at : block.start])
        at = block.end
    return "".join(kept) + text[at:]


def how_fast(readme: str) -> str:
    return readme[readme.index("## How fast") : readme.index("\n## ", readme.index("## How fast"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_pages_markers_are_well_formed_and_name_benchmarks(page: Path) -> None:
    found = blocks(page.read_text(encoding="utf-8"))
    assert found
    for block in found:
        bench, _, brief = block.name.partition(":")
        assert bench in BENCHMARKS
        assert not brief or bench in BRIEF


def test_every_benchmark_has_a_block_on_the_benchmarks_page() -> None:
    names = {b.name for b in blocks((ROOT / "docs" / "benchmarks.md").read_text())}
    assert names == set(BENCHMARKS)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_figure_sits_in_a_generated_block(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    if page.name == "README.md":
        text = how_fast(text)
    assert FIGURE.findall(outside_blocks(text)) == []


@pytest.mark.parametrize(
    "text, problem",
    [
        ("<!-- bench:start scaling -->", "no end"),
        ("<!-- bench:end scaling -->", "without its start"),
        ("<!-- bench:start a -->\n<!-- bench:start b -->", "inside"),
        (
            "<!-- bench:start a --><!-- bench:end a --><!-- bench:start a --><!-- bench:end a -->",
            "twice",
        ),
    ],
)
def test_broken_markers_are_named(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        blocks(text)


def test_writing_replaces_the_blocks_whole_with_load_and_date(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n<!-- bench:start scaling -->\nold 9.9x\n<!-- bench:end scaling -->\n\n"
        "<!-- bench:start scaling:brief -->\n<!-- bench:end scaling:brief -->\nend 1.0x\n"
    )
    label = BRIEF["scaling"][0]
    figures = {label: 1.04, "only on the full page": 2.5}
    assert write("scaling", figures, loads=(0.5, 1.25), pages=(page,)) == [page]
    text = page.read_text()
    full, brief = (text[b.start : b.end] for b in blocks(text))
    assert "old" not in text and text.startswith("# Title") and text.endswith("end 1.0x\n")
    assert "load average 0.50 before / 1.25 after" in full and " UTC" in full
    assert f"| {label} | 1.04 |" in full and "| only on the full page | 2.5 |" in full
    assert f"| {label} | 1.04 |" in brief and "only on the full page" not in brief
    assert write("engine_overhead", figures, loads=(0, 0), pages=(page,)) == []
