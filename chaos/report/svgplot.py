"""A small SVG plotter for the HTML report's figures: axes with linear scales, ticks, grid,
labels and titles; lines, bars, spans, markers, curved arrows and text; a legend under the
axes. Written out as text, inline in the page.

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

__all__ = ["Axes", "Figure", "LegendEntry", "autoscale", "legend_box_svg", "legend_columns", "legend_svg", "nice_ticks",
           "tick_labels", "text_width"]

FONT_FAMILY = "-apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"
TICK_PT, LABEL_PT, TITLE_PT, LEGEND_PT = 9.0, 10.0, 10.0, 8.0
LEGEND_ROW_PT = 14.0
_TICK_LEN = 3.5
_AXIS_COLOR = "#333333"
_GRID_COLOR = "#dddddd"


# Advance widths in ems of Helvetica/Arial (the page's fonts), by class of character; a
# character of no class counts as wide as an "o". Rounded up a little: a margin too wide by a
# few points is invisible, one too narrow cuts a label.
_NARROW = set("iljtf.,:;'|!()[]{} /-")
_MIDDLE = set("rsz\"*^`")
_WIDE = set("mwMW@%")
_UPPER = set("ABCDEFGHIJKLNOPQRSTUVXYZ&")


def text_width(text: str, size: float, bold: bool = False) -> float:
    """Estimated width of ``text`` at ``size`` points (no font metrics at hand)."""
    ems = sum(0.3 if c in _NARROW else 0.45 if c in _MIDDLE else 0.86 if c in _WIDE else
              0.7 if c in _UPPER else 0.58 for c in text)
    return ems * size * (1.08 if bold else 1.0)


def _num(value: float) -> str:
    """A coordinate, short: two decimals are finer than any screen's pixel at page width."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _attrs(**attrs: object) -> str:
    """``key="value"`` pairs (``stroke_width`` -> ``stroke-width``), None values left out."""
    parts = []
    for key, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, float):
            value = _num(value)
        parts.append(f'{key.rstrip("_").replace("_", "-")}="{escape(str(value))}"')
    return " ".join(parts)


def _titled(gid: str | None, title: str | None, inner: str) -> str:
    """``inner`` in a group with an id and a tooltip, or bare when it has neither."""
    if gid is None and title is None:
        return inner
    head = f'<g id="{escape(gid)}">' if gid is not None else "<g>"
    tip = f"<title>{escape(title)}</title>" if title is not None else ""
    return f"{head}{tip}{inner}</g>"


def nice_ticks(low: float, high: float, max_ticks: int = 8) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 times a power of ten) inside [low, high], at most
    ``max_ticks + 1`` of them."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low] if math.isfinite(low) else []
    raw = (high - low) / max(1, max_ticks)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    first = math.ceil(low / step - 1e-9)
    last = math.floor(high / step + 1e-9)
    return [round(k * step, 12) for k in range(first, last + 1)]


def tick_labels(values: Sequence[float]) -> list[str]:
    """Labels with as many decimals as the ticks need (the fewest that show every one exactly),
    all alike."""
    if not values:
        return []
    step = min((b - a for a, b in zip(values, values[1:], strict=False)), default=abs(values[0]) or 1.0)
    if max(abs(v) for v in values) >= 1e6 or (0 < step < 1e-4):
        return [f"{v:.3g}" for v in values]
    tolerance = abs(step) * 1e-6
    decimals = next((d for d in range(7) if all(abs(round(v, d) - v) <= tolerance for v in values)), 6)
    return [f"{v + 0.0:.{decimals}f}" for v in values]  # + 0.0: no "-0"


