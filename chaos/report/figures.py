"""The HTML report's figures, drawn with matplotlib and inlined as SVG.

Why matplotlib to SVG (and not plotly): the page must open with no network access, and an
inline plotly bundle is ~4.6 MB of JavaScript in every report (a suite of 10 runs: 50 MB);
an SVG timeline is tens of kB, needs no script at all (so it also renders in CI artifact
viewers that block scripts), and keeps its text as text (``svg.fonttype: none``): lane names
and labels can be searched and selected. matplotlib is already the project's plotting library
(``trainchaos simulate``). What is lost, zoom and hover, is covered by an SVG ``<title>`` on
every mark (the browser shows it as a tooltip) and by the marks table under the figure.

Every lane and mark carries a stable element id (``lane-rank-3``, ``mark-detected-2``), so a
test or a user's script can find them; matplotlib's own ids are prefixed per figure, so that
several figures can share one HTML document without clashing.
"""

from __future__ import annotations

import io
import re
from html import escape
from typing import Any

from chaos.metrics.catalogue import specs
from chaos.report.runview import Mark, RunView

__all__ = ["MARK_STYLE", "loss_svg", "suite_metrics_svg", "suite_panels", "timeline_svg"]

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
_LINE_STYLE: dict[str, tuple[str, str, str]] = {
    # kind -> (color, linestyle, legend label): run-wide moments, drawn across every lane
    "fault_injected": ("#d62728", "--", "injection"),
    "recovery": ("#2ca02c", "-", "recovery (first productive step)"),
    "catchup": ("#17becf", "-.", "catch-up (pre-fault step reached again)"),
    "job_stop": ("#555555", ":", "trainchaos stops the job"),
}
_INCARNATION_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#eeca3b")


def _inc_color(incarnation: int) -> str:
    return _INCARNATION_COLORS[incarnation % len(_INCARNATION_COLORS)]


def _figure(width: float, height: float, layout: str | None = None):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout=layout)


_PT = 1 / 72  # inches
_TICK_PT, _LABEL_PT, _TITLE_PT, _LEGEND_ROW_PT = 10.0, 13.0, 20.0, 16.0
_EM = 0.62
"""Width of an average character of the default sans-serif in ems (digits are 0.64), rounded
up: a margin too wide by a few points is invisible, one too narrow cuts a label."""


def _fixed_layout(fig: Any, *, tick_chars: int, ylabel: bool = True, title: bool = True, xlabel: bool = True,
                  legend_rows: int = 0, rows: int = 1, gap_in: float = 0.15) -> None:
    """Margins computed from what the figure holds (the longest y tick label, a y label, a
    title, x tick labels and label, legend rows below), not measured: matplotlib's
    constrained layout measures by drawing the figure once more, which was 40 % of a run
    page's rendering (0.56 -> 0.35-0.39 s of CPU a page; every run writes two)."""
    width, height = fig.get_size_inches()
    left = 0.1 + ((_LABEL_PT if ylabel else 0.0) + tick_chars * _TICK_PT * _EM + 7.0) * _PT
    bottom = 0.08 + (_TICK_PT * 1.3 + 7.0 + (_LABEL_PT if xlabel else 0.0) + legend_rows * _LEGEND_ROW_PT) * _PT
    top = 0.08 + (_TITLE_PT if title else 0.0) * _PT
    right = 0.15
    axes_height = (height - top - bottom - gap_in * (rows - 1)) / rows
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height,
                        hspace=gap_in / axes_height if rows > 1 else None)


def _tick_chars(ax: Any) -> int:
    """Characters of the longest y tick label ``ax`` will draw, from its locator and formatter
    (no drawing)."""
    low, high = sorted(ax.get_ylim())  # autoscales now: the ticks follow the limits
    values = [v for v in ax.yaxis.get_major_locator()() if low <= v <= high]
    return max((len(label) for label in ax.yaxis.get_major_formatter().format_ticks(values)), default=1)


def _legend_below(fig: Any, handles: list[Any], ncol: int) -> None:
    """The legend in the strip ``_fixed_layout(legend_rows=...)`` left under the axes."""
    fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.08 / fig.get_size_inches()[1]),
               ncol=ncol, fontsize=8, frameon=False)


