"""The game day's report: ``report.json`` (everything) and ``report.md`` (for the postmortem
doc): the outcome, the timeline, every decision and operator note, the faults with what
they touched and when they were reverted, and the measured metrics."""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

from chaos.jsonsafe import jsonable

if TYPE_CHECKING:
    from chaos.gameday.session import GameDay

__all__ = ["write_report"]


def _iso(t: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int((t % 1) * 1000):03d}" if t else "-"


def write_report(gd: GameDay, status: str, reason: str, exit_code: int) -> str:
    faults = []
    for active in [*gd.done, *gd.active.values()]:
        detections = [d for d in gd.observer.detections if (d.get("t") or 0) >= active.t_inject
                      and (active.t_revert is None or (d.get("t") or 0) <= active.t_revert + 30)]
        first = detections[0] if detections else None
        faults.append({
            "step": active.name, "fault_id": active.fault.fault_id, "type": active.fault.type_name,
            "target": active.fault.target.to_dict(), "record": active.record, "t_inject": active.t_inject,
            "t_revert": active.t_revert, "revert_error": active.revert_error,
            "detection_s": round(first["t"] - active.t_inject, 3) if first else None,
            "detected_by": first.get("src") if first else None,
            "suspect": first.get("suspect") if first else None,
        })
    data: dict[str, Any] = {
        "format": 1, "plan": gd.plan.model_dump(), "plan_path": os.path.abspath(gd.plan_path),
        "game_day_id": gd.id, "run_id": gd.run.spec.run_id, "run_dir": gd.run.spec.run_dir,
        "status": status, "reason": reason, "exit_code": exit_code,
        "started": gd.t0, "ended": time.time(), "reference_pace": gd.observer.reference_pace,
        "timeline": gd.timeline, "decisions": gd.decisions, "notes": gd.notes, "faults": faults,
        "metrics": gd.snapshots, "detections": gd.observer.detections,
    }
    with open(os.path.join(gd.out_dir, "report.json"), "w", encoding="utf-8") as fh:
        json.dump(jsonable(data), fh, indent=1, default=str)
    path = os.path.join(gd.out_dir, "report.md")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(_markdown(data))
    return path


def _markdown(d: dict[str, Any]) -> str:
    lines = [f"# Game day: {d['plan']['name']}", "",
             f"- run: `{d['run_id']}` ({d['run_dir']})",
             f"- outcome: **{d['status']}** ({d['reason']}), exit {d['exit_code']}",
             f"- from {_iso(d['started'])} to {_iso(d['ended'])} ({d['ended'] - d['started']:.1f} s)",
             f"- stop conditions: {', '.join(d['plan']['stop_when']) or 'none'}",
             f"- pace before the first inject: {d['reference_pace']:.3g} steps/s" if d["reference_pace"]
             else "- pace before the first inject: not measured (no inject ran)", "",
             "## Timeline", "", "| time | +s | step | action | what | outcome |", "|---|---|---|---|---|---|"]
    for e in d["timeline"]:
        step = "" if e.get("step") is None else str(e["step"])
        what = str(e["what"]).replace("|", "\\|")
        lines.append(f"| {_iso(e['t'])} | {e['rel_s']:.1f} | {step} | {e['action']} | {what} | {e['outcome']} |")
    lines += ["", "## Decisions", ""]
    lines += [f"- {_iso(x['t'])} step {x['step']}: **{x['decision']}** (by {x['by']})" for x in d["decisions"]] or ["- none"]
    lines += ["", "## Operator notes", ""]
    lines += [f"- {_iso(n['t'])} step {n['step']}: " + (f"Q: {n['question']} A: " if n.get("question") else "") + n["text"]
              for n in d["notes"]] or ["- none"]
    lines += ["", "## Faults", "", "| step | type | target | injected | reverted | detection | suspect |",
              "|---|---|---|---|---|---|---|"]
    for f in d["faults"]:
        target = ", ".join(f"{k} {v}" for k, v in f["target"].items() if v and k != "pids") or "-"
        det = f"{f['detection_s']:.2f} s by {f['detected_by']}" if f["detection_s"] is not None else "undetected"
        rev = _iso(f["t_revert"]) + (f" (error: {f['revert_error']})" if f["revert_error"] else "")
        lines.append(f"| {f['step']} | {f['type']} | {target} | {_iso(f['t_inject'])} | {rev} | {det} | {f['suspect'] or '-'} |")
    lines += ["", "## Metrics", "", "| when | step | steps/s | goodput | dead s | detections | containers running |",
              "|---|---|---|---|---|---|---|"]
    for m in d["metrics"]:
        lines.append(f"| {m['label']} ({_iso(m['t'])}) | {m['step']:g} | {m['steps_per_s']:g} | {m['goodput']:g} | "
                     f"{m['dead_s']:g} | {m['detections']:g} | {m['containers_running']:g} |")
    return "\n".join(lines) + "\n"
