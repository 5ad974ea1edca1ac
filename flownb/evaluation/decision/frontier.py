"""The vendor decision as a picture: each variant's quality against its price per row, with the
quality's 95% interval, speed as the points' colour, the Pareto-efficient variants joined and the
dominated ones faded, and one sentence saying which variants are efficient and which pairs the
data cannot tell apart.

A variant is **dominated** when another is at least as good and at most as dear, and better or
cheaper (quality and price per row as the summary gives them; a variant with no known quality or
price is on no frontier). Two variants **cannot be told apart** when their quality intervals
overlap or the paired test over the same rows is not significant (p >= 0.05).
"""

from __future__ import annotations

import html
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError
from ..figures import stats

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.colors import Colormap
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation
    from matplotlib.transforms import Bbox

__all__ = ["Frontier", "Point", "build_frontier", "pareto"]

ALPHA = 0.05
# The SVG group holding the points (one marker per variant): what a reader or a test finds.
POINTS_ID = "frontier-points"
# How much of viridis (reversed) the speeds use, from its dark end: its last quarter is yellow
# and green too light to see on white.
LIGHTEST = 0.6
# The opacity of a dominated variant's point (the efficient ones: 1), and every point's edge.
FADED = 0.45
EDGE = "#303030"


@dataclass(frozen=True)
class Point:
    """One variant on the plane: its quality with the 95% interval, price per row (US dollars)
    and speed (the ``speed`` column's value, NaN when not known or not asked)."""

    variant: str
    quality: float
    low: float
    high: float
    price: float
    speed: float

    @property
    def known(self) -> bool:
        """Whether both the quality and the price are known (needed to be on a frontier)."""
        return not (math.isnan(self.quality) or math.isnan(self.price))


def pareto(points: Sequence[Point]) -> list[str]:
    """Return the variants no other variant dominates (higher or equal quality at a lower or
    equal price, strictly better in one), ordered by price; unknown points are left out."""
    known = [p for p in points if p.known]
    efficient = [
        p
        for p in known
        if not any(
            o.quality >= p.quality
            and o.price <= p.price
            and (o.quality > p.quality or o.price < p.price)
            for o in known
        )
    ]
    return [p.variant for p in sorted(efficient, key=lambda p: (p.price, -p.quality))]


def _overlap(a: Point, b: Point) -> bool:
    if any(math.isnan(x) for x in (a.low, a.high, b.low, b.high)):
        return True  # no interval: nothing tells them apart
    return a.low <= b.high and b.low <= a.high


