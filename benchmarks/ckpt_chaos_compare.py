"""trainchaos's crash-point sweep side by side with ckpt-chaos 0.1.8 (issue 42, build 3).

    python benchmarks/ckpt_chaos_compare.py [--targets plain,loop_ddp,lightning_trainer,hf_trainer]
                                            [--out reports/ckpt-chaos-compare]

For each target, on this machine, one tool after the other (never both at once):

- ``plain``: ``benchmarks/ckpt_compare/plain_loop.py``, a plain ``torch.save`` loop with the
  classic bugs (the pointer written first, the data under its final name, no fsync). The SAME
  script under both: ``ckpt-chaos run -- python plain_loop.py --out {out}`` (its default modes,
  before and torn, at every file event of the whole run) and ``trainchaos run --crash-points
  --crash-model both`` on a ``command`` workload running it (every point of the save of step 20).
- ``loop_ddp``: ``ckpt-chaos bench loop_ddp`` (strategy direct, one rank, as it runs it), and
  trainchaos on ``benchmarks/ckpt_compare/loop_direct.py``, the same save protocol as a
  script of its own (the target's phases are driven by ckpt-chaos's runner, not a command).
- ``lightning_trainer``: ``ckpt-chaos bench lightning_trainer``, and trainchaos on
  ``benchmarks/ckpt_compare/lightning_loop.py`` (ModelCheckpoint every epoch of 5 steps,
  ``save_last``, resume from ``last``).
- ``loop_ddp_rename``: ``ckpt-chaos bench loop_ddp --strategy tmp_rename_rank0`` (the
  protocol right for a process crash: a temporary folder renamed into place, no fsync), and
  trainchaos's power model on ``loop_direct.py --tmp-rename``: the case only a power loss shows.
- ``hf_trainer``: ``ckpt-chaos bench hf_trainer`` needs ``transformers``; where it is not
  installed, neither tool can run an HF Trainer here, and the row says so.

Per target: points each tool tested and flagged; the points of the swept save that
ckpt-chaos flags, each matched to trainchaos's point at the same file operation (``before``
an event: trainchaos's ``bK`` of that operation; ``torn``: ``tK`` of the file's close), and
whether trainchaos flags it too (``missed`` must be empty); the points only trainchaos flags
(power losses: the cases only a power-loss model shows; and process points ckpt-chaos has no
equivalent of); cost per crash point, the median wall seconds, each tool run with one point
at a time (``--jobs 1``: ckpt-chaos's bench defaults to 3 at once). ckpt-chaos's per-point
time is the gap between consecutive points' results (each a crash run and a resume run);
trainchaos's is each crash run's own wall time (a job that crashes and restarts itself,
ended once the restart has reported its state at its first step past the load, or at once
when the restart fails: ``chaos.runner.crashend``). ckpt-chaos's reference and dry runs, and
trainchaos's trace (which is also its twin), are counted apart (``setup_s``).

Writes ``<out>/compare.json`` and prints the markdown table docs/checkers.md carries. Heavy
(every point is a real job): run it alone (under the integ lock on a shared machine).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent / "ckpt_compare"
BIN = Path(sys.executable).parent
SCRIPTS = {"plain": "plain_loop.py", "loop_ddp": "loop_direct.py", "loop_ddp_rename": "loop_direct.py",
           "lightning_trainer": "lightning_loop.py"}
CADENCE = {"plain": (30, 10), "loop_ddp": (30, 5), "loop_ddp_rename": (30, 5), "lightning_trainer": (30, 5)}
BENCH = {"loop_ddp": ["loop_ddp"], "loop_ddp_rename": ["loop_ddp", "--strategy", "tmp_rename_rank0"],
         "lightning_trainer": ["lightning_trainer"], "hf_trainer": ["hf_trainer"]}
"""How ckpt-chaos's bench runs each built-in target."""
MODEL = {"loop_ddp_rename": ("power", ["--tmp-rename"])}
"""trainchaos's crash model and the script's options where not ``both`` and none: the
rename protocol is right for a process crash (ckpt-chaos's points show it), what it lacks
is an fsync, which only the power model sees."""
"""(steps, save every): trainchaos sweeps the second save, as ckpt-chaos's targets arm at it."""
EVENT_OPS = {"os.mkdir": "mkdir", "os.rename": "rename", "os.remove": "unlink", "os.rmdir": "rmdir",
             "shutil.rmtree": "rmdir"}