def _legend_rows(count: int, ncol: int) -> int:
    return -(-count // ncol)


def _to_svg(fig: Any, prefix: str, titles: dict[str, str]) -> str:
    """The figure as an inline ``<svg>`` element: no XML prolog, matplotlib's ids prefixed,
    a ``<title>`` (tooltip) inside every group whose id is in ``titles``."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "trainchaos",
                                "font.family": "sans-serif"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.S)  # RDF boilerplate
    keep = set(titles)

    def rename(match: re.Match[str]) -> str:
        ident = match.group(2)
        return match.group(0) if ident in keep else f'{match.group(1)}"{prefix}-{ident}"'

    text = re.sub(r'(\bid=)"([^"]+)"', rename, text)
    text = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}-{m.group(1)})", text)
    text = re.sub(r'(xlink:href|href)="#([^"]+)"', lambda m: f'{m.group(1)}="#{prefix}-{m.group(2)}"', text)
    for ident, title in titles.items():
        text = text.replace(f'<g id="{ident}">', f'<g id="{ident}"><title>{escape(title)}</title>', 1)
    # Scale with the page: drop the fixed size in points, keep the viewBox.
    text = re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1', text, count=1)
    return text.replace("<svg", f'<svg class="figure" role="img" aria-label="{escape(prefix)}"', 1)


def mark_ids(marks: list[Mark]) -> list[str]:
    """A stable id per mark: ``mark-<kind>-<n>``, n counting within the kind."""
    seen: dict[str, int] = {}
    ids = []
    for mark in marks:
        seen[mark.kind] = seen.get(mark.kind, 0) + 1
        ids.append(f"mark-{mark.kind.replace('_', '-')}-{seen[mark.kind]}")
    return ids


def timeline_svg(view: RunView) -> str:
    """Top: the step each rank reached over time (a drop is a rollback to a checkpoint).
    Bottom: one lane per node and rank, each process's life as a bar (color: incarnation),
    and every mark on the lane of the process it concerns."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch

    lanes = view.lane_names()
    n = max(1, len(lanes))
    fig = _figure(12, 2.6 + 0.42 * n + 0.9)
    grid = fig.add_gridspec(2, 1, height_ratios=[2.4, 0.42 * n + 0.4])
    ax_steps = fig.add_subplot(grid[0])
    ax = fig.add_subplot(grid[1], sharex=ax_steps)
    titles: dict[str, str] = {}
    x_max = max(view.duration, 1.0)

    # -- steps over time
    for (src, inc), points in sorted(view.steps.items()):
        xs, ys = zip(*points, strict=True)
        ax_steps.plot(xs, ys, color=_inc_color(inc), lw=1.6 if src == "rank-0" else 0.8,
                      alpha=0.95 if src == "rank-0" else 0.55, gid=f"steps-{src}-i{inc}")
        titles[f"steps-{src}-i{inc}"] = f"{src} incarnation {inc}: steps {ys[0]}–{ys[-1]}"
    if view.steps_target:
        ax_steps.axhline(view.steps_target, color="#bbbbbb", lw=0.8, ls=":")
    ax_steps.set_ylabel("step")
    ax_steps.set_title("Steps over time (a drop is a rollback to a checkpoint)", loc="left", fontsize=10)
    ax_steps.grid(True, alpha=0.25)
    ax_steps.tick_params(labelbottom=False)

    # -- lanes
    y_of = {name: n - 1 - i for i, name in enumerate(lanes)}
    for lane in view.lanes:
        y = y_of[lane.name]
        if lane.kind == "node":
            ax.axhspan(y - 0.5, y + 0.5, color="#f2f2f2", zorder=0, lw=0)
    ax.set_yticks([y_of[name] for name in lanes], labels=lanes)
    for label in ax.get_yticklabels():
        if label.get_text().startswith("node"):
            label.set_fontweight("bold")
    for i, seg in enumerate(view.segments):
        if seg.lane not in y_of:
            continue
        y = y_of[seg.lane]
        is_node = seg.lane.startswith("node")
        gid = f"seg-{seg.lane}-{i}"
        ax.barh(y, max(seg.t1 - seg.t0, x_max * 0.002), left=seg.t0, height=0.5 if is_node else 0.62,
                color="#c7c7c7" if is_node else _inc_color(seg.incarnation), alpha=0.9 if is_node else 0.75,
                edgecolor="none", zorder=1, gid=gid)
        steps = "" if seg.first_step is None else f", steps {seg.first_step}–{seg.last_step}"
        titles[gid] = (f"{seg.lane}: alive {seg.t0:.2f}–{seg.t1:.2f} s" if is_node else
                       f"{seg.lane} incarnation {seg.incarnation}: {seg.t0:.2f}–{seg.t1:.2f} s{steps}; {seg.end}")
        if not is_node and seg.first_step is not None and (seg.t1 - seg.t0) > x_max * 0.08:
            ax.text(seg.t0 + x_max * 0.012, y, f"i{seg.incarnation} · steps {seg.first_step}–{seg.last_step}",
                    va="center", ha="left", fontsize=7, color="white", zorder=2, clip_on=True)
    # Invisible lane markers with the ids tests and scripts look for.
    for name in lanes:
        ax.plot([0], [y_of[name]], alpha=0, gid=f"lane-{name}")
        titles[f"lane-{name}"] = name

    if view.t_stop is not None:
        for a in (ax_steps, ax):
            a.axvspan(view.t_stop, x_max, color="#999999", alpha=0.15, lw=0, zorder=0)

    ids = mark_ids(view.marks)
    drawn_lines: set[tuple[str, float]] = set()
    for mark, gid in zip(view.marks, ids, strict=True):
        titles[gid] = f"{mark.t:.2f} s: {mark.label}"
        if mark.kind in ("recovery", "catchup", "job_stop"):
            color, style, _ = _LINE_STYLE[mark.kind]
            ax.axvline(mark.t, color=color, ls=style, lw=1.4, zorder=3, gid=gid)
            ax_steps.axvline(mark.t, color=color, ls=style, lw=1.2, zorder=3)
            continue
        if mark.kind == "fault_injected" and ("inject", mark.t) not in drawn_lines:
            drawn_lines.add(("inject", mark.t))
            color, style, _ = _LINE_STYLE["fault_injected"]
            ax.axvline(mark.t, color=color, ls=style, lw=1.0, alpha=0.7, zorder=2)
            ax_steps.axvline(mark.t, color=color, ls=style, lw=1.2, zorder=3)
        marker, color, size, _ = MARK_STYLE[mark.kind]
        y = y_of.get(mark.lane or "", None)
        if y is None:
            continue
        ax.plot([mark.t], [y], marker=marker, color=color, markersize=size, ls="none",
                markeredgecolor="white" if marker not in ("x", "|") else color, markeredgewidth=0.6,
                zorder=5, gid=gid)
        if mark.to_lane and mark.to_lane in y_of and mark.to_lane != mark.lane:
            arrow = FancyArrowPatch((mark.t, y), (mark.t, y_of[mark.to_lane]), arrowstyle="-|>",
                                    mutation_scale=9, color=color, lw=0.9, alpha=0.8, zorder=4,
                                    connectionstyle="arc3,rad=0.25", gid=f"{gid}-blame")
            ax.add_patch(arrow)
            titles[f"{gid}-blame"] = mark.label

    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlim(0, x_max * 1.01)
    ax.set_xlabel("seconds since the run started")
    ax.grid(True, axis="x", alpha=0.25)
    kinds = {m.kind for m in view.marks}
    handles = [Line2D([], [], marker=MARK_STYLE[k][0], color=MARK_STYLE[k][1], ls="none",
                      markersize=7, label=MARK_STYLE[k][3]) for k in MARK_STYLE if k in kinds]
    handles += [Line2D([], [], color=_LINE_STYLE[k][0], ls=_LINE_STYLE[k][1], label=_LINE_STYLE[k][2])
                for k in _LINE_STYLE if k in kinds]
    incs = sorted({s.incarnation for s in view.segments if not s.lane.startswith("node")})
    handles += [Line2D([], [], color=_inc_color(i), lw=6, alpha=0.75, label=f"incarnation {i}") for i in incs]
    ncol = min(5, len(handles)) or 1
    top_max = max((step for points in view.steps.values() for _, step in points), default=0)
    # node lanes are labelled in bold: a character more
    lane_chars = [len(name) + (1 if name.startswith("node") else 0) for name in lanes]
    _fixed_layout(fig, tick_chars=max([*lane_chars, len(str(max(top_max, view.steps_target or 0)))]),
                  legend_rows=_legend_rows(len(handles), ncol), rows=2, gap_in=0.12)
    if handles:
        _legend_below(fig, handles, ncol)
    return _to_svg(fig, "timeline", titles)


_COVERAGE_STYLE = {"once": ("#2ca02c", "trained once, kept"), "duplicate": ("#ff7f0e", "kept, holds a repeated sample"),
                   "rolled_back": ("#9e9e9e", "trained, then rolled back")}


def coverage_svg(view: RunView, lost: int | None) -> str | None:
    """The samples lane: per step (x), what became of the samples each incarnation (row)
    trained: kept once, kept with a repeat, or rolled back with its incarnation's work."""
    if not view.coverage:
        return None
    from matplotlib.patches import Patch

    incs = sorted({inc for _, inc, _ in view.coverage})
    fig = _figure(12, 0.9 + 0.38 * len(incs) + 0.6)
    ax = fig.add_subplot()
    titles: dict[str, str] = {}
    for i, (step, inc, status) in enumerate(view.coverage):
        y = len(incs) - 1 - incs.index(inc)
        gid = f"cov-i{inc}-s{step}-{i}"
        ax.barh(y, 1.0, left=step - 1, height=0.6, color=_COVERAGE_STYLE[status][0], edgecolor="none", gid=gid)
        titles[gid] = f"step {step}, incarnation {inc}: {_COVERAGE_STYLE[status][1]}"
    ax.set_yticks(range(len(incs)), labels=[f"samples i{inc}" for inc in reversed(incs)])
    ax.set_xlabel("step")
    ax.set_ylim(-0.6, len(incs) - 0.4)
    title = "Sample coverage (the exactly-once data checker)"
    if lost:
        title += f": {lost} expected samples never trained by the surviving run"
    ax.set_title(title, loc="left", fontsize=10)
    ax.grid(True, axis="x", alpha=0.25)
    shown = {status for _, _, status in view.coverage}
    handles = [Patch(color=c, label=label) for k, (c, label) in _COVERAGE_STYLE.items() if k in shown]
    _fixed_layout(fig, tick_chars=max(len(f"samples i{inc}") for inc in incs), ylabel=False,
                  legend_rows=_legend_rows(len(handles), 3))
    _legend_below(fig, handles, 3)
    return _to_svg(fig, "coverage", titles)


def loss_svg(view: RunView, fault_steps: list[tuple[str, int]]) -> str | None:
    """Loss per step of the reference rank (each incarnation in its color) over the baseline's
    (dashed), and below it the relative deviation at every step both reached."""
    if not view.losses and not view.baseline_losses:
        return None
    fig = _figure(12, 4.2)
    grid = fig.add_gridspec(2, 1, height_ratios=[3, 1.3])
    ax = fig.add_subplot(grid[0])
    ax_dev = fig.add_subplot(grid[1], sharex=ax)
    titles: dict[str, str] = {}
    if view.baseline_losses:
        xs, ys = zip(*view.baseline_losses, strict=True)
        # On top and dashed: where the run matches the baseline exactly, both stay visible.
        ax.plot(xs, ys, color="#222222", ls=(0, (4, 3)), lw=1.0, label="fault-free baseline", zorder=4,
                gid="loss-baseline")
        titles["loss-baseline"] = "fault-free baseline (same seed)"
    for inc, points in sorted(view.losses.items()):
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, color=_inc_color(inc), lw=1.4, alpha=0.9, label=f"this run, incarnation {inc}",
                gid=f"loss-i{inc}")
        titles[f"loss-i{inc}"] = f"incarnation {inc}: steps {xs[0]}–{xs[-1]}"
    for fid, step in fault_steps:
        for a in (ax, ax_dev):
            a.axvline(step, color="#d62728", ls="--", lw=1.0)
        ax.annotate(fid, (step, 1), xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", color="#d62728", fontsize=8)
    ax.set_ylabel("loss")
    ax.set_title("Loss against the fault-free baseline", loc="left", fontsize=10)
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize=8, loc="upper right")
    ax.tick_params(labelbottom=False)
    base = dict(view.baseline_losses)
    final: dict[int, float] = {}
    for inc in sorted(view.losses):
        final.update(dict(view.losses[inc]))  # a redone step: its last value is the one kept
    common = sorted(set(final) & set(base))
    if common:
        devs = [abs(final[s] - base[s]) / max(abs(base[s]), 1e-12) for s in common]
        ax_dev.plot(common, [100 * d for d in devs], color="#4c78a8", lw=1.0, gid="loss-deviation")
        titles["loss-deviation"] = f"max relative deviation {100 * max(devs):.3g} %"
        if max(devs) == 0:
            ax_dev.text(0.5, 0.5, "identical to the baseline at every step", transform=ax_dev.transAxes,
                        ha="center", va="center", fontsize=9, color="#2ca02c")
    else:
        ax_dev.text(0.5, 0.5, "no baseline to compare with", transform=ax_dev.transAxes,
                    ha="center", va="center", fontsize=9, color="#777777")
    ax_dev.set_ylabel("|Δ| / baseline (%)", fontsize=8)
    ax_dev.set_xlabel("step")
    ax_dev.grid(True, alpha=0.25)
    for _ in range(2):  # the ticks depend on the axes' size, which depends on the ticks' labels
        _fixed_layout(fig, tick_chars=max(_tick_chars(ax), _tick_chars(ax_dev)), rows=2, gap_in=0.12)
    return _to_svg(fig, "loss", titles)


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


