"""A small SVG plotter for the HTML report's figures: axes with linear scales, ticks, grid,
labels and titles; lines, bars, spans, markers, curved arrows and text, written out as text,
inline in the page. Ticks, marker shapes and legends: ``chaos.report.svgparts``.

Why not matplotlib (which drew these figures before): a controller writes two or three pages
per run (the run's, its baseline's, the suite's), and matplotlib cost ~0.6 s of CPU to import
plus 0.3-0.7 s a page of the smoke suite, in every controller of every ``make test`` and CI
gate. These figures need a fraction of what it offers: linear axes, a few mark shapes, text;
a page takes 20-70 ms here.

Units are points (1/72 in), as matplotlib's were: a figure 12 in wide is 864 units, and the
page scales it to its width (``viewBox``, no fixed size). Text stays text (searchable and
selectable), in the page's sans-serif. Every mark that should say what it is goes in a group
with an id and an SVG ``<title>`` (the browser's tooltip): ``<g id="mark-detected-1">
<title>…</title>…</g>``. Ids of the plotter's own (clip paths) carry the figure's prefix, so
that several figures share one document without clashing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

from chaos.report.svgparts import (
    FONT_FAMILY,
    LABEL_PT,
    TICK_LEN,
    TICK_PT,
    TITLE_PT,
    marker_path,
    marker_svg,
    nice_ticks,
    num,
    svg_attrs,
    text_width,
    tick_labels,
    titled,
)

__all__ = ["Axes", "Figure"]

_AXIS_COLOR = "#333333"
_GRID_COLOR = "#dddddd"


@dataclass
class Figure:
    """A figure ``width`` x ``height`` points; its axes and loose parts (legends) in order."""
    width: float
    height: float
    prefix: str
    """The figure's name: the ``aria-label`` and the prefix of the plotter's own ids."""
    axes: list[Axes] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)

    def add_axes(self, left: float, top: float, width: float, height: float) -> Axes:
        ax = Axes(self, len(self.axes), left, top, width, height)
        self.axes.append(ax)
        return ax

    def svg(self) -> str:
        body = "".join(ax.svg() for ax in self.axes) + "".join(self.extras)
        head = svg_attrs(class_="figure", role="img", aria_label=self.prefix, xmlns="http://www.w3.org/2000/svg",
                         viewBox=f"0 0 {num(self.width)} {num(self.height)}", font_family=FONT_FAMILY,
                         fill="#222222")
        return (f"<svg {head}><rect {svg_attrs(width=self.width, height=self.height, fill='white')}/>"
                f"{body}</svg>")


@dataclass
class _Ticks:
    values: list[float]
    labels: list[str]
    bold: set[int] = field(default_factory=set)
    ids: dict[int, tuple[str, str]] = field(default_factory=dict)
    """index -> (group id, tooltip) for a tick label that names something (a lane)."""


class Axes:
    """One plotting area: data coordinates mapped linearly onto a box of the figure. Marks are
    clipped to the box and drawn in ``z`` order (then in the order added); the frame, ticks,
    labels and title go around them. A mark is placed when the figure is written, so the
    limits and the box may be set after the marks are added (a margin that depends on the
    tick labels, which depend on the limits)."""

    def __init__(self, figure: Figure, index: int, left: float, top: float, width: float, height: float):
        self.figure, self.index = figure, index
        self.left, self.top, self.width, self.height = left, top, width, height
        self.xlim: tuple[float, float] = (0.0, 1.0)
        self.ylim: tuple[float, float] = (0.0, 1.0)
        self.title: str | None = None
        self.xlabel: str | None = None
        self.ylabel: str | None = None
        self.ylabel_size = LABEL_PT
        self.xtick_labels = True
        self.xtick_rotation = 0.0
        self.xtick_size = TICK_PT
        self.xgrid = self.ygrid = False
        self._xticks: _Ticks | None = None
        self._yticks: _Ticks | None = None
        self._marks: list[tuple[float, int, Callable[[], str]]] = []
        self._overlay: list[Callable[[], str]] = []

    # -- coordinates

    def px(self, x: float) -> float:
        x0, x1 = self.xlim
        return self.left + (x - x0) / ((x1 - x0) or 1.0) * self.width

    def py(self, y: float) -> float:
        y0, y1 = self.ylim
        return self.top + self.height - (y - y0) / ((y1 - y0) or 1.0) * self.height

    # -- ticks

    def set_xticks(self, values: Sequence[float], labels: Sequence[str]) -> None:
        self._xticks = _Ticks(list(values), list(labels))

    def set_yticks(self, values: Sequence[float], labels: Sequence[str], bold: Sequence[int] = (),
                   ids: dict[int, tuple[str, str]] | None = None) -> None:
        self._yticks = _Ticks(list(values), list(labels), set(bold), dict(ids or {}))

    def xticks(self) -> _Ticks:
        if self._xticks is None:
            values = nice_ticks(*self.xlim, max_ticks=max(2, int(self.width // 70)))
            return _Ticks(values, tick_labels(values))
        return self._xticks

    def yticks(self) -> _Ticks:
        if self._yticks is None:
            values = nice_ticks(*self.ylim, max_ticks=max(2, min(8, int(self.height // 22))))
            return _Ticks(values, tick_labels(values))
        return self._yticks

    def ytick_width(self) -> float:
        """Width of the longest y tick label, in points."""
        ticks = self.yticks()
        return max((text_width(label, TICK_PT, bold=i in ticks.bold) for i, label in enumerate(ticks.labels)),
                   default=0.0)

    # -- marks (data coordinates)

    def _add(self, render: Callable[[], str], z: float) -> None:
        """A mark drawn when the figure is written: the axes' limits and box may still change."""
        self._marks.append((z, len(self._marks), render))

    def line(self, xs: Sequence[float], ys: Sequence[float], color: str, width: float = 1.0,
             dash: str | None = None, opacity: float | None = None, z: float = 2.0,
             gid: str | None = None, title: str | None = None) -> None:
        """A line through the points; a point that is not finite breaks it there (NaN is no place)."""
        def render() -> str:
            path, move = [], True
            for x, y in zip(xs, ys, strict=True):
                if not (math.isfinite(x) and math.isfinite(y)):
                    move = True
                    continue
                path.append(f"{'M' if move else 'L'}{num(self.px(x))},{num(self.py(y))}")
                move = False
            attrs = svg_attrs(d="".join(path) or "M0,0", fill="none", stroke=color, stroke_width=width,
                              stroke_dasharray=dash, stroke_opacity=opacity, stroke_linejoin="round")
            return titled(gid, title, f"<path {attrs}/>")
        self._add(render, z)

    def vline(self, x: float, color: str, width: float = 1.0, dash: str | None = None,
              opacity: float | None = None, z: float = 3.0, gid: str | None = None, title: str | None = None) -> None:
        def render() -> str:
            attrs = svg_attrs(x1=self.px(x), y1=self.top, x2=self.px(x), y2=self.top + self.height, stroke=color,
                              stroke_width=width, stroke_dasharray=dash, stroke_opacity=opacity)
            return titled(gid, title, f"<line {attrs}/>")
        self._add(render, z)

    def hline(self, y: float, color: str, width: float = 1.0, dash: str | None = None, x0: float | None = None,
              x1: float | None = None, z: float = 3.0) -> None:
        def render() -> str:
            left = self.left if x0 is None else self.px(x0)
            right = self.left + self.width if x1 is None else self.px(x1)
            return f"<line {svg_attrs(x1=left, y1=self.py(y), x2=right, y2=self.py(y), stroke=color, stroke_width=width, stroke_dasharray=dash)}/>"
        self._add(render, z)

    def rect(self, x0: float, x1: float, y0: float, y1: float, color: str, opacity: float | None = None,
             z: float = 1.0, gid: str | None = None, title: str | None = None) -> None:
        def render() -> str:
            left, right = sorted((self.px(x0), self.px(x1)))
            top, bottom = sorted((self.py(y0), self.py(y1)))
            attrs = svg_attrs(x=left, y=top, width=max(right - left, 0.3), height=bottom - top, fill=color,
                              fill_opacity=opacity)
            return titled(gid, title, f"<rect {attrs}/>")
        self._add(render, z)

    def vspan(self, x0: float, x1: float, color: str, opacity: float | None = None, z: float = 0.0) -> None:
        """A band across the axes' height (its y limits when drawn)."""
        def render() -> str:
            left, right = sorted((self.px(x0), self.px(x1)))
            attrs = svg_attrs(x=left, y=self.top, width=right - left, height=self.height, fill=color, fill_opacity=opacity)
            return f"<rect {attrs}/>"
        self._add(render, z)

    def hspan(self, y0: float, y1: float, color: str, opacity: float | None = None, z: float = 0.0) -> None:
        """A band across the axes' width."""
        def render() -> str:
            top, bottom = sorted((self.py(y0), self.py(y1)))
            attrs = svg_attrs(x=self.left, y=top, width=self.width, height=bottom - top, fill=color, fill_opacity=opacity)
            return f"<rect {attrs}/>"
        self._add(render, z)

    def marker(self, x: float, y: float, shape: str, color: str, size: float, edge: str | None = None,
               edge_width: float = 0.6, z: float = 5.0, gid: str | None = None, title: str | None = None) -> None:
        marker_path(shape, size)  # an unknown shape fails here, where it was asked for
        self._add(lambda: titled(gid, title, marker_svg(shape, self.px(x), self.py(y), size, color, edge,
                                                         edge_width)), z)

    def arrow(self, x: float, y0: float, y1: float, color: str, bend: float = 0.25, width: float = 0.9,
              opacity: float | None = None, z: float = 4.0, gid: str | None = None, title: str | None = None) -> None:
        """A curved arrow from (x, y0) to (x, y1), bowed sideways by ``bend`` of its length."""
        def render() -> str:
            ax_, ay = self.px(x), self.py(y0)
            bx, by = self.px(x), self.py(y1)
            cx, cy = (ax_ + bx) / 2 + bend * (by - ay), (ay + by) / 2 - bend * (bx - ax_)
            tx, ty = bx - cx, by - cy  # the curve's direction where it ends
            norm = math.hypot(tx, ty) or 1.0
            ux, uy = tx / norm, ty / norm
            head, half = 6.0, 2.6
            base_x, base_y = bx - ux * head, by - uy * head
            tip = (f"M{num(bx)},{num(by)}L{num(base_x - uy * half)},{num(base_y + ux * half)}"
                   f"L{num(base_x + uy * half)},{num(base_y - ux * half)}Z")
            curve = svg_attrs(d=f"M{num(ax_)},{num(ay)}Q{num(cx)},{num(cy)} {num(base_x)},{num(base_y)}",
                              fill="none", stroke=color, stroke_width=width)
            inner = f"<g {svg_attrs(opacity=opacity)}><path {curve}/><path {svg_attrs(d=tip, fill=color)}/></g>"
            return titled(gid, title, inner)
        self._add(render, z)

    def text(self, x: float, y: float, text: str, size: float = 8.0, color: str | None = None,
             anchor: str = "start", z: float = 6.0, dx: float = 0.0, dy: float = 0.0,
             y_fraction: bool = False) -> None:
        """Text at data coordinates (``y_fraction``: y is a fraction of the axes' height, from the
        bottom), moved by (``dx``, ``dy``) points, vertically centred; clipped to the axes."""
        def render() -> str:
            py = self.top + self.height * (1 - y) if y_fraction else self.py(y)
            attrs = svg_attrs(x=self.px(x) + dx, y=py + dy, font_size=size, fill=color,
                              text_anchor=None if anchor == "start" else anchor, dominant_baseline="central")
            return f"<text {attrs}>{escape(text)}</text>"
        self._add(render, z)

    def note(self, text: str, size: float = 9.0, color: str | None = None) -> None:
        """Text in the middle of the axes (e.g. why a panel is empty)."""
        def render() -> str:
            attrs = svg_attrs(x=self.left + self.width / 2, y=self.top + self.height / 2, font_size=size, fill=color,
                              text_anchor="middle", dominant_baseline="central")
            return f"<text {attrs}>{escape(text)}</text>"
        self._overlay.append(render)

    # -- output

    def svg(self) -> str:
        clip_id = f"{self.figure.prefix}-clip-{self.index}"
        right, bottom = self.left + self.width, self.top + self.height
        out = [f'<clipPath id="{clip_id}"><rect {svg_attrs(x=self.left, y=self.top, width=self.width, height=self.height)}/>'
               "</clipPath>"]
        xticks, yticks = self.xticks(), self.yticks()
        grid = []
        if self.xgrid:
            grid += [f"M{num(self.px(v))},{num(self.top)}V{num(bottom)}" for v in xticks.values]
        if self.ygrid:
            grid += [f"M{num(self.left)},{num(self.py(v))}H{num(right)}" for v in yticks.values]
        if grid:
            out.append(f'<path {svg_attrs(d="".join(grid), stroke=_GRID_COLOR, stroke_width=0.7, fill="none")}/>')
        marks = "".join(render() for _, _, render in sorted(self._marks, key=lambda m: m[:2]))
        out.append(f'<g clip-path="url(#{clip_id})">{marks}</g>')
        out.append(f'<rect {svg_attrs(x=self.left, y=self.top, width=self.width, height=self.height, fill="none", stroke=_AXIS_COLOR, stroke_width=0.8)}/>')
        out.append(self._tick_marks(xticks, yticks, bottom))
        out += [render() for render in self._overlay]
        out += self._tick_texts(xticks, yticks, bottom)
        if self.title:
            out.append(f'<text {svg_attrs(x=self.left, y=self.top - 6, font_size=TITLE_PT)}>{escape(self.title)}</text>')
        if self.xlabel:
            below = bottom + TICK_LEN + (TICK_PT * 1.3 if self.xtick_labels else 0) + 6 + LABEL_PT * 0.8
            out.append(f'<text {svg_attrs(x=self.left + self.width / 2, y=below, font_size=LABEL_PT, text_anchor="middle")}>'
                       f"{escape(self.xlabel)}</text>")
        if self.ylabel:
            x = self.left - TICK_LEN - 3 - self.ytick_width() - 4 - self.ylabel_size * 0.5
            y = self.top + self.height / 2
            out.append(f'<text {svg_attrs(x=x, y=y, font_size=self.ylabel_size, text_anchor="middle", transform=f"rotate(-90 {num(x)} {num(y)})")}>'
                       f"{escape(self.ylabel)}</text>")
        return "".join(out)

    def _tick_marks(self, xticks: _Ticks, yticks: _Ticks, bottom: float) -> str:
        d = [f"M{num(self.px(v))},{num(bottom)}v{num(TICK_LEN)}" for v in xticks.values if self._in_x(v)]
        d += [f"M{num(self.left)},{num(self.py(v))}h{num(-TICK_LEN)}" for v in yticks.values if self._in_y(v)]
        return f'<path {svg_attrs(d="".join(d), stroke=_AXIS_COLOR, stroke_width=0.8)}/>' if d else ""

    def _tick_texts(self, xticks: _Ticks, yticks: _Ticks, bottom: float) -> list[str]:
        out = []
        if self.xtick_labels:
            y = bottom + TICK_LEN + 2 + self.xtick_size * 0.8
            for value, label in zip(xticks.values, xticks.labels, strict=True):
                if not self._in_x(value):
                    continue
                x = self.px(value)
                if self.xtick_rotation:
                    attrs = svg_attrs(x=x, y=y - self.xtick_size * 0.3, font_size=self.xtick_size, text_anchor="end",
                                      transform=f"rotate({num(-self.xtick_rotation)} {num(x)} {num(y)})")
                else:
                    attrs = svg_attrs(x=x, y=y, font_size=self.xtick_size, text_anchor="middle")
                out.append(f"<text {attrs}>{escape(label)}</text>")
        for i, (value, label) in enumerate(zip(yticks.values, yticks.labels, strict=True)):
            if not self._in_y(value):
                continue
            attrs = svg_attrs(x=self.left - TICK_LEN - 3, y=self.py(value), font_size=TICK_PT, text_anchor="end",
                              dominant_baseline="central", font_weight="bold" if i in yticks.bold else None)
            text = f"<text {attrs}>{escape(label)}</text>"
            gid, title = yticks.ids.get(i, (None, None))
            out.append(titled(gid, title, text))
        return out

    def _in_x(self, value: float) -> bool:
        return _within(value, self.xlim)

    def _in_y(self, value: float) -> bool:
        return _within(value, self.ylim)


def _within(value: float, limits: tuple[float, float]) -> bool:
    """Whether ``value`` lies inside ``limits`` (either order), give or take rounding."""
    low, high = sorted(limits)
    slack = 1e-9 * (high - low)
    return low - slack <= value <= high + slack