"""ckpt-chaos's event kinds as the file operation trainchaos sees; the rest are file writes."""


@dataclass
class ToolRun:
    tool: str
    points: int = 0
    flagged: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    """Each point's label -> its verdict/outcome."""
    per_point_s: float | None = None
    setup_s: float = 0.0
    wall_s: float = 0.0
    note: str = ""
    phases: dict[str, float] = field(default_factory=dict)
    """trainchaos: where a crash run's time goes (median s): job start to the crash point,
    the crash to the restarted rank's first step, that step to the run's end (its teardown:
    the run ends at that step)."""


@dataclass
class Comparison:
    target: str
    ckpt_chaos: ToolRun
    trainchaos: ToolRun
    matched: dict[str, str] = field(default_factory=dict)
    """ckpt-chaos's flagged point (of the swept save) -> trainchaos's point at it."""
    missed: list[str] = field(default_factory=list)
    only_trainchaos: list[str] = field(default_factory=list)
    power_only: list[str] = field(default_factory=list)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


# -- ckpt-chaos ---------------------------------------------------------------------------
def run_ckpt_chaos(target: str, work: Path) -> tuple[ToolRun, list[tuple[int, str, str]]]:
    """ckpt-chaos on ``target``; its rows and the file events of its reference run."""
    from ckpt_chaos.runner import rejudge

    cli = str(BIN / "ckpt-chaos")
    if target == "plain":
        script = HERE / SCRIPTS["plain"]
        argv = [cli, "run", "--work", str(work), "--jobs", "1", "--result-file", "{out}/final.pt",
                "--step-regex", r"resumed from step (\d+)", "--checkpoint-glob", "{out}/step-*.pt",
                "--", sys.executable, str(script), "--out", "{out}", "--sleep", "0"]
    else:
        argv = [cli, "bench", *BENCH[target], "--jobs", "1", "--work", str(work)]
    started = time.monotonic()
    proc = subprocess.run(argv, env=_env(), capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    run = ToolRun("ckpt-chaos", wall_s=wall)
    if not any(work.glob("pt_*/result.json")):
        run.note = "did not run: " + (proc.stdout + proc.stderr).strip().splitlines()[-1][:200]
        return run, []
    rows = [r for r in rejudge(work) if not r.label.startswith("no crash")]
    run.points = len(rows)
    run.labels = {r.label: r.verdict for r in rows}
    run.flagged = [r.label for r in rows if r.verdict != "PASS"]
    ends = sorted(p.stat().st_mtime for p in work.glob("pt_*/result.json"))
    gaps = [b - a for a, b in zip(ends, ends[1:], strict=False)]
    run.per_point_s = statistics.median(gaps) if gaps else None
    run.setup_s = wall - sum(gaps) if gaps else wall
    log = next(iter(sorted((work / ("reference" if target == "plain" else "dry")).glob("events.log.rank0"))), None)
    if log is None:
        log = next(iter(sorted(work.glob("*/events.log.rank0"))), None)
    events = []
    if log is not None:
        for line in log.read_text().splitlines():
            n, kind, name, _tornable = line.split("\t")
            events.append((int(n), kind, name))
    return run, events


# -- trainchaos ---------------------------------------------------------------------------
def _scenario(target: str, into: Path) -> Path:
    steps, every = CADENCE[target]
    script = HERE / SCRIPTS[target]
    options = " ".join(MODEL.get(target, ("both", []))[1])
    doc = {"name": f"compare-{target}", "seed": 1,
           "workload": {"command": f"{sys.executable} {script} --out {{ckpt_dir}} --steps {steps} --every {every} "
                                   f"{options}".strip(),
                        "steps": steps, "checkpoint_dir": "ckpt", "checkpoint_every_steps": every},
           "topology": {"nodes": 1, "ranks_per_node": 1}, "timeout_s": 180}
    into.mkdir(parents=True, exist_ok=True)
    path = into / f"compare-{target}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run_trainchaos(target: str, work: Path) -> tuple[ToolRun, dict[str, Any]]:
    scenario = _scenario(target, work)
    argv = [str(BIN / "trainchaos"), "run", "--crash-points", str(scenario), "--crash-model",
            MODEL.get(target, ("both", []))[0],
            "--out", str(work / "sweep")]
    started = time.monotonic()
    proc = subprocess.run(argv, env=_env(), capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    run = ToolRun("trainchaos", wall_s=wall)
    path = work / "sweep" / f"compare-{target}" / "crash_points.json"
    if not path.exists():
        run.note = "did not run: " + (proc.stdout + proc.stderr).strip().splitlines()[-1][:200]
        return run, {}
    sweep = json.loads(path.read_text())
    results = sweep["results"]
    run.points = len(results)
    run.labels = {f"{r['model']} {r['point']}": ",".join(r["outcomes"]) for r in results}
    run.flagged = [f"{r['model']} {r['point']}" for r in results if not r["ok"]]
    run.per_point_s = statistics.median(sweep["crash_s"]) if sweep.get("crash_s") else None
    run.setup_s = wall - sum(sweep.get("crash_s") or [])
    run.phases = _phases([r["run_dir"] for r in results if r.get("run_dir")])
    return run, sweep


def _phases(run_dirs: list[str]) -> dict[str, float]:
    from chaos.runfiles.events import read_events

    spans: dict[str, list[float]] = {"to_crash": [], "restart": [], "to_end": []}
    for run_dir in run_dirs:
        events = read_events(os.path.join(run_dir, "events"))
        first = {kind: next((float(e["t"]) for e in events if e.get("kind") == kind), None)
                 for kind in ("job_start", "crash_point", "job_end")}
        if None in first.values():
            continue
        after = [float(e["t"]) for e in events if e.get("kind") == "step_end" and int(e.get("incarnation") or 0) >= 1]
        if not after:
            continue
        spans["to_crash"].append(first["crash_point"] - first["job_start"])  # type: ignore[operator]
        spans["restart"].append(after[0] - first["crash_point"])  # type: ignore[operator]
        spans["to_end"].append(first["job_end"] - after[0])  # type: ignore[operator]
    return {k: round(statistics.median(v), 1) for k, v in spans.items() if v}


# -- matching -------------------------------------------------------------------------------
_LABEL = re.compile(r"^(?:#(\d+) )?(\S+?):(.+) \[(\w+)\]$")


def _save_of(events: list[tuple[int, str, str]], n: int) -> int | None:
    """The step of the save the n-th event belongs to: that of the first event at or after it
    whose name carries a step (a pointer written first is the next save's, as trainchaos's
    look-back counts it)."""
    for seq, _kind, name in events:
        if seq >= n and (m := re.search(r"(?:step|checkpoint)-(\d+)", name)):
            return int(m.group(1))
    return None


def _normal(name: str) -> str:
    return os.path.basename(name.split(" -> ")[0]).replace("checkpoint-", "step-")


def trainchaos_point(label: str, ops: list[dict[str, Any]]) -> str | None:
    """trainchaos's process point at the file operation of ckpt-chaos's point ``label``."""
    m = _LABEL.match(label)
    if m is None:
        return None
    _n, kind, name, mode = m.groups()
    # a file written: its create (an existing one emptied: a truncate) before, its close torn
    wanted = (EVENT_OPS[kind],) if kind in EVENT_OPS else ("create", "truncate") if mode == "before" else ("close",)
    for found in ops:
        if found["op"] in wanted and _normal(str(found["path"])) == _normal(name):
            return f"process {'b' if mode == 'before' else 't'}{found['seq']}"
    return None


def compare(target: str, out: Path) -> Comparison:
    shutil.rmtree(out / target, ignore_errors=True)
    (out / target).mkdir(parents=True)
    if target == "hf_trainer" and importlib.util.find_spec("transformers") is None:
        why = "not run: transformers is not installed here (the target's only dependency beyond torch)"
        return Comparison(target, ToolRun("ckpt-chaos", note=why), ToolRun("trainchaos", note=why))
    print(f"[{target}] ckpt-chaos ...", flush=True)
    cc, events = run_ckpt_chaos(target, out / target / "ckpt-chaos")
    print(f"[{target}] trainchaos ...", flush=True)
    tc, sweep = run_trainchaos(target, out / target / "trainchaos") if target in SCRIPTS else (
        ToolRun("trainchaos", note="no script"), {})
    result = Comparison(target, cc, tc)
    if not sweep:
        return result
    save = int(sweep["save_step"])
    ops = sweep.get("ops") or []
    for label in cc.flagged:
        m = _LABEL.match(label)
        if m is None:
            continue
        if m.group(1) is not None and _save_of(events, int(m.group(1))) != save:
            continue  # another save of the whole run (ckpt-chaos run crashes at every one)
        point = trainchaos_point(label, ops)
        result.matched[label] = point or "(none)"
        if point is None or point not in tc.flagged:
            result.missed.append(label)
    result.only_trainchaos = [p for p in tc.flagged if p not in result.matched.values()]
    result.power_only = [p for p in tc.flagged if p.startswith("power ")]
    return result


def markdown(rows: list[Comparison]) -> str:
    lines = ["| target | ckpt-chaos: points, flagged | trainchaos: points, flagged | ckpt-chaos's flags (swept save) trainchaos also flags | missed | only trainchaos (power losses) | per point, median s: ckpt-chaos / trainchaos |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        def cost(t: ToolRun) -> str:
            return "-" if t.per_point_s is None else f"{t.per_point_s:.1f}"

        def tool(t: ToolRun) -> str:
            return t.note or f"{t.points}, {len(t.flagged)}"

        lines.append(f"| {r.target} | {tool(r.ckpt_chaos)} | {tool(r.trainchaos)} | "
                     f"{len(r.matched) - len(r.missed)} of {len(r.matched)} | {', '.join(r.missed) or 'none'} | "
                     f"{len(r.only_trainchaos)} ({len(r.power_only)}) | {cost(r.ckpt_chaos)} / {cost(r.trainchaos)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="plain,loop_ddp_rename,loop_ddp,lightning_trainer,hf_trainer")
    parser.add_argument("--out", default=os.path.join("reports", "ckpt-chaos-compare"))
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    rows: list[Comparison] = []
    for target in args.targets.split(","):
        rows.append(compare(target, out))
        # each target's result kept as it comes: a long run cut short keeps what it measured
        (out / "compare.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
        print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    for r in rows:
        print(f"\n## {r.target}")
        for t in (r.ckpt_chaos, r.trainchaos):
            print(f"{t.tool}: {t.note or ''} {t.points} points, {len(t.flagged)} flagged, wall {t.wall_s:.0f} s, "
                  f"setup {t.setup_s:.0f} s, per point {t.per_point_s}" + (f", phases {t.phases}" if t.phases else ""))
            for label, verdict in t.labels.items():
                print(f"    {label}: {verdict}")
        for label, point in r.matched.items():
            print(f"  ckpt-chaos {label} -> trainchaos {point}{'  MISSED' if label in r.missed else ''}")
    print("\n" + markdown(rows))
    return 1 if any(r.missed for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
