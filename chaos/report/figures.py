"""The HTML report's figures, inline SVG drawn by ``chaos.report.svgplot``.

Why SVG (and not plotly): the page must open with no network access, and an inline plotly
bundle is ~4.6 MB of JavaScript in every report (a suite of 10 runs: 50 MB); an SVG timeline
is tens of kB, needs no script at all (so it also renders in CI artifact viewers that block
scripts), and keeps its text as text: lane names and labels can be searched and selected.
Why not matplotlib, which drew them before: ~1 s of CPU per run for a few lines and marks
(``svgplot``'s docstring). What is lost, zoom and hover, is covered by an SVG ``<title>`` on
every mark (the browser shows it as a tooltip) and by the marks table under the figure.

Every lane and mark carries a stable element id (``lane-rank-3``, ``mark-detected-2``), so a
test or a user's script can find them; the plotter's own ids carry the figure's name, so that
several figures can share one HTML document without clashing.
"""

from __future__ import annotations

from typing import Any

from chaos.metrics.catalogue import specs
from chaos.report.runview import Mark, RunView
from chaos.report.svgparts import (
    LABEL_PT,
    LEGEND_ROW_PT,
    TICK_LEN,
    TICK_PT,
    TITLE_PT,
    LegendEntry,
    autoscale,
    legend_box_svg,
    legend_columns,
    legend_svg,
    text_width,
)
from chaos.report.svgplot import Axes, Figure

__all__ = ["MARK_STYLE", "coverage_svg", "loss_svg", "mark_ids", "suite_metrics_svg", "suite_panels",
           "timeline_svg"]

# kind -> (marker, color, size, legend label)
MARK_STYLE: dict[str, tuple[str, str, float, str]] = {
    "fault_injected": ("X", "#d62728", 11, "fault injected"),
    "fault_reverted": ("P", "#d62728", 8, "fault reverted"),
    "detected": ("v", "#1f5fbf", 9, "detection (arrow: who was blamed)"),
    "false_detection": ("v", "#ff7f0e", 10, "false alarm"),
    "teardown_detection": ("v", "#9e9e9e", 7, "detection while stopping (not counted)"),
    "rank_exit": ("x", "#222222", 8, "process exit"),
    "restart": (">", "#2ca02c", 9, "restart"),
    "ckpt_save": ("s", "#7f7f7f", 5, "checkpoint saved"),
    "ckpt_load": ("D", "#9467bd", 7, "checkpoint loaded"),
    "stale_checkpoint": ("s", "#e377c2", 10, "stale checkpoint (not the twin's state at its step)"),
    "torn_checkpoint": ("s", "#8c564b", 10, "torn checkpoint left by a power loss"),
}
_DASHED, _DOTTED, _DASH_DOT = "5 2.5", "1.5 2", "6 2 1.5 2"
_LINE_STYLE: dict[str, tuple[str, str | None, str]] = {
    # kind -> (color, dash pattern, legend label): run-wide moments, drawn across every lane
    "fault_injected": ("#d62728", _DASHED, "injection"),
    "recovery": ("#2ca02c", None, "recovery (first productive step)"),
    "catchup": ("#17becf", _DASH_DOT, "catch-up (pre-fault step reached again)"),
    "job_stop": ("#555555", _DOTTED, "trainchaos stops the job"),
}
_INCARNATION_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#eeca3b")
_WIDTH = 864.0  # 12 in
_RIGHT = 12.0
_X_AXIS_PT = TICK_LEN + 2 + TICK_PT * 1.3 + 6 + LABEL_PT
"""Under an axes: tick marks, tick labels, the x label."""


def _inc_color(incarnation: int) -> str:
    return _INCARNATION_COLORS[incarnation % len(_INCARNATION_COLORS)]


def _left_margin(*axes: Axes, ylabel: bool = True) -> float:
    """Room left of axes one above the other for their y tick labels and label."""
    return 8 + (LABEL_PT + 4 if ylabel else 0.0) + max(ax.ytick_width() for ax in axes) + 8


def _align_left(*axes: Axes, ylabel: bool = True) -> None:
    """Axes one above the other, full width, their left edges where the widest labels end."""
    left = _left_margin(*axes, ylabel=ylabel)
    for ax in axes:
        ax.left, ax.width = left, _WIDTH - left - _RIGHT


