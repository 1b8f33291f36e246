"""What ``trainchaos simulate`` shows: terminal text, ``<name>.md``, ``<name>.json``, ``<name>.png``.

Every figure is a mean over trials with its 95 % confidence interval; ETTR also gets the
5th-95th percentile range of single trials, which is what one real run of the job may see.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

from chaos.scale.simulate import Outcome

__all__ = ["render_markdown", "render_text", "write_outputs"]


def _pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def _ci_pct(s: dict[str, float]) -> str:
    return f"{_pct(s['mean'])} [95 % CI {100 * s['ci_low']:.2f}-{100 * s['ci_high']:.2f}]"


def _num(x: float, digits: int = 1) -> str:
    return f"{(0.0 if round(x, digits) == 0 else x):,.{digits}f}"  # no "-0" for float noise


def _ci(s: dict[str, float], digits: int = 1) -> str:
    return f"{_num(s['mean'], digits)} [{_num(s['ci_low'], digits)}, {_num(s['ci_high'], digits)}]"


def _seconds(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:,.0f} s" if x >= 10 else f"{x:.2g} s"


def _headline(s: dict[str, Any]) -> list[str]:
    job, rec, ck = s["job"], s["recovery"], s["checkpoint"]
    tiers = ck["tiers"]
    if len(tiers) == 1:
        t = tiers[0]
        policy = (f"every {_seconds(ck['interval_s'])} of training, {ck['mode']}, blocking "
                  f"{_seconds(t['blocking_s'])}" + (f", durable {_seconds(t['persist_s'])} later"
                                                     if t["persist_s"] else ""))
    else:
        policy = f"every {_seconds(ck['interval_s'])}, {ck['mode']}, tiers " + ", ".join(
            f"{t['name']} (every {t['every']}, blocking {_seconds(t['blocking_s'])})" for t in tiers)
    recovery = rec["mode"]
    if rec["mode"] == "spares":
        recovery += (f" ({rec['spare_nodes']} spare nodes, repair {rec['repair_h']:g} h"
                     + (f", else a node from outside after {_seconds(rec['replace_s'])}" if rec["replace_s"] is not None else "")
                     + ")")
    elif rec["mode"] == "restart" and rec["replace_s"]:
        recovery += f" (replacement node after {_seconds(rec['replace_s'])})"
    elif rec["mode"] == "elastic":
        recovery += f" (failed nodes out {rec['repair_h']:g} h)"
    lines = [f"{s['name']}: {job['devices']:,} devices ({job['nodes']:,} nodes x "
             f"{job['devices_per_node']}), {job['days']:g} days, {s['trials']:,} trials, seed {s['seed']}"]
    if s.get("source"):
        lines.append(f"  source: {s['source']}")
    lines.append(f"  checkpoint: {policy}; recovery: {recovery}")
    return lines


def _class_rows(s: dict[str, Any]) -> list[list[str]]:
    rows = []
    for c in s["classes"]:
        src = c["sources"]
        figures_from = src["detection_s"] if src["detection_s"] == src["restart_s"] else (
            f"{src['detection_s']} / {src['restart_s']}")
        rows.append([c["label"], _num(c["expected"]), _ci(c["interruptions"]), _pct(c["share"]),
                     _seconds(c["detection_s"]), _seconds(c["restart_s"]),
                     _num(c["lost_gpu_h"]["total"]["mean"], 0), figures_from])
    return rows


_CLASS_HEAD = ["class", "expected", "simulated [95 % CI]", "share", "detection", "restart",
               "lost GPU-h", "figures from"]


def _intervals_line(s: dict[str, Any]) -> str:
    iv = s["intervals"]
    parts = [f"configured {_seconds(iv['configured_s'])}"]
    if "young_s" in iv:
        parts += [f"Young {_seconds(iv['young_s'])}", f"Daly {_seconds(iv['daly_s'])}"]
    if "search" in iv:
        parts.append(f"simulation search {_seconds(iv['search']['optimum_s'])} "
                     f"(ETTR {_pct(iv['search']['ettr_at_optimum'])})")
    if "note" in iv:
        parts.append(iv["note"])
    mtbf = iv["mtbf_s"]
    extra = f"; job MTBF {mtbf / 3600:.2f} h, checkpoint cost {iv['checkpoint_cost_s']:g} s" if math.isfinite(mtbf) else ""
    return "checkpoint interval: " + " | ".join(parts) + extra


def _lost_line(s: dict[str, Any]) -> str:
    lost = s["lost_gpu_h"]
    parts = [f"failures {_num(lost['failures']['mean'], 0)}",
             f"checkpointing {_num(lost['checkpointing']['mean'], 0)}",
             f"planned maintenance {_num(lost['planned_maintenance']['mean'], 0)}"]
    if lost["elastic_capacity"]["mean"]:
        parts.append(f"elastic capacity {_num(lost['elastic_capacity']['mean'], 0)}")
    return (f"lost GPU-hours per run: {_ci(lost['total'], 0)} of {_num(s['job']['gpu_hours'], 0)}: "
            + ", ".join(parts))


def _sweep_rows(outcome: Outcome) -> list[list[str]]:
    rows = []
    for row in outcome.sweep:
        s = row["summary"]
        iv = s["intervals"]
        rows.append([*(str(v) for v in row["values"].values()),
                     _ci(s["interruptions"]["unplanned"]), _ci_pct(s["ettr"]), _pct(s["goodput"]["mean"]),
                     _num(s["lost_gpu_h"]["total"]["mean"], 0),
                     _seconds(iv.get("young_s")), _seconds(iv["search"]["optimum_s"]) if "search" in iv else "-"])
    return rows


def _sweep_head(outcome: Outcome) -> list[str]:
    return [*outcome.sweep_keys, "interruptions", "ETTR", "goodput", "lost GPU-h", "Young", "search optimum"]


_DESIGN_HEAD = ["design", "samples", "detection s", "restart s", "lost work", "ETTR", "goodput", "lost GPU-h"]


def _spread(median: float | None, spread: tuple[float, float] | list[float] | None) -> str:
    """``0.42 [0.31-0.60]``: a measured median and the range of the samples it came from."""
    if median is None:
        return "-"
    return f"{median:.2f}" + (f" [{spread[0]:.2f}-{spread[1]:.2f}]" if spread else "")


def _design_rows(outcome: Outcome) -> list[list[str]]:
    rows = []
    for row in outcome.designs:
        fig, s, runs = row["figures"], row["summary"], row["runs"]
        lost = ", ".join(f"{t}: {'rollback' if back else 'none'}" for t, back in row["rolled_back"].items())
        unusable = "".join(f"; {n} {t} unusable" for t, n in sorted(runs["unusable"].items()))
        rows.append([row["design"], f"{runs['samples']} ({', '.join(runs['fault_types'])}){unusable}",
                     _spread(fig["detection_s"], fig["detection_range"]),
                     _spread(fig["restart_s"], fig["restart_range"]), lost,
                     _ci_pct(s["ettr"]), _pct(s["goodput"]["mean"]), _num(s["lost_gpu_h"]["total"]["mean"], 0)])
    return rows


def _designs_intro(outcome: Outcome) -> str:
    return (f"per recovery design (--from-stacks {outcome.from_stacks}; the same failures drawn for each, "
            "costed with the design's measured medians [min-max of its samples]; lost work: none where "
            "no run of that fault type lost a step, else the simulated rollback; classes it did not "
            "measure, and unusable samples (no detection, undetected or unknown, or never recovered), keep the config's figures):")


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*head).rstrip(), *(fmt.format(*r).rstrip() for r in rows)]


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(r) + " |" for r in rows)]


def _body(s: dict[str, Any]) -> list[str]:
    inter = s["interruptions"]
    ettr = s["ettr"]
    first = s.get("first_order_ettr")
    ettr_line = (f"ETTR {_ci_pct(ettr)}; single runs p5-p95 {100 * ettr['p5']:.2f}-{100 * ettr['p95']:.2f} %"
                 + (f"; first-order closed form {_pct(first)}" if first is not None else ""))
    totals = (f"unplanned interruptions per run: {_ci(inter['unplanned'])} (Poisson mean "
              f"{_num(inter['expected_unplanned'])}); planned: {_num(inter['planned']['mean'])}")
    goodput = f"goodput {_ci_pct(s['goodput'])}"
    return [totals, ettr_line, goodput, _lost_line(s), _intervals_line(s)]


def render_text(outcome: Outcome) -> str:
    s = outcome.summary
    lines = _headline(s)
    if outcome.runs:
        r = outcome.runs
        lines.append(f"  --from-runs {r['dir']}: {r['journals']} journal(s), {r['samples']} measured "
                     f"fault(s) of type {', '.join(r['fault_types'])}"
                     + (f"; unusable (no detection: undetected or unknown; or unrecovered): {r['unusable']}" if r["unusable"] else ""))
    lines.append("")
    lines += _table(_CLASS_HEAD, _class_rows(s))
    lines.append("")
    lines += _body(s)
    if outcome.sweep:
        lines += ["", f"sweep ({', '.join(outcome.sweep_keys)}; same seed, so rows differ by the policy only):"]
        lines += _table(_sweep_head(outcome), _sweep_rows(outcome))
    if outcome.designs:
        lines += ["", _designs_intro(outcome)]
        lines += _table(_DESIGN_HEAD, _design_rows(outcome))
    return "\n".join(lines)


def render_markdown(outcome: Outcome) -> str:
    s = outcome.summary
    lines = [f"# Scale model: {s['name']}", "", *(f"{x.strip()}  " for x in _headline(s)), ""]
    lines += ["## Interruptions and lost GPU-hours by class", "", *_md_table(_CLASS_HEAD, _class_rows(s)), ""]
    lines += ["## Results", "", *(f"- {x}" for x in _body(s)), ""]
    if outcome.sweep:
        lines += [f"## Sweep: {', '.join(outcome.sweep_keys)}", "",
                  *_md_table(_sweep_head(outcome), _sweep_rows(outcome)), ""]
    if outcome.designs:
        lines += ["## Per recovery design", "", _designs_intro(outcome), "",
                  *_md_table(_DESIGN_HEAD, _design_rows(outcome)), ""]
    lines += [f"ETTR is kept training time over the window; intervals are 95 % confidence intervals "
              f"of the mean over {s['trials']:,} trials. The model and its assumptions: docs/scale.md.", ""]
    return "\n".join(lines)


def write_outputs(outcome: Outcome, out_dir: str) -> list[str]:
    """Write ``<name>.json``, ``<name>.md`` and ``<name>.png`` into ``out_dir``; their paths."""
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, outcome.name)
    paths = []
    with open(base + ".json", "w", encoding="utf-8") as fh:
        json.dump(_finite(outcome.to_json()), fh, indent=2, default=str, allow_nan=False)
        fh.write("\n")
    paths.append(base + ".json")
    with open(base + ".md", "w", encoding="utf-8") as fh:
        fh.write(render_markdown(outcome))
    paths.append(base + ".md")
    plot(outcome, base + ".png")
    paths.append(base + ".png")
    return paths


def _finite(value: Any) -> Any:
    """JSON has no infinity (an MTBF without failures): null instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def plot(outcome: Outcome, path: str) -> None:
    """Left: ETTR against the checkpoint interval (the search curve with Young/Daly), or against
    the swept value; right: lost GPU-hours by cause."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = outcome.summary
    if outcome.designs:  # drawn as a sweep whose one key is the design
        outcome = dataclasses.replace(outcome, sweep_keys=["design"], sweep=[
            {"values": {"design": row["design"]}, "summary": row["summary"]} for row in outcome.designs])
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    if outcome.sweep:
        _plot_sweep(left, outcome)
    else:
        _plot_search(left, s)
    _plot_lost(right, outcome)
    fig.suptitle(f"{s['name']}: {s['job']['devices']:,} devices, {s['job']['days']:g} days, "
                 f"{s['trials']:,} trials")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_search(ax: Any, s: dict[str, Any]) -> None:
    iv = s["intervals"]
    if "search" not in iv:
        ax.text(0.5, 0.5, iv.get("note", "no interval search"), ha="center", va="center")
        ax.set_axis_off()
        return
    curve = iv["search"]["curve"]
    ax.plot([p["interval_s"] for p in curve], [100 * p["ettr"] for p in curve], "o-", ms=3,
            label="simulated mean ETTR")
    marks = [("configured", iv["configured_s"], "grey"), ("Young", iv["young_s"], "tab:orange"),
             ("Daly", iv["daly_s"], "tab:green"), ("search optimum", iv["search"]["optimum_s"], "tab:red")]
    for label, x, color in marks:
        ax.axvline(x, color=color, ls="--", lw=1, label=f"{label} {x:,.0f} s")
    ax.set_xscale("log")
    ax.set_xlabel("checkpoint interval (training seconds)")
    ax.set_ylabel("ETTR (%)")
    ax.set_title("ETTR against the checkpoint interval")
    ax.legend(fontsize=8)


def _plot_sweep(ax: Any, outcome: Outcome) -> None:
    key = outcome.sweep_keys[0]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in outcome.sweep:
        rest = tuple((k, v) for k, v in row["values"].items() if k != key)
        groups.setdefault(rest, []).append(row)
    numeric = all(isinstance(r["values"][key], int | float) and not isinstance(r["values"][key], bool)
                  for r in outcome.sweep)
    for rest, rows in groups.items():
        xs = [r["values"][key] if numeric else str(r["values"][key]) for r in rows]
        means = [100 * r["summary"]["ettr"]["mean"] for r in rows]
        errs = [[100 * (r["summary"]["ettr"]["mean"] - r["summary"]["ettr"]["ci_low"]) for r in rows],
                [100 * (r["summary"]["ettr"]["ci_high"] - r["summary"]["ettr"]["mean"]) for r in rows]]
        label = ", ".join(f"{k}={v}" for k, v in rest) or "ETTR (95 % CI)"
        ax.errorbar(xs, means, yerr=errs, fmt="o-", capsize=3, label=label)
        spread = [[100 * (r["summary"]["ettr"]["mean"] - r["summary"]["ettr"]["p5"]) for r in rows],
                  [100 * (r["summary"]["ettr"]["p95"] - r["summary"]["ettr"]["mean"]) for r in rows]]
        ax.errorbar(xs, means, yerr=spread, fmt="none", alpha=0.3, lw=6)
    if numeric:
        values = [r["values"][key] for r in outcome.sweep]
        if min(values) > 0 and max(values) / min(values) >= 10:
            ax.set_xscale("log")
    ax.set_xlabel(key)
    ax.set_ylabel("ETTR (%)")
    ax.set_title("ETTR (bars: 95 % CI of the mean; shade: single runs p5-p95)")
    ax.legend(fontsize=8)


def _plot_lost(ax: Any, outcome: Outcome) -> None:
    if outcome.sweep:
        _plot_lost_sweep(ax, outcome)
        return
    s = outcome.summary
    parts = [("detection", "detection"), ("restart", "restart"),
             ("waiting_for_node", "waiting for a node"), ("lost_work", "lost work (rollback)")]
    classes = sorted(s["classes"], key=lambda c: c["lost_gpu_h"]["total"]["mean"], reverse=True)
    shown, rest = classes[:8], classes[8:]
    rows: list[tuple[str, dict[str, float]]] = [
        (c["label"], {k: c["lost_gpu_h"][k] for k, _ in parts}) for c in shown]
    if rest:
        rows.append((f"{len(rest)} other classes",
                     {k: sum(c["lost_gpu_h"][k] for c in rest) for k, _ in parts}))
    lost = s["lost_gpu_h"]
    for key, label in (("checkpointing", "checkpoint blocking"), ("planned_maintenance", "planned maintenance"),
                       ("elastic_capacity", "elastic lost capacity")):
        if lost[key]["mean"]:
            rows.append((label, {"other": lost[key]["mean"]}))
    labels = [r[0] for r in rows][::-1]
    left = [0.0] * len(rows)
    for key, label in [*parts, ("other", "overhead (no failure)")]:
        widths = [r[1].get(key, 0.0) for r in rows][::-1]
        if any(widths):
            ax.barh(labels, widths, left=left, label=label)
            left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_xlabel("GPU-hours per run (mean)")
    ax.set_title("lost GPU-hours by cause")
    ax.tick_params(axis="y", labelsize=8)
    ax.legend(fontsize=8)


def _plot_lost_sweep(ax: Any, outcome: Outcome) -> None:
    causes = [("failures", "failures"), ("checkpointing", "checkpointing"),
              ("planned_maintenance", "planned maintenance"), ("elastic_capacity", "elastic capacity")]
    labels = [", ".join(str(v) for v in r["values"].values()) for r in outcome.sweep]
    summaries = [r["summary"] for r in outcome.sweep]
    bottom = [0.0] * len(summaries)
    for key, label in causes:
        heights = [s["lost_gpu_h"][key]["mean"] for s in summaries]
        if any(heights):
            ax.bar(labels, heights, bottom=bottom, label=label)
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_ylabel("GPU-hours per run (mean)")
    ax.set_xlabel(", ".join(outcome.sweep_keys))
    ax.set_title("lost GPU-hours by cause")
    ax.legend(fontsize=8)