def suite_metrics_svg(rows: list[dict[str, Any]]) -> str | None:
    """One panel per metric: a dot per repeat (green pass, red fail, grey no verdict), a bar at
    the median and a red tick at the scenario's target. ``rows``: one per scenario, each
    ``{"scenario", "values": {metric: [(repeat, value, outcome)]}, "targets": {metric: bound}}``."""
    panels = [p for p in suite_panels() if any(r["values"].get(p[0]) for r in rows)]
    if not rows or not panels:
        return None
    import statistics

    # constrained: the panels' rotated scenario names are what the layout must make room for
    fig = _figure(12, 0.8 + 1.9 * ((len(panels) + 2) // 3), layout="constrained")
    titles: dict[str, str] = {}
    names = [r["scenario"] for r in rows]
    for index, (key, label, scale) in enumerate(panels):
        ax = fig.add_subplot((len(panels) + 2) // 3, 3, index + 1)
        for x, row in enumerate(rows):
            values = row["values"].get(key) or []
            for j, (repeat, value, kind) in enumerate(values):
                gid = f"suite-{key}-{row['scenario']}-{repeat}"
                jitter = (j - (len(values) - 1) / 2) * 0.08
                ax.plot([x + jitter], [value * scale], "o", color=_OUTCOME_COLORS.get(kind, "#777777"),
                        markersize=5, gid=gid)
                titles[gid] = f"{row['scenario']}[{repeat}] {key} = {value:.4g} ({kind})"
            if values:
                median = statistics.median(v for _, v, _ in values) * scale
                ax.hlines(median, x - 0.25, x + 0.25, color="#222222", lw=1.5)
            bound = (row.get("targets") or {}).get(key)
            if isinstance(bound, dict):
                for side in ("max", "min"):
                    if isinstance(bound.get(side), (int, float)):
                        ax.hlines(bound[side] * scale, x - 0.35, x + 0.35, color="#d62728", lw=1.2, ls="--")
        ax.set_ylim(0, 100 if scale == 100.0 else None)  # every metric here is >= 0; a fraction in %
        ax.set_title(label, fontsize=9, loc="left")
        ax.set_xticks(range(len(names)), labels=names, rotation=20, ha="right", fontsize=7)
        ax.set_xlim(-0.6, len(names) - 0.4)
        ax.grid(True, axis="y", alpha=0.25)
    return _to_svg(fig, "suite", titles)
