"""Line charts of evaluation runs over time, laid out here and drawn as inline SVG by a template.

Only geometry is computed (numbers and the labels to show); the template writes the SVG
elements, so every label passes through Django's autoescaping. No JavaScript, no external assets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

# Distinguishable on white and for the common colour-vision deficiencies (Okabe & Ito).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")

WIDTH, HEIGHT = 640, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 40, 16, 40


@dataclass
class Marker:
    x: float
    y: float
    run_id: int
    label: str


@dataclass
class Series:
    name: str
    color: str
    points: str  # "x,y x,y ..." for a <polyline>
    markers: list[Marker] = field(default_factory=list)


@dataclass
class Chart:
    title: str
    metric: str
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    series: list[Series] = field(default_factory=list)


def _nice_max(value: float) -> float:
    """A round upper bound at or above ``value`` (1, 2, 2.5 or 5 times a power of ten)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= value)


def series_colors(names: Sequence[str]) -> dict[str, str]:
    """A colour per series name, stable for a given list of names."""
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def line_chart(
    *,
    title: str,
    metric: str,
    series: dict[str, list[tuple[datetime, float, int]]],
    colors: dict[str, str],
    y_max: float | None = None,
    y_format: Callable[[float], str] = lambda v: f"{v:g}",
) -> Chart:
    """A chart of ``series`` (name -> [(time, value, run id)], oldest first) against time.

    The y axis starts at 0 and ends at ``y_max`` (default: a round number above the largest
    value); the x axis spans the first to the last run.
    """
    chart = Chart(title=title, metric=metric)
    points = [p for values in series.values() for p in values]
    if not points:
        return chart
    top_value = y_max if y_max is not None else _nice_max(max(v for _, v, _ in points) * 1.05)
    first = min(t for t, _, _ in points).timestamp()
    last = max(t for t, _, _ in points).timestamp()
    span = last - first
    inner_w, inner_h = chart.right - chart.left, chart.bottom - chart.top

    def x_of(moment: datetime) -> float:
        if span <= 0:
            return round(chart.left + inner_w / 2, 1)
        return round(chart.left + inner_w * (moment.timestamp() - first) / span, 1)

    def y_of(value: float) -> float:
        return round(chart.bottom - inner_h * min(max(value / top_value, 0.0), 1.0), 1)

    for i in range(5):
        value = top_value * i / 4
        chart.y_ticks.append((y_of(value), y_format(value)))
    moments = sorted({t for t, _, _ in points})
    short = span < 2 * 86400
    ticks = moments if len(moments) <= 5 else [moments[round(i * (len(moments) - 1) / 4)] for i in range(5)]
    labels: dict[str, float] = {}
    for t in ticks:  # one tick per distinct label (several runs a day share a date)
        labels.setdefault(t.strftime("%m-%d %H:%M" if short else "%Y-%m-%d"), x_of(t))
    chart.x_ticks = [(x, label) for label, x in labels.items()]
    for name, values in series.items():
        markers = [
            Marker(
                x=x_of(t),
                y=y_of(v),
                run_id=run_id,
                label=f"{name}: {y_format(v)} (run {run_id}, {t:%Y-%m-%d %H:%M})",
            )
            for t, v, run_id in values
        ]
        chart.series.append(
            Series(
                name=name,
                color=colors.get(name, PALETTE[0]),
                points=" ".join(f"{m.x},{m.y}" for m in markers),
                markers=markers,
            )
        )
    return chart
