"""The report's SVG plotter: ticks a person reads, marks where the data puts them, ids and
tooltips a script finds, well-formed SVG."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from chaos.report.svgparts import (
    LegendEntry,
    autoscale,
    legend_columns,
    legend_svg,
    nice_ticks,
    text_width,
    tick_labels,
)
from chaos.report.svgplot import Figure

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize(("low", "high", "expected"), [
    (0, 23.2, [0, 5, 10, 15, 20]),
    (0, 10.5, [0, 2, 4, 6, 8, 10]),
    (0.96, 1.04, [0.96, 0.97, 0.98, 0.99, 1.0, 1.01, 1.02, 1.03, 1.04]),
    (-3, 3, [-3, -2, -1, 0, 1, 2, 3]),
    (0, 0.0316, [0, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03]),
])
def test_ticks_are_round_numbers_inside_the_limits(low, high, expected):
    assert nice_ticks(low, high) == pytest.approx(expected)


def test_ticks_step_through_1_2_2_5_5_and_never_exceed_the_count():
    for high in (0.7, 3.3, 17.0, 42.0, 99.0, 1234.5, 0.0042):
        ticks = nice_ticks(0, high, max_ticks=6)
        assert 2 <= len(ticks) <= 7 and ticks[0] >= 0 and ticks[-1] <= high
        step = ticks[1] - ticks[0]
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert min(abs(mantissa - m) for m in (1, 2, 2.5, 5, 10)) < 1e-6, (high, ticks)


def test_ticks_of_an_empty_or_reversed_range():
    assert nice_ticks(3, 3) == [3]
    assert nice_ticks(float("nan"), 1) == []


@pytest.mark.parametrize(("values", "labels"), [
    ([0, 5, 10], ["0", "5", "10"]),
    ([0, 0.25, 0.5], ["0.00", "0.25", "0.50"]),
    ([0.96, 0.98, 1.0], ["0.96", "0.98", "1.00"]),
    ([-0.5, 0.0, 0.5], ["-0.5", "0.0", "0.5"]),
    ([-0.0, 1.0], ["0", "1"]),
    ([0, 2e6, 4e6], ["0", "2e+06", "4e+06"]),
])
def test_tick_labels_carry_the_decimals_the_ticks_need(values, labels):
    assert tick_labels(values) == labels


def test_autoscale_widens_by_the_margin_and_survives_a_flat_or_empty_series():
    assert autoscale([0, 10]) == pytest.approx((-0.5, 10.5))
    assert autoscale([2.0, 2.0]) == pytest.approx((1.9, 2.1))
    assert autoscale([0.0]) == pytest.approx((-0.05, 0.05))
    assert autoscale([float("nan")]) == (0.0, 1.0)


def test_text_width_tells_wide_text_from_narrow():
    assert text_width("mmmm", 10) > text_width("0000", 10) > text_width("iiii", 10)
    assert text_width("node-1", 9, bold=True) > text_width("node-1", 9)


def _figure_with_a_mark(**mark) -> tuple[Figure, str]:
    fig = Figure(200, 100, "fig")
    ax = fig.add_axes(0, 0, 100, 100)
    ax.marker(5, 5, "o", "#123456", 6, gid="mark-1", title="step 5 <of> 10", **mark)
    ax.xlim = ax.ylim = (0.0, 10.0)  # after the mark: it is placed when written
    return fig, fig.svg()


def test_a_mark_sits_where_the_limits_put_it_with_its_id_and_tooltip():
    _, svg = _figure_with_a_mark()
    root = ET.fromstring(svg)
    group = root.find(f".//{SVG}g[@id='mark-1']")
    assert group is not None
    assert group.find(f"{SVG}title").text == "step 5 <of> 10"
    assert group.find(f"{SVG}path").get("transform") == "translate(50,50)"
    assert root.get("viewBox") == "0 0 200 100" and root.get("width") is None  # scales with the page


def test_unknown_marker_is_refused_where_it_is_asked_for():
    fig = Figure(100, 100, "fig")
    with pytest.raises(ValueError, match="unknown marker '\\*'.*o s D v > X P x"):
        fig.add_axes(0, 0, 100, 100).marker(0, 0, "*", "red", 5)


def test_marks_draw_in_z_order_and_are_clipped_to_their_axes():
    fig = Figure(200, 100, "fig")
    ax = fig.add_axes(10, 10, 180, 80)
    ax.xlim = ax.ylim = (0.0, 1.0)
    ax.line([0, 1], [0, 1], "blue", gid="on-top", z=5)
    ax.rect(0, 1, 0, 0.5, "grey", gid="below", z=1)
    root = ET.fromstring(fig.svg())
    clipped = root.find(f".//{SVG}g[@clip-path='url(#fig-clip-0)']")
    assert [g.get("id") for g in clipped.findall(f"{SVG}g")] == ["below", "on-top"]
    assert root.find(f".//{SVG}clipPath[@id='fig-clip-0']") is not None


def test_two_figures_share_a_page_without_an_id_clash():
    figures = [Figure(100, 100, name) for name in ("timeline", "loss")]
    for fig in figures:
        fig.add_axes(0, 0, 100, 100).line([0, 1], [0, 1], "red")
    page = "<div>" + "".join(fig.svg() for fig in figures) + "</div>"
    ids = [e.get("id") for e in ET.fromstring(page).iter() if e.get("id")]
    assert ids == ["timeline-clip-0", "loss-clip-0"]


def test_lane_labels_are_groups_with_ids_and_bold_where_asked():
    fig = Figure(300, 100, "t")
    ax = fig.add_axes(60, 0, 240, 100)
    ax.ylim = (-0.5, 1.5)
    ax.set_yticks([1, 0], ["node-0", "rank-0"], bold=[0], ids={0: ("lane-node-0", "node-0"),
                                                               1: ("lane-rank-0", "rank-0")})
    root = ET.fromstring(fig.svg())
    node = root.find(f".//{SVG}g[@id='lane-node-0']/{SVG}text")
    rank = root.find(f".//{SVG}g[@id='lane-rank-0']/{SVG}text")
    assert (node.text, node.get("font-weight")) == ("node-0", "bold")
    assert (rank.text, rank.get("font-weight")) == ("rank-0", None)
    assert float(node.get("y")) < float(rank.get("y"))  # the higher value is drawn higher


def test_arrow_ends_at_its_target():
    fig = Figure(100, 100, "a")
    ax = fig.add_axes(0, 0, 100, 100)
    ax.xlim = ax.ylim = (0.0, 10.0)
    ax.arrow(5, 8, 2, "blue", gid="blame", title="rank-0 blamed rank-1")
    group = ET.fromstring(fig.svg()).find(f".//{SVG}g[@id='blame']")
    tip = group.findall(f".//{SVG}path")[-1].get("d")
    assert tip.startswith("M50,80L")  # the head's point on (5, 2)


def test_legend_takes_as_many_columns_as_fit_and_lays_out_rows():
    entries = [LegendEntry(f"entry number {i}", "#000000") for i in range(7)]
    assert legend_columns(entries, 5, 10_000) == 5
    assert legend_columns(entries, 5, 300) < 5
    assert legend_columns(entries, 5, 10) == 1
    svg = "<svg xmlns='http://www.w3.org/2000/svg'>" + legend_svg(entries, 3, 400, 0) + "</svg>"
    rows = sorted({float(t.get("y")) for t in ET.fromstring(svg).iter(f"{SVG}text")})
    assert len(rows) == 3  # 7 entries in rows of 3


def test_a_line_breaks_where_a_value_is_not_finite():
    fig = Figure(100, 100, "l")
    ax = fig.add_axes(0, 0, 100, 100)
    ax.xlim = ax.ylim = (0.0, 10.0)
    ax.line([0, 5, 6, 10], [0, float("nan"), 5, 10], "red", gid="loss")
    d = ET.fromstring(fig.svg()).find(f".//{SVG}g[@id='loss']/{SVG}path").get("d")
    assert d == "M0,100M60,50L100,0"