class Frontier:
    """Quality against price per row for every variant of an evaluation.

    Attributes:
        points: one :class:`Point` per variant, in the report's order.
        quality, price, speed: the summary columns drawn (``speed`` None: not drawn).
        efficient: the variants on the Pareto frontier, cheapest first.
        ties: the pairs the data cannot tell apart, each ``(a, b, why)``.
    """

    def __init__(
        self,
        points: Sequence[Point],
        *,
        quality: str,
        price: str,
        speed: str | None,
        ties: Sequence[tuple[str, str, str]],
    ) -> None:
        self.points = list(points)
        self.quality = quality
        self.price = price
        self.speed = speed
        self.efficient = pareto(self.points)
        self.ties = list(ties)

    @property
    def dominated(self) -> list[str]:
        """The variants with a known quality and price that are not on the frontier."""
        return [p.variant for p in self.points if p.known and p.variant not in self.efficient]

    @property
    def sentence(self) -> str:
        """Return the finding in one sentence: the frontier, and the pairs not told apart."""
        unknown = [p.variant for p in self.points if not p.known]
        text = f"On the frontier of {self.quality} against {self.price}: " + (
            ", ".join(self.efficient) if self.efficient else "no variant (no known prices)"
        )
        if self.dominated:
            text += f" (dominated: {', '.join(self.dominated)})"
        if unknown:
            text += f" (not placed, quality or price unknown: {', '.join(unknown)})"
        if self.ties:
            pairs = "; ".join(f"{a} and {b} ({why})" for a, b, why in self.ties)
            text += f"; the data cannot tell apart {pairs}."
        elif len(self.points) > 1:
            text += "; every pair differs (intervals apart and paired test significant)."
        else:
            text += "."
        return text

    # -- drawing ---------------------------------------------------------------------------------

    def figure(self) -> Figure:
        """Return the matplotlib figure (made without pyplot: no global state, any thread)."""
        from matplotlib.figure import Figure

        fig = Figure(figsize=(6.4, 4.2))
        ax = fig.add_subplot()
        placed = [p for p in self.points if p.known]
        if not placed:
            ax.text(0.5, 0.5, "no variant with a known quality and price", ha="center")
            return fig
        speeds = [p.speed for p in placed]
        known_speeds = [s for s in speeds if not math.isnan(s)]
        import matplotlib as mpl

        cmap = speed_colours()
        low_s, high_s = (min(known_speeds), max(known_speeds)) if known_speeds else (0.0, 1.0)
        norm = mpl.colors.Normalize(low_s, high_s if high_s > low_s else low_s + 1.0)
        colours = []
        labels = []
        for p in placed:
            r, g, b, _ = cmap(norm(p.speed)) if not math.isnan(p.speed) else (0.5, 0.5, 0.5, 1)
            alpha = 1.0 if p.variant in self.efficient else FADED  # dominated ones faded
            rgba = (r, g, b, alpha)
            colours.append(rgba)
            below = p.quality - p.low if not math.isnan(p.low) else 0.0
            above = p.high - p.quality if not math.isnan(p.high) else 0.0
            ax.errorbar(
                [p.price],
                [p.quality],
                yerr=[[max(below, 0.0)], [max(above, 0.0)]],
                fmt="none",
                ecolor=rgba,
                capsize=3,
            )
            # The dearest variant's name goes to the left of its point, inside the plot.
            left = p.price >= max(q.price for q in placed)
            labels.append(
                ax.annotate(
                    p.variant, (p.price, p.quality), xytext=(-6 if left else 6, 4),
                    textcoords="offset points", ha="right" if left else "left",
                    fontsize=8, alpha=max(alpha, 0.75),
                )
            )  # fmt: skip
        line = sorted((p for p in placed if p.variant in self.efficient), key=lambda p: p.price)
        ax.plot([p.price for p in line], [p.quality for p in line], "-", color="0.35", lw=1)
        # A dark edge on every point: a point is seen on white whatever its fill and fading.
        dots = ax.scatter(
            [p.price for p in placed],
            [p.quality for p in placed],
            c=colours,
            s=60,
            zorder=3,
            edgecolors=EDGE,
            linewidths=0.8,
        )
        dots.set_gid(POINTS_ID)
        if self.speed is not None and known_speeds:
            bar = fig.colorbar(mpl.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax)
            bar.set_label(f"{self.speed} (darker: slower)", fontsize=8)
        from matplotlib.ticker import MaxNLocator

        from ...show.meter import usd

        # Prices are long labels ("$0.000125"): few ticks, so they never run into each other.
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4, min_n_ticks=2))
        ax.xaxis.set_major_formatter(lambda x, _: usd(x))
        ax.tick_params(axis="x", labelsize=8)
        ax.set_xlabel(self.price)
        ax.set_ylabel(f"{self.quality} (95% interval)")
        ax.grid(alpha=0.3)
        ax.margins(x=0.15, y=0.1)
        fig.tight_layout()
        _spread_labels(fig, labels)
        return fig

    def svg(self) -> str:
        """Return the picture as SVG text (text kept as text, so names can be read and found)."""
        import matplotlib as mpl

        buffer = io.StringIO()
        with mpl.rc_context({"svg.fonttype": "none", "svg.hashsalt": "flownb"}):
            self.figure().savefig(buffer, format="svg", metadata={"Date": None})
        return buffer.getvalue()

    def save(self, path: str | Path) -> Path:
        """Write the picture to ``path`` (``.png`` or ``.svg``); return the path.

        Raises:
            ConfigError: another file extension.
        """
        p = Path(path)
        suffix = p.suffix.lower()
        if suffix == ".svg":
            p.write_text(self.svg(), encoding="utf-8")
        elif suffix == ".png":
            self.figure().savefig(p, format="png", dpi=150, metadata={"Software": None})
        else:
            raise ConfigError(f"a frontier is saved as .png or .svg, not {p.name!r}")
        return p

    # No _repr_svg_: front ends would keep the SVG beside the HTML, and its colours (speeds
    # measured afresh) would differ on every run of a saved notebook.
    def _repr_html_(self) -> str:
        from ..html.decision import svg_img

        picture = svg_img(self.svg(), "quality against price per row, one point per variant")
        return f"<div>{picture}<p>{html.escape(self.sentence)}</p></div>"

    def __repr__(self) -> str:
        return f"<Frontier {self.quality} vs {self.price}: {self.sentence}>"


