"""The parts the report's SVG plotter (``chaos.report.svgplot``) draws with: text widths
without font metrics, round tick values and their labels, data limits, matplotlib-style
marker shapes and legends, and the attribute writing they share. Units are points."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["FONT_FAMILY", "LABEL_PT", "LEGEND_PT", "LEGEND_ROW_PT", "TICK_LEN", "TICK_PT", "TITLE_PT", "LegendEntry",
           "autoscale", "legend_box_svg", "legend_columns", "legend_svg", "marker_path", "marker_svg",
           "nice_ticks", "num", "svg_attrs", "text_width", "tick_labels", "titled"]

FONT_FAMILY = "-apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"
TICK_PT, LABEL_PT, TITLE_PT, LEGEND_PT = 9.0, 10.0, 10.0, 8.0
LEGEND_ROW_PT = 14.0
TICK_LEN = 3.5


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


def num(value: float) -> str:
    """A coordinate, short: two decimals are finer than any screen's pixel at page width."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def svg_attrs(**attrs: object) -> str:
    """``key="value"`` pairs (``stroke_width`` -> ``stroke-width``), None values left out."""
    parts = []
    for key, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, float):
            value = num(value)
        parts.append(f'{key.rstrip("_").replace("_", "-")}="{escape(str(value))}"')
    return " ".join(parts)


def titled(gid: str | None, title: str | None, inner: str) -> str:
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


def marker_path(shape: str, size: float) -> tuple[str, bool]:
    """An SVG path around (0, 0) for a matplotlib-style marker name and its size in points;
    and whether it is filled (``x`` is drawn as strokes)."""
    r = size / 2
    if shape == "o":
        return f"M{num(-r)},0a{num(r)},{num(r)} 0 1,0 {num(2 * r)},0a{num(r)},{num(r)} 0 1,0 {num(-2 * r)},0Z", True
    if shape == "s":
        s = r * 0.8
        return f"M{num(-s)},{num(-s)}H{num(s)}V{num(s)}H{num(-s)}Z", True
    if shape == "D":
        s = r * 0.85
        return f"M0,{num(-s)}L{num(s)},0L0,{num(s)}L{num(-s)},0Z", True
    if shape == "v":  # pointing down, at the lane
        return f"M{num(-r)},{num(-r * 0.8)}H{num(r)}L0,{num(r)}Z", True
    if shape == ">":
        return f"M{num(-r * 0.8)},{num(-r)}L{num(r)},0L{num(-r * 0.8)},{num(r)}Z", True
    if shape in ("X", "P"):
        a, b = r, r * 0.33  # arm length and half its width
        plus = [(-b, -a), (b, -a), (b, -b), (a, -b), (a, b), (b, b), (b, a), (-b, a), (-b, b), (-a, b), (-a, -b),
                (-b, -b)]
        if shape == "X":
            c = math.sqrt(0.5)
            plus = [((x - y) * c, (x + y) * c) for x, y in plus]
        return "M" + "L".join(f"{num(x)},{num(y)}" for x, y in plus) + "Z", True
    if shape == "x":
        s = r * 0.8
        return f"M{num(-s)},{num(-s)}L{num(s)},{num(s)}M{num(-s)},{num(s)}L{num(s)},{num(-s)}", False
    raise ValueError(f"unknown marker {shape!r}: one of o s D v > X P x")


def marker_svg(shape: str, x: float, y: float, size: float, color: str, edge: str | None = None,
               edge_width: float = 0.6) -> str:
    path, filled = marker_path(shape, size)
    if filled:
        paint = svg_attrs(fill=color, stroke=edge, stroke_width=edge_width if edge else None)
    else:
        paint = svg_attrs(fill="none", stroke=color, stroke_width=1.1, stroke_linecap="round")
    return f'<path transform="translate({num(x)},{num(y)})" d="{path}" {paint}/>'


# ------------------------------------------------------------------------------------ legends


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
            return f'<rect {svg_attrs(x=x + 2, y=y - 4.5, width=18.0, height=9.0, fill=self.color, opacity=self.opacity)}/>'
        attrs = svg_attrs(x1=x, y1=y, x2=x + 22.0, y2=y, stroke=self.color, stroke_width=self.width,
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
        out.append(f'<text {svg_attrs(x=x + 26, y=y, font_size=size, dominant_baseline="central")}>'
                   f'{escape(entry.label)}</text>')
    return "".join(out)


def legend_box_svg(entries: Sequence[LegendEntry], right: float, top: float, size: float = LEGEND_PT,
                   row_h: float = LEGEND_ROW_PT - 2) -> str:
    """A framed one-column legend whose top right corner is at (``right``, ``top``)."""
    width = max(26 + text_width(e.label, size) + 8 for e in entries)
    height = row_h * len(entries) + 6
    left = right - width
    out = [f'<rect {svg_attrs(x=left, y=top, width=width, height=height, fill="white", fill_opacity=0.85, stroke="#cccccc", stroke_width=0.8, rx=2.0)}/>']
    for i, entry in enumerate(entries):
        y = top + 3 + row_h * i + row_h / 2
        out.append(entry.swatch(left + 4, y))
        out.append(f'<text {svg_attrs(x=left + 30, y=y, font_size=size, dominant_baseline="central")}>'
                   f'{escape(entry.label)}</text>')
    return "".join(out)