def autoscale(values: Sequence[float], margin: float = 0.05) -> tuple[float, float]:
    """Data limits widened by ``margin`` of their span on each side (a flat series: by 5 % of its
    value, or by 0.05 around zero)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    low, high = min(finite), max(finite)
    if high == low:
        pad = abs(low) * 0.05 or 0.05
        return low - pad, high + pad
    pad = (high - low) * margin
    return low - pad, high + pad


# ------------------------------------------------------------------------------ marker shapes


def _marker_path(shape: str, size: float) -> tuple[str, bool]:
    """An SVG path around (0, 0) for a matplotlib-style marker name and its size in points;
    and whether it is filled (``x`` is drawn as strokes)."""
    r = size / 2
    if shape == "o":
        return f"M{_num(-r)},0a{_num(r)},{_num(r)} 0 1,0 {_num(2 * r)},0a{_num(r)},{_num(r)} 0 1,0 {_num(-2 * r)},0Z", True
    if shape == "s":
        s = r * 0.8
        return f"M{_num(-s)},{_num(-s)}H{_num(s)}V{_num(s)}H{_num(-s)}Z", True
    if shape == "D":
        s = r * 0.85
        return f"M0,{_num(-s)}L{_num(s)},0L0,{_num(s)}L{_num(-s)},0Z", True
    if shape == "v":  # pointing down, at the lane
        return f"M{_num(-r)},{_num(-r * 0.8)}H{_num(r)}L0,{_num(r)}Z", True
    if shape == ">":
        return f"M{_num(-r * 0.8)},{_num(-r)}L{_num(r)},0L{_num(-r * 0.8)},{_num(r)}Z", True
    if shape in ("X", "P"):
        a, b = r, r * 0.33  # arm length and half its width
        plus = [(-b, -a), (b, -a), (b, -b), (a, -b), (a, b), (b, b), (b, a), (-b, a), (-b, b), (-a, b), (-a, -b),
                (-b, -b)]
        if shape == "X":
            c = math.sqrt(0.5)
            plus = [((x - y) * c, (x + y) * c) for x, y in plus]
        return "M" + "L".join(f"{_num(x)},{_num(y)}" for x, y in plus) + "Z", True
    if shape == "x":
        s = r * 0.8
        return f"M{_num(-s)},{_num(-s)}L{_num(s)},{_num(s)}M{_num(-s)},{_num(s)}L{_num(s)},{_num(-s)}", False
    raise ValueError(f"unknown marker {shape!r}: one of o s D v > X P x")


def marker_svg(shape: str, x: float, y: float, size: float, color: str, edge: str | None = None,
               edge_width: float = 0.6) -> str:
    path, filled = _marker_path(shape, size)
    if filled:
        paint = _attrs(fill=color, stroke=edge, stroke_width=edge_width if edge else None)
    else:
        paint = _attrs(fill="none", stroke=color, stroke_width=1.1, stroke_linecap="round")
    return f'<path transform="translate({_num(x)},{_num(y)})" d="{path}" {paint}/>'


# ------------------------------------------------------------------------------------ figure


@dataclass
class LegendEntry:
    label: str
    color: str
    kind: str = "line"
    """``line`` (with ``dash``), ``marker`` (with ``marker``), ``patch`` (a filled box)."""
    dash: str | None = None
    marker: str | None = None
    width: float = 1.5
    opacity: float = 1.0

    def swatch(self, x: float, y: float) -> str:
        """The entry's sample, 22 points wide, centred vertically on ``y``."""
        if self.kind == "marker":
            return marker_svg(self.marker or "o", x + 11, y, 7, self.color,
                              edge=None if self.marker == "x" else "white")
        if self.kind == "patch":
            return f'<rect {_attrs(x=x + 2, y=y - 4.5, width=18.0, height=9.0, fill=self.color, opacity=self.opacity)}/>'
        attrs = _attrs(x1=x, y1=y, x2=x + 22.0, y2=y, stroke=self.color, stroke_width=self.width,
                       stroke_dasharray=self.dash, opacity=self.opacity)
        return f"<line {attrs}/>"


def _column_widths(entries: Sequence[LegendEntry], ncol: int, size: float) -> list[float]:
    """Each column's width in a legend whose entries fill rows of ``ncol``, left to right."""
    widths = [26 + text_width(e.label, size) + 14 for e in entries]
    return [max(widths[c::ncol]) for c in range(min(ncol, len(entries)))]