def speed_colours() -> Colormap:
    """Return the points' colour map: viridis reversed (the fastest lightest) and cut before
    its yellow end, so the fastest point stays visible on white."""
    import matplotlib as mpl
    import numpy as np

    return mpl.colors.ListedColormap(
        mpl.colormaps["viridis_r"](np.linspace(1.0 - LIGHTEST, 1.0, 256)), name="flownb_speed"
    )


def _spread_labels(fig: Figure, labels: list[Annotation]) -> None:
    """Move the variants' names apart where they would overlap (two variants at the same or
    near points): each name, in turn, is tried at offsets above and below its point, further
    each time, until its box meets no name placed before it. Measured with the figure's own
    renderer (text sizes are in points, so what does not overlap here does not in a saved
    picture at another resolution)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    placed: list[Bbox] = []
    for label in labels:
        x, y = label.xyann
        for step in range(40):
            shift = (step + 1) // 2 * 10 * (1 if step % 2 else -1)  # 0, +10, -10, +20, ...
            label.xyann = (x, y + shift)
            box = label.get_window_extent(renderer)
            if not any(box.overlaps(other) for other in placed):
                break
        placed.append(label.get_window_extent(renderer))


def build_frontier(
    summary: pd.DataFrame,
    prices: pd.Series,
    *,
    quality: str,
    price: str,
    speed: str | None,
    paired: Callable[[str, str], float],
) -> Frontier:
    """Return the :class:`Frontier` of ``summary`` (one row per variant): ``quality`` names the
    quality column (with ``_low``/``_high``), ``prices`` the price per row, ``speed`` a column or
    None; ``paired(a, b)`` the paired test's p-value of two variants' quality.

    Raises:
        ConfigError: ``quality`` or ``speed`` is not a column the summary has.
    """
    qualities = [c[: -len("_low")] for c in summary.columns if c.endswith("_low")]
    if quality not in qualities:
        raise ConfigError(
            f"no quality {quality!r}; choose one of {', '.join(map(repr, qualities))}"
        )
    if speed is not None and speed not in summary.columns:
        raise ConfigError(f"no speed column {speed!r} in the summary; try 'latency_p95_s'")
    points = [
        Point(
            str(v),
            float(row[quality]),
            float(row[f"{quality}_low"]),
            float(row[f"{quality}_high"]),
            float(prices[v]),
            float(row[speed]) if speed is not None else math.nan,
        )
        for v, row in summary.iterrows()
    ]
    ties = []
    for a, b in combinations(points, 2):
        if _overlap(a, b):
            ties.append((a.variant, b.variant, "intervals overlap"))
            continue
        p = paired(a.variant, b.variant)
        if math.isnan(p) or p >= ALPHA:
            ties.append((a.variant, b.variant, f"paired test p = {p:.2g}"))
    return Frontier(points, quality=quality, price=price, speed=speed, ties=ties)


def _quality_kind(report: Any, quality: str) -> str:
    """Return how the paired test treats ``quality``: ``"bool"`` for rates, else float."""
    if report.repeats > 1:
        return "float"
    if quality == "pass_rate":
        return "bool"
    info = next((s for s in report.scorers if s.name == quality), None)
    return "bool" if info is not None and (info.rate or info.kind == "bool") else "float"


def report_frontier(report: Any, quality: str, price: str | None, speed: str | None) -> Frontier:
    """Return the frontier of an :class:`~flownb.evaluation.reports.report.EvalReport` (see its
    :meth:`~flownb.evaluation.reports.report.EvalReport.frontier`).

    Raises:
        ConfigError: an unknown quality, price or speed column.
    """
    from .price import price_per_row

    summary = report.summary
    if price is not None and price not in summary.columns:
        raise ConfigError(f"no price column {price!r} in the summary; try 'price_per_row'")
    prices = summary[price].astype(float) if price else price_per_row(summary)
    kind = _quality_kind(report, quality)
    res = report.results

    def paired(a: str, b: str) -> float:
        first, other = res[res["variant"] == a], res[res["variant"] == b]
        return float(stats.paired_p(first, other, quality, kind))

    return build_frontier(
        summary,
        prices,
        quality=quality,
        price=price or "price per row",
        speed=speed,
        paired=paired,
    )