def _legend_rows(count: int, ncol: int) -> int:
    return -(-count // ncol)


def mark_ids(marks: list[Mark]) -> list[str]:
    """A stable id per mark: ``mark-<kind>-<n>``, n counting within the kind."""
    seen: dict[str, int] = {}
    ids = []
    for mark in marks:
        seen[mark.kind] = seen.get(mark.kind, 0) + 1
        ids.append(f"mark-{mark.kind.replace('_', '-')}-{seen[mark.kind]}")
    return ids


def _timeline_legend(view: RunView) -> list[LegendEntry]:
    kinds = {m.kind for m in view.marks}
    entries = [LegendEntry(label, color, kind="marker", marker=marker)
               for k, (marker, color, _, label) in MARK_STYLE.items() if k in kinds]
    entries += [LegendEntry(label, color, dash=dash) for k, (color, dash, label) in _LINE_STYLE.items() if k in kinds]
    incs = sorted({s.incarnation for s in view.segments if not s.lane.startswith("node")})
    entries += [LegendEntry(f"incarnation {i}", _inc_color(i), kind="patch", opacity=0.75) for i in incs]
    return entries


def timeline_svg(view: RunView) -> str:
    """Top: the step each rank reached over time (a drop is a rollback to a checkpoint).
    Bottom: one lane per node and rank, each process's life as a bar (color: incarnation),
    and every mark on the lane of the process it concerns."""
    lanes = view.lane_names()
    n = max(1, len(lanes))
    x_max = max(view.duration, 1.0)
    legend = _timeline_legend(view)
    ncol = legend_columns(legend, 5, _WIDTH - 24)
    top_max = max((step for points in view.steps.values() for _, step in points), default=0)
    top, steps_h, gap, lanes_h = 8 + TITLE_PT + 8, 150.0, 9.0, 30.0 * n + 12
    legend_top = top + steps_h + gap + lanes_h + _X_AXIS_PT + 10
    fig = Figure(_WIDTH, legend_top + LEGEND_ROW_PT * _legend_rows(len(legend), ncol) + 6, "timeline")
    ax_steps = fig.add_axes(0, top, 0, steps_h)  # left and width once the tick labels are known
    ax = fig.add_axes(0, top + steps_h + gap, 0, lanes_h)
    for a in (ax_steps, ax):
        a.xlim = (0.0, x_max * 1.01)
        a.xgrid = True

    # -- steps over time
    ax_steps.ylim = (0.0, max(top_max, view.steps_target or 0, 1) * 1.05)
    ax_steps.ygrid = True
    ax_steps.xtick_labels = False
    ax_steps.ylabel = "step"
    ax_steps.title = "Steps over time (a drop is a rollback to a checkpoint)"
    for (src, inc), points in sorted(view.steps.items()):
        xs, ys = zip(*points, strict=True)
        main = src == "rank-0"
        ax_steps.line(xs, ys, _inc_color(inc), width=1.6 if main else 0.8, opacity=0.95 if main else 0.55,
                      gid=f"steps-{src}-i{inc}", title=f"{src} incarnation {inc}: steps {ys[0]}–{ys[-1]}")
    if view.steps_target:
        ax_steps.hline(view.steps_target, "#bbbbbb", width=0.8, dash=_DOTTED, z=1)

    # -- lanes: a tick label per lane, itself the group tests and scripts find (lane-rank-3)
    y_of = {name: n - 1 - i for i, name in enumerate(lanes)}
    ax.ylim = (-0.7, n - 0.3)
    ax.xlabel = "seconds since the run started"
    ax.set_yticks([y_of[name] for name in lanes], lanes,
                  bold=[i for i, name in enumerate(lanes) if name.startswith("node")],
                  ids={i: (f"lane-{name}", name) for i, name in enumerate(lanes)})
    for lane in view.lanes:
        if lane.kind == "node":
            ax.hspan(y_of[lane.name] - 0.5, y_of[lane.name] + 0.5, "#f2f2f2")
    for i, seg in enumerate(view.segments):
        if seg.lane not in y_of:
            continue
        y = y_of[seg.lane]
        is_node = seg.lane.startswith("node")
        half = 0.25 if is_node else 0.31
        steps = "" if seg.first_step is None else f", steps {seg.first_step}–{seg.last_step}"
        title = (f"{seg.lane}: alive {seg.t0:.2f}–{seg.t1:.2f} s" if is_node else
                 f"{seg.lane} incarnation {seg.incarnation}: {seg.t0:.2f}–{seg.t1:.2f} s{steps}; {seg.end}")
        ax.rect(seg.t0, seg.t0 + max(seg.t1 - seg.t0, x_max * 0.002), y - half, y + half,
                "#c7c7c7" if is_node else _inc_color(seg.incarnation), opacity=0.9 if is_node else 0.75,
                gid=f"seg-{seg.lane}-{i}", title=title)
        if not is_node and seg.first_step is not None and (seg.t1 - seg.t0) > x_max * 0.08:
            ax.text(seg.t0 + x_max * 0.012, y, f"i{seg.incarnation} · steps {seg.first_step}–{seg.last_step}",
                    size=7, color="white", z=2)
    if view.t_stop is not None:
        for a in (ax_steps, ax):
            a.vspan(view.t_stop, x_max * 1.01, "#999999", opacity=0.15)
    _timeline_marks(view, ax_steps, ax, y_of)
    _align_left(ax_steps, ax)
    fig.extras.append(legend_svg(legend, ncol, _WIDTH / 2, legend_top))
    return fig.svg()


def _timeline_marks(view: RunView, ax_steps: Axes, ax: Axes, y_of: dict[str, int]) -> None:
    injected_at: set[float] = set()
    for mark, gid in zip(view.marks, mark_ids(view.marks), strict=True):
        title = f"{mark.t:.2f} s: {mark.label}"
        if mark.kind in ("recovery", "catchup", "job_stop"):
            color, dash, _ = _LINE_STYLE[mark.kind]
            ax.vline(mark.t, color, width=1.4, dash=dash, gid=gid, title=title)
            ax_steps.vline(mark.t, color, width=1.2, dash=dash)
            continue
        if mark.kind == "fault_injected" and mark.t not in injected_at:
            injected_at.add(mark.t)
            color, dash, _ = _LINE_STYLE["fault_injected"]
            ax.vline(mark.t, color, width=1.0, dash=dash, opacity=0.7, z=2)
            ax_steps.vline(mark.t, color, width=1.2, dash=dash)
        marker, color, size, _ = MARK_STYLE[mark.kind]
        y = y_of.get(mark.lane or "")
        if y is None:
            continue
        # an exit under the other marks: a detection or restart at the same moment says more
        ax.marker(mark.t, y, marker, color, size, edge=None if marker == "x" else "white",
                  z=4.5 if mark.kind == "rank_exit" else 5.0, gid=gid, title=title)
        if mark.to_lane and mark.to_lane in y_of and mark.to_lane != mark.lane:
            ax.arrow(mark.t, y, y_of[mark.to_lane], color, opacity=0.8, gid=f"{gid}-blame", title=mark.label)


_COVERAGE_STYLE = {"once": ("#2ca02c", "trained once, kept"), "duplicate": ("#ff7f0e", "kept, holds a repeated sample"),
                   "rolled_back": ("#9e9e9e", "trained, then rolled back")}


def coverage_svg(view: RunView, lost: int | None) -> str | None:
    """The samples lane: per step (x), what became of the samples each incarnation (row)
    trained: kept once, kept with a repeat, or rolled back with its incarnation's work."""
    if not view.coverage:
        return None
    incs = sorted({inc for _, inc, _ in view.coverage})
    legend = [LegendEntry(label, color, kind="patch") for k, (color, label) in _COVERAGE_STYLE.items()
              if k in {status for _, _, status in view.coverage}]
    top, height = 8 + TITLE_PT + 8, 27.0 * len(incs) + 8
    legend_top = top + height + _X_AXIS_PT + 10
    ncol = legend_columns(legend, 3, _WIDTH - 24)
    fig = Figure(_WIDTH, legend_top + LEGEND_ROW_PT * _legend_rows(len(legend), ncol) + 6, "coverage")
    ax = fig.add_axes(0, top, 0, height)
    steps = [step for step, _, _ in view.coverage]
    span = max(steps) - min(steps) + 1
    ax.xlim = (min(steps) - 1 - span * 0.02, max(steps) + span * 0.02)
    ax.ylim = (-0.6, len(incs) - 0.4)
    ax.xgrid = True
    ax.xlabel = "step"
    ax.set_yticks(range(len(incs)), [f"samples i{inc}" for inc in reversed(incs)])
    title = "Sample coverage (the exactly-once data checker)"
    if lost:
        title += f": {lost} expected samples never trained by the surviving run"
    ax.title = title
    for i, (step, inc, status) in enumerate(view.coverage):
        y = len(incs) - 1 - incs.index(inc)
        ax.rect(step - 1, step, y - 0.3, y + 0.3, _COVERAGE_STYLE[status][0], gid=f"cov-i{inc}-s{step}-{i}",
                title=f"step {step}, incarnation {inc}: {_COVERAGE_STYLE[status][1]}")
    _align_left(ax, ylabel=False)
    fig.extras.append(legend_svg(legend, ncol, _WIDTH / 2, legend_top))
    return fig.svg()


def loss_svg(view: RunView, fault_steps: list[tuple[str, int]]) -> str | None:
    """Loss per step of the reference rank (each incarnation in its color) over the baseline's
    (dashed), and below it the relative deviation at every step both reached."""
    if not view.losses and not view.baseline_losses:
        return None
    top, loss_h, gap, dev_h = 8 + TITLE_PT + 8, 170.0, 9.0, 72.0
    fig = Figure(_WIDTH, top + loss_h + gap + dev_h + _X_AXIS_PT + 8, "loss")
    ax = fig.add_axes(0, top, 0, loss_h)  # left and width below, once the tick labels are known
    ax_dev = fig.add_axes(0, top + loss_h + gap, 0, dev_h)
    ax.title = "Loss against the fault-free baseline"
    ax.ylabel = "loss"
    ax.xtick_labels = False
    ax_dev.ylabel, ax_dev.ylabel_size = "|Δ| / baseline (%)", 8.0
    ax_dev.xlabel = "step"
    legend = []
    if view.baseline_losses:
        xs, ys = zip(*view.baseline_losses, strict=True)
        # On top and dashed: where the run matches the baseline exactly, both stay visible.
        ax.line(xs, ys, "#222222", width=1.0, dash="4 3", z=4, gid="loss-baseline",
                title="fault-free baseline (same seed)")
        legend.append(LegendEntry("fault-free baseline", "#222222", dash="4 3", width=1.0))
    for inc, points in sorted(view.losses.items()):
        xs, ys = zip(*points, strict=True)
        ax.line(xs, ys, _inc_color(inc), width=1.4, opacity=0.9, gid=f"loss-i{inc}",
                title=f"incarnation {inc}: steps {xs[0]}–{xs[-1]}")
        legend.append(LegendEntry(f"this run, incarnation {inc}", _inc_color(inc), width=1.4))
    all_points = [p for points in view.losses.values() for p in points] + list(view.baseline_losses)
    ax.xlim = ax_dev.xlim = autoscale([s for s, _ in all_points] + [s for _, s in fault_steps])
    ax.ylim = autoscale([v for _, v in all_points])
    for fid, step in fault_steps:
        for a in (ax, ax_dev):
            a.vline(step, "#d62728", dash=_DASHED)
        ax.text(step, 1.0, fid, size=8, color="#d62728", dx=3, dy=10, y_fraction=True)
    _deviation(view, ax_dev)
    for a in (ax, ax_dev):
        a.xgrid = a.ygrid = True
    _align_left(ax, ax_dev)
    fig.extras.append(legend_box_svg(legend, _WIDTH - _RIGHT - 6, top + 6))
    return fig.svg()


def _deviation(view: RunView, ax: Axes) -> None:
    """|run - baseline| / |baseline| in % at every step both reached (a redone step: its last value)."""
    base = dict(view.baseline_losses)
    final: dict[int, float] = {}
    for inc in sorted(view.losses):
        final.update(dict(view.losses[inc]))
    common = sorted(set(final) & set(base))
    if not common:
        ax.note("no baseline to compare with", color="#777777")
        return
    devs = [100 * abs(final[s] - base[s]) / max(abs(base[s]), 1e-12) for s in common]
    ax.ylim = (0.0, autoscale(devs)[1]) if max(devs) > 0 else (0.0, 1.0)
    ax.line(common, devs, "#4c78a8", gid="loss-deviation", title=f"max relative deviation {max(devs):.3g} %")
    if max(devs) == 0:
        ax.note("identical to the baseline at every step", color="#2ca02c")


def suite_panels() -> tuple[tuple[str, str, float], ...]:
    """(metric, axis label, scale) of each panel: the catalogue's metrics with a
    ``figure_scale`` (a fraction is shown in %), labelled with their unit."""
    panels = []
    for spec in specs():
        if spec.figure_scale is None:
            continue
        unit = "%" if spec.kind == "fraction" else spec.unit
        panels.append((spec.key, f"{spec.label} ({unit})" if unit else spec.label, spec.figure_scale))
    return tuple(panels)


_OUTCOME_COLORS = {"pass": "#2ca02c", "fail": "#d62728", "error": "#9e9e9e"}
_PANEL_COLUMNS = 3


def suite_metrics_svg(rows: list[dict[str, Any]]) -> str | None:
    """One panel per metric: a dot per repeat (green pass, red fail, grey no verdict), a bar at
    the median and a red tick at the scenario's target. ``rows``: one per scenario, each
    ``{"scenario", "values": {metric: [(repeat, value, outcome)]}, "targets": {metric: bound}}``."""
    panels = [p for p in suite_panels() if any(r["values"].get(p[0]) for r in rows)]
    if not rows or not panels:
        return None
    names = [r["scenario"] for r in rows]
    # the scenario names are written at 20 degrees under each panel (sin 0.342, cos 0.940):
    # room for the widest
    names_h = max(text_width(name, 7.0) for name in names) * 0.342 + 7.0 * 0.94 + 8
    cell_w = _WIDTH / _PANEL_COLUMNS
    cell_h = TITLE_PT + 10 + 96.0 + names_h + 10
    panel_rows = -(-len(panels) // _PANEL_COLUMNS)
    fig = Figure(_WIDTH, 6 + cell_h * panel_rows, "suite")
    for index, (key, label, scale) in enumerate(panels):
        ax = fig.add_axes(0, 6 + index // _PANEL_COLUMNS * cell_h + TITLE_PT + 10, 0, 96.0)
        _suite_panel(ax, rows, key, label, scale)
    for col in range(_PANEL_COLUMNS):  # a column's panels share their left edge
        column = fig.axes[col::_PANEL_COLUMNS]
        if column:
            left = col * cell_w + _left_margin(*column, ylabel=False)
            for ax in column:
                ax.left, ax.width = left, (col + 1) * cell_w - 14 - left
    return fig.svg()


def _suite_panel(ax: Axes, rows: list[dict[str, Any]], key: str, label: str, scale: float) -> None:
    import statistics

    ax.title = label
    ax.ygrid = True
    ax.xlim = (-0.6, len(rows) - 0.4)
    ax.set_xticks(range(len(rows)), [r["scenario"] for r in rows])
    ax.xtick_rotation, ax.xtick_size = 20.0, 7.0
    seen: list[float] = []
    for x, row in enumerate(rows):
        values = row["values"].get(key) or []
        for j, (repeat, value, kind) in enumerate(values):
            jitter = (j - (len(values) - 1) / 2) * 0.08
            ax.marker(x + jitter, value * scale, "o", _OUTCOME_COLORS.get(kind, "#777777"), 5.0,
                      gid=f"suite-{key}-{row['scenario']}-{repeat}",
                      title=f"{row['scenario']}[{repeat}] {key} = {value:.4g} ({kind})")
            seen.append(value * scale)
        if values:
            median = statistics.median(v for _, v, _ in values) * scale
            ax.hline(median, "#222222", width=1.5, x0=x - 0.25, x1=x + 0.25)
        bound = (row.get("targets") or {}).get(key)
        if isinstance(bound, dict):
            for side in ("max", "min"):
                if isinstance(bound.get(side), (int, float)):
                    ax.hline(bound[side] * scale, "#d62728", width=1.2, dash=_DASHED, x0=x - 0.35, x1=x + 0.35)
                    seen.append(bound[side] * scale)
    # every metric here is >= 0; a fraction in %
    ax.ylim = (0.0, 100.0) if scale == 100.0 else (0.0, max(autoscale(seen)[1], 1e-9))