def legend_columns(entries: Sequence[LegendEntry], most: int, width: float, size: float = LEGEND_PT) -> int:
    """The most columns, up to ``most``, whose legend fits in ``width``."""
    for ncol in range(min(most, len(entries)), 1, -1):
        if sum(_column_widths(entries, ncol, size)) <= width:
            return ncol
    return 1


def legend_svg(entries: Sequence[LegendEntry], ncol: int, x_center: float, top: float,
               size: float = LEGEND_PT, row_h: float = LEGEND_ROW_PT) -> str:
    """A frameless legend of ``ncol`` columns, centred on ``x_center``, its first row at ``top``."""
    widths = _column_widths(entries, ncol, size)
    offsets = [x_center - sum(widths) / 2 + sum(widths[:c]) for c in range(len(widths))]
    out = []
    for i, entry in enumerate(entries):
        x = offsets[i % ncol]
        y = top + row_h * (i // ncol) + row_h / 2
        out.append(entry.swatch(x, y))
        out.append(f'<text {_attrs(x=x + 26, y=y, font_size=size, dominant_baseline="central")}>'
                   f'{escape(entry.label)}</text>')
    return "".join(out)


def legend_box_svg(entries: Sequence[LegendEntry], right: float, top: float, size: float = LEGEND_PT,
                   row_h: float = LEGEND_ROW_PT - 2) -> str:
    """A framed one-column legend whose top right corner is at (``right``, ``top``)."""
    width = max(26 + text_width(e.label, size) + 8 for e in entries)
    height = row_h * len(entries) + 6
    left = right - width
    out = [f'<rect {_attrs(x=left, y=top, width=width, height=height, fill="white", fill_opacity=0.85, stroke="#cccccc", stroke_width=0.8, rx=2.0)}/>']
    for i, entry in enumerate(entries):
        y = top + 3 + row_h * i + row_h / 2
        out.append(entry.swatch(left + 4, y))
        out.append(f'<text {_attrs(x=left + 30, y=y, font_size=size, dominant_baseline="central")}>'
                   f'{escape(entry.label)}</text>')
    return "".join(out)


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
        head = _attrs(class_="figure", role="img", aria_label=self.prefix, xmlns="http://www.w3.org/2000/svg",
                      viewBox=f"0 0 {_num(self.width)} {_num(self.height)}", font_family=FONT_FAMILY,
                      fill="#222222")
        return (f"<svg {head}><rect {_attrs(width=self.width, height=self.height, fill='white')}/>"
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
        def render() -> str:
            points = " ".join(f"{_num(self.px(x))},{_num(self.py(y))}" for x, y in zip(xs, ys, strict=True))
            attrs = _attrs(points=points, fill="none", stroke=color, stroke_width=width, stroke_dasharray=dash,
                           stroke_opacity=opacity, stroke_linejoin="round")
            return _titled(gid, title, f"<polyline {attrs}/>")
        self._add(render, z)

    def vline(self, x: float, color: str, width: float = 1.0, dash: str | None = None,
              opacity: float | None = None, z: float = 3.0, gid: str | None = None, title: str | None = None) -> None:
        def render() -> str:
            attrs = _attrs(x1=self.px(x), y1=self.top, x2=self.px(x), y2=self.top + self.height, stroke=color,
                           stroke_width=width, stroke_dasharray=dash, stroke_opacity=opacity)
            return _titled(gid, title, f"<line {attrs}/>")
        self._add(render, z)

    def hline(self, y: float, color: str, width: float = 1.0, dash: str | None = None, x0: float | None = None,
              x1: float | None = None, z: float = 3.0) -> None:
        def render() -> str:
            left = self.left if x0 is None else self.px(x0)
            right = self.left + self.width if x1 is None else self.px(x1)
            return f"<line {_attrs(x1=left, y1=self.py(y), x2=right, y2=self.py(y), stroke=color, stroke_width=width, stroke_dasharray=dash)}/>"
        self._add(render, z)

    def rect(self, x0: float, x1: float, y0: float, y1: float, color: str, opacity: float | None = None,
             z: float = 1.0, gid: str | None = None, title: str | None = None) -> None:
        def render() -> str:
            left, right = sorted((self.px(x0), self.px(x1)))
            top, bottom = sorted((self.py(y0), self.py(y1)))
            attrs = _attrs(x=left, y=top, width=max(right - left, 0.3), height=bottom - top, fill=color,
                           fill_opacity=opacity)
            return _titled(gid, title, f"<rect {attrs}/>")
        self._add(render, z)

    def vspan(self, x0: float, x1: float, color: str, opacity: float | None = None, z: float = 0.0) -> None:
        """A band across the axes' height (its y limits when drawn)."""
        def render() -> str:
            left, right = sorted((self.px(x0), self.px(x1)))
            attrs = _attrs(x=left, y=self.top, width=right - left, height=self.height, fill=color, fill_opacity=opacity)
            return f"<rect {attrs}/>"
        self._add(render, z)

    def hspan(self, y0: float, y1: float, color: str, opacity: float | None = None, z: float = 0.0) -> None:
        """A band across the axes' width."""
        def render() -> str:
            top, bottom = sorted((self.py(y0), self.py(y1)))
            attrs = _attrs(x=self.left, y=top, width=self.width, height=bottom - top, fill=color, fill_opacity=opacity)
            return f"<rect {attrs}/>"
        self._add(render, z)

    def marker(self, x: float, y: float, shape: str, color: str, size: float, edge: str | None = None,
               edge_width: float = 0.6, z: float = 5.0, gid: str | None = None, title: str | None = None) -> None:
        _marker_path(shape, size)  # an unknown shape fails here, where it was asked for
        self._add(lambda: _titled(gid, title, marker_svg(shape, self.px(x), self.py(y), size, color, edge,
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
            tip = (f"M{_num(bx)},{_num(by)}L{_num(base_x - uy * half)},{_num(base_y + ux * half)}"
                   f"L{_num(base_x + uy * half)},{_num(base_y - ux * half)}Z")
            curve = _attrs(d=f"M{_num(ax_)},{_num(ay)}Q{_num(cx)},{_num(cy)} {_num(base_x)},{_num(base_y)}",
                           fill="none", stroke=color, stroke_width=width)
            inner = f"<g {_attrs(opacity=opacity)}><path {curve}/><path {_attrs(d=tip, fill=color)}/></g>"
            return _titled(gid, title, inner)
        self._add(render, z)

    def text(self, x: float, y: float, text: str, size: float = 8.0, color: str | None = None,
             anchor: str = "start", z: float = 6.0, dx: float = 0.0, dy: float = 0.0,
             y_fraction: bool = False) -> None:
        """Text at data coordinates (``y_fraction``: y is a fraction of the axes' height, from the
        bottom), moved by (``dx``, ``dy``) points, vertically centred; clipped to the axes."""
        def render() -> str:
            py = self.top + self.height * (1 - y) if y_fraction else self.py(y)
            attrs = _attrs(x=self.px(x) + dx, y=py + dy, font_size=size, fill=color,
                           text_anchor=None if anchor == "start" else anchor, dominant_baseline="central")
            return f"<text {attrs}>{escape(text)}</text>"
        self._add(render, z)

    def note(self, text: str, size: float = 9.0, color: str | None = None) -> None:
        """Text in the middle of the axes (e.g. why a panel is empty)."""
        def render() -> str:
            attrs = _attrs(x=self.left + self.width / 2, y=self.top + self.height / 2, font_size=size, fill=color,
                           text_anchor="middle", dominant_baseline="central")
            return f"<text {attrs}>{escape(text)}</text>"
        self._overlay.append(render)

    # -- output

    def svg(self) -> str:
        clip_id = f"{self.figure.prefix}-clip-{self.index}"
        right, bottom = self.left + self.width, self.top + self.height
        out = [f'<clipPath id="{clip_id}"><rect {_attrs(x=self.left, y=self.top, width=self.width, height=self.height)}/>'
               "</clipPath>"]
        xticks, yticks = self.xticks(), self.yticks()
        grid = []
        if self.xgrid:
            grid += [f"M{_num(self.px(v))},{_num(self.top)}V{_num(bottom)}" for v in xticks.values]
        if self.ygrid:
            grid += [f"M{_num(self.left)},{_num(self.py(v))}H{_num(right)}" for v in yticks.values]
        if grid:
            out.append(f'<path {_attrs(d="".join(grid), stroke=_GRID_COLOR, stroke_width=0.7, fill="none")}/>')
        marks = "".join(render() for _, _, render in sorted(self._marks, key=lambda m: m[:2]))
        out.append(f'<g clip-path="url(#{clip_id})">{marks}</g>')
        out.append(f'<rect {_attrs(x=self.left, y=self.top, width=self.width, height=self.height, fill="none", stroke=_AXIS_COLOR, stroke_width=0.8)}/>')
        out.append(self._tick_marks(xticks, yticks, bottom))
        out += [render() for render in self._overlay]
        out += self._tick_texts(xticks, yticks, bottom)
        if self.title:
            out.append(f'<text {_attrs(x=self.left, y=self.top - 6, font_size=TITLE_PT)}>{escape(self.title)}</text>')
        if self.xlabel:
            below = bottom + _TICK_LEN + (TICK_PT * 1.3 if self.xtick_labels else 0) + 6 + LABEL_PT * 0.8
            out.append(f'<text {_attrs(x=self.left + self.width / 2, y=below, font_size=LABEL_PT, text_anchor="middle")}>'
                       f"{escape(self.xlabel)}</text>")
        if self.ylabel:
            x = self.left - _TICK_LEN - 3 - self.ytick_width() - 4 - self.ylabel_size * 0.5
            y = self.top + self.height / 2
            out.append(f'<text {_attrs(x=x, y=y, font_size=self.ylabel_size, text_anchor="middle", transform=f"rotate(-90 {_num(x)} {_num(y)})")}>'
                       f"{escape(self.ylabel)}</text>")
        return "".join(out)

    def _tick_marks(self, xticks: _Ticks, yticks: _Ticks, bottom: float) -> str:
        d = [f"M{_num(self.px(v))},{_num(bottom)}v{_num(_TICK_LEN)}" for v in xticks.values if self._in_x(v)]
        d += [f"M{_num(self.left)},{_num(self.py(v))}h{_num(-_TICK_LEN)}" for v in yticks.values if self._in_y(v)]
        return f'<path {_attrs(d="".join(d), stroke=_AXIS_COLOR, stroke_width=0.8)}/>' if d else ""

    def _tick_texts(self, xticks: _Ticks, yticks: _Ticks, bottom: float) -> list[str]:
        out = []
        if self.xtick_labels:
            y = bottom + _TICK_LEN + 2 + self.xtick_size * 0.8
            for value, label in zip(xticks.values, xticks.labels, strict=True):
                if not self._in_x(value):
                    continue
                x = self.px(value)
                if self.xtick_rotation:
                    attrs = _attrs(x=x, y=y - self.xtick_size * 0.3, font_size=self.xtick_size, text_anchor="end",
                                   transform=f"rotate({_num(-self.xtick_rotation)} {_num(x)} {_num(y)})")
                else:
                    attrs = _attrs(x=x, y=y, font_size=self.xtick_size, text_anchor="middle")
                out.append(f"<text {attrs}>{escape(label)}</text>")
        for i, (value, label) in enumerate(zip(yticks.values, yticks.labels, strict=True)):
            if not self._in_y(value):
                continue
            attrs = _attrs(x=self.left - _TICK_LEN - 3, y=self.py(value), font_size=TICK_PT, text_anchor="end",
                           dominant_baseline="central", font_weight="bold" if i in yticks.bold else None)
            text = f"<text {attrs}>{escape(label)}</text>"
            gid, title = yticks.ids.get(i, (None, None))
            out.append(_titled(gid, title, text))
        return out

    def _in_x(self, value: float) -> bool:
        low, high = sorted(self.xlim)
        return low - 1e-9 * (high - low) <= value <= high + 1e-9 * (high - low)

    def _in_y(self, value: float) -> bool:
        low, high = sorted(self.ylim)
        return low - 1e-9 * (high - low) <= value <= high + 1e-9 * (high - low)
