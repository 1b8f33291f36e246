"""The game day's report: ``report.json`` (everything) and ``report.md`` (for the postmortem
doc): the outcome, the timeline, every decision and operator note, the steps skipped and
why, the faults with what they touched, when they were reverted and the detections given to
each, and the measured metrics. The session assembles the data (``GameDay._report``); this
module only writes it, and imports nothing of the session."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from chaos.util.jsonsafe import jsonable

__all__ = ["write_report"]


def _iso(t: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int((t % 1) * 1000):03d}" if t else "-"


def write_report(out_dir: str, data: dict[str, Any]) -> str:
    """``report.json`` (``data`` as the session assembled it) and ``report.md``; returns the
    markdown's path."""
    with open(os.path.join(out_dir, "report.json"), "w", encoding="utf-8") as fh:
        json.dump(jsonable(data), fh, indent=1, default=str)
    path = os.path.join(out_dir, "report.md")
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
    lines += ["", "## Skipped steps", ""]
    lines += [f"- {_iso(x['t'])} step {x['step']} ({x['name']}): {x['reason']}" for x in d["skipped"]] or ["- none"]
    lines += ["", "## Faults", "", "Each detection of the run since the plan started, given to the newest fault "
              "injected before it (the `detections` metric counts the same events).", "",
              "| step | type | target | injected | reverted | first detection | suspect | detections |",
              "|---|---|---|---|---|---|---|---|"]
    for f in d["faults"]:
        target = ", ".join(f"{k} {v}" for k, v in f["target"].items() if v and k != "pids") or "-"
        # Nothing reported and nothing could have: the tool was blind, the job was not judged.
        det = (f"{f['detection_s']:.2f} s by {f['detected_by']}" if f["detection_s"] is not None
               else f"unknown ({f['detection_unknown']})" if f.get("detection_unknown") else "undetected")
        rev = _iso(f["t_revert"]) + (f" (error: {f['revert_error']})" if f["revert_error"] else "")
        lines.append(f"| {f['step']} | {f['type']} | {target} | {_iso(f['t_inject'])} | {rev} | {det} | "
                     f"{f['suspect'] or '-'} | {f['detections']} |")
    if d["detections_before_faults"]:
        lines.append(f"| (before any inject) | | | | | | | {d['detections_before_faults']} |")
    lines += ["", "## Metrics", "", "| when | step | steps/s | goodput | dead s | detections | nodes running |",
              "|---|---|---|---|---|---|---|"]
    for m in d["metrics"]:
        lines.append(f"| {m['label']} ({_iso(m['t'])}) | {m['step']:g} | {m['steps_per_s']:g} | {m['goodput']:g} | "
                     f"{m['dead_s']:g} | {m['detections']:g} | {m['nodes_running']:g} |")
    return "\n".join(lines) + "\n"
