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
  ``save_last``, resume from ``last``, the target's ``ck-step=N.ckpt`` names).
- ``loop_ddp_rename``: ``ckpt-chaos bench loop_ddp --strategy tmp_rename_rank0`` (the
  protocol right for a process crash: a temporary folder renamed into place, no fsync), and
  trainchaos's power model on ``loop_direct.py --tmp-rename``: the case only a power loss shows.
- ``hf_trainer``: ``ckpt-chaos bench hf_trainer``, and trainchaos on
  ``benchmarks/ckpt_compare/hf_loop.py`` (a tiny GPT-2 under ``transformers.Trainer``,
  ``checkpoint-N/`` every 5 steps, resume from the highest). Both need ``transformers``
  (``pip install -e '.[compare]'``, as ``make bench-compare`` does); where it is not
  installed the row says so.

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
           "lightning_trainer": "lightning_loop.py", "hf_trainer": "hf_loop.py"}
CADENCE = {"plain": (30, 10), "loop_ddp": (30, 5), "loop_ddp_rename": (30, 5), "lightning_trainer": (30, 5),
           "hf_trainer": (30, 5)}
BENCH = {"loop_ddp": ["loop_ddp"], "loop_ddp_rename": ["loop_ddp", "--strategy", "tmp_rename_rank0"],
         "lightning_trainer": ["lightning_trainer"], "hf_trainer": ["hf_trainer"]}
"""How ckpt-chaos's bench runs each built-in target."""
TOOLS = ("ckpt-chaos", "trainchaos")
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
    not_run: list[str] = field(default_factory=list)
    """ckpt-chaos's flagged points whose trainchaos point was left out (--trainchaos-points)."""
    only_trainchaos: list[str] = field(default_factory=list)
    power_only: list[str] = field(default_factory=list)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


# -- ckpt-chaos ---------------------------------------------------------------------------
def _timed(argv: list[str], work: Path, run: bool) -> tuple[float | None, str]:
    """Run ``argv`` afresh (``run``; its wall seconds kept in ``work``), or read the wall time
    an earlier run of this tool left there (None: there is none)."""
    if not run:
        kept = work / "wall_s"
        return (float(kept.read_text()) if kept.exists() else None), "not run yet (--tools)"
    started = time.monotonic()
    proc = subprocess.run(argv, env=_env(), capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    work.mkdir(parents=True, exist_ok=True)
    (work / "wall_s").write_text(f"{wall:.1f}")
    return wall, (proc.stdout + proc.stderr).strip().splitlines()[-1][:200] if (proc.stdout + proc.stderr).strip() else ""


def run_ckpt_chaos(target: str, work: Path, run: bool = True) -> tuple[ToolRun, list[tuple[int, str, str]]]:
    """ckpt-chaos on ``target`` (or what an earlier run left in ``work``); its rows and the
    file events of its reference run."""
    from ckpt_chaos.runner import rejudge

    cli = str(BIN / "ckpt-chaos")
    if target == "plain":
        script = HERE / SCRIPTS["plain"]
        argv = [cli, "run", "--work", str(work), "--jobs", "1", "--result-file", "{out}/final.pt",
                "--step-regex", r"resumed from step (\d+)", "--checkpoint-glob", "{out}/step-*.pt",
                "--", sys.executable, str(script), "--out", "{out}", "--sleep", "0"]
    else:
        argv = [cli, "bench", *BENCH[target], "--jobs", "1", "--work", str(work)]
    if run:
        shutil.rmtree(work, ignore_errors=True)
    wall, last = _timed(argv, work, run)
    tool = ToolRun("ckpt-chaos", wall_s=wall or 0.0)
    if wall is None or not any(work.glob("pt_*/result.json")):
        tool.note = "did not run: " + last
        return tool, []
    rows = [r for r in rejudge(work) if not r.label.startswith("no crash")]
    # bench's labels name no event number (two mkdirs of one folder read alike): from each
    # point's folder (pt_r<rank>_<n>_<mode>), in the order rejudge gives them
    numbers = [m.group(1) for p in sorted(work.glob("pt_r*/result.json"), key=lambda p: json.loads(p.read_text())["order"])
               if (m := re.fullmatch(r"pt_r\d+_(\d+)_\w+", p.parent.name))]
    if len(numbers) == len(rows):
        for row, number in zip(rows, numbers, strict=True):
            if not row.label.startswith("#"):
                row.label = f"#{number} {row.label}"
    tool.points = len(rows)
    tool.labels = {r.label: r.verdict for r in rows}
    tool.flagged = [r.label for r in rows if r.verdict != "PASS"]
    ends = sorted(p.stat().st_mtime for p in work.glob("pt_*/result.json"))
    gaps = [b - a for a, b in zip(ends, ends[1:], strict=False)]
    tool.per_point_s = statistics.median(gaps) if gaps else None
    tool.setup_s = wall - sum(gaps) if gaps else wall
    log = next(iter(sorted((work / ("reference" if target == "plain" else "dry")).glob("events.log.rank0"))), None)
    if log is None:
        log = next(iter(sorted(work.glob("*/events.log.rank0"))), None)
    events = []
    if log is not None:
        for line in log.read_text().splitlines():
            n, kind, name, _tornable = line.split("\t")
            events.append((int(n), kind, name))
    return tool, events


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


def run_trainchaos(target: str, work: Path, run: bool = True, points: str | None = None) -> tuple[ToolRun, dict[str, Any]]:
    """trainchaos's sweep of ``target`` (only ``points``, as ``--crash-after`` takes them, if
    given), or what an earlier run left in ``work``."""
    scenario = work / f"compare-{target}.yaml"
    argv = [str(BIN / "trainchaos"), "run", "--crash-points", str(scenario), "--crash-model",
            MODEL.get(target, ("both", []))[0], "--out", str(work / "sweep"),
            *(["--crash-after", points] if points else [])]
    if run:
        shutil.rmtree(work, ignore_errors=True)
        _scenario(target, work)
    wall, last = _timed(argv, work, run)
    tool = ToolRun("trainchaos", wall_s=wall or 0.0)
    path = work / "sweep" / f"compare-{target}" / "crash_points.json"
    if wall is None or not path.exists():
        tool.note = "did not run: " + last
        return tool, {}
    sweep = json.loads(path.read_text())
    # a point asked for (--trainchaos-points) that the trace did not find was not run
    results = [r for r in sweep["results"] if r.get("run_dir") or r["outcomes"] != ["not_reached"]]
    tool.points = len(results)
    tool.labels = {f"{r['model']} {r['point']}": ",".join(r["outcomes"]) for r in results}
    tool.flagged = [f"{r['model']} {r['point']}" for r in results if not r["ok"]]
    tool.per_point_s = statistics.median(sweep["crash_s"]) if sweep.get("crash_s") else None
    tool.setup_s = wall - sum(sweep.get("crash_s") or [])
    tool.phases = _phases([r["run_dir"] for r in results if r.get("run_dir")])
    return tool, sweep


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


_STEP = re.compile(r"(?:step|checkpoint)[-=](\d+)")


def _save_of(events: list[tuple[int, str, str]], n: int) -> int | None:
    """The step of the save the n-th event belongs to: that of the first event at or after it
    whose name carries a step (a pointer written first is the next save's, as trainchaos's
    look-back counts it); after the run's last such event, that event's (a pointer written
    after its save's data)."""
    for seq, _kind, name in events:
        if seq >= n and (m := _STEP.search(name)):
            return int(m.group(1))
    for seq, _kind, name in reversed(events):
        if seq < n and (m := _STEP.search(name)):
            return int(m.group(1))
    return None


def _normal(name: str) -> str:
    return os.path.basename(name.split(" -> ")[0]).replace("checkpoint-", "step-")


def trainchaos_point(label: str, ops: list[dict[str, Any]], events: list[tuple[int, str, str]] = ()) -> str | None:
    """trainchaos's process point at the file operation of ckpt-chaos's point ``label``; where
    trainchaos's layer sees no such operation, the point that leaves the same files (below)."""
    m = _LABEL.match(label)
    if m is None:
        return None
    n, kind, name, mode = m.groups()
    # a file written: its create (an existing one emptied: a truncate) before, its close torn
    wanted = (EVENT_OPS[kind],) if kind in EVENT_OPS else ("create", "truncate") if mode == "before" else ("close",)
    if n is not None and kind == "os.mkdir" and any(seq < int(n) and k == kind and nm == name for seq, k, nm in events):
        return _same_state(int(n), name, kind, ops, events)  # made again: it exists, the layer sees nothing
    for found in ops:
        if found["op"] in wanted and _normal(str(found["path"])) == _normal(name):
            return f"process {'b' if mode == 'before' else 't'}{found['seq']}"
    if mode == "before" and kind not in EVENT_OPS:
        # written under a temporary name, then renamed to it (safetensors' save_file): before
        # the temporary file's create
        for found in ops:
            source, _, dest = str(found["path"]).partition(" -> ")
            if found["op"] == "rename" and _normal(dest) == _normal(name):
                created = [o for o in ops if o["op"] == "create" and o["path"] == source and o["seq"] < found["seq"]]
                if created:
                    return f"process b{created[-1]['seq']}"
    if mode != "before" or n is None or kind not in ("os.mkdir", "os.rename"):
        return None
    return _same_state(int(n), name, kind, ops, events)


def _same_state(n: int, name: str, kind: str, ops: list[dict[str, Any]],
                events: list[tuple[int, str, str]]) -> str | None:
    """The point before event ``n`` of ckpt-chaos, where trainchaos's layer saw no such
    operation: a ``mkdir`` of a folder that already exists (the kernel answers it, the layer
    never sees it), a ``rename`` of a file written elsewhere (Lightning's atomic save writes
    a temporary file in the system's temp folder; on another file system, as trainchaos's
    layer is, ``shutil.move`` copies it in: a create and a close). Before a missing mkdir is
    the state before the save's next event; before a copied-in file's rename, before its
    create; with no later operation of the save's own, after its last one."""
    own = [o for o in ops if o.get("own")]
    first_own = min((int(o["seq"]) for o in own), default=None)
    if kind == "os.rename" and first_own is not None:
        for found in ops:
            if (found["op"] in ("create", "truncate") and int(found["seq"]) >= first_own
                    and _normal(str(found["path"])) == _normal(name)):
                return f"process b{found['seq']}"
    later = [(seq, k, nm) for seq, k, nm in events if seq > n]
    if kind == "os.mkdir" and later:
        seq, k, nm = later[0]
        return trainchaos_point(f"#{seq} {k}:{nm} [before]", ops, events)
    return f"process a{max(int(o['seq']) for o in own)}" if own else None


def compare(target: str, out: Path, tools: tuple[str, ...] = TOOLS, points: str | None = None) -> Comparison:
    """Both tools on ``target``; a tool left out of ``tools`` is read from what its last run
    left under ``out`` (each run alone under a lock hold of its own)."""
    (out / target).mkdir(parents=True, exist_ok=True)
    if target == "hf_trainer" and importlib.util.find_spec("transformers") is None:
        why = "not run: transformers is not installed here (pip install -e '.[compare]')"
        return Comparison(target, ToolRun("ckpt-chaos", note=why), ToolRun("trainchaos", note=why))
    print(f"[{target}] ckpt-chaos {'...' if 'ckpt-chaos' in tools else '(kept)'}", flush=True)
    cc, events = run_ckpt_chaos(target, out / target / "ckpt-chaos", "ckpt-chaos" in tools)
    print(f"[{target}] trainchaos {'...' if 'trainchaos' in tools else '(kept)'}", flush=True)
    tc, sweep = run_trainchaos(target, out / target / "trainchaos", "trainchaos" in tools, points) \
        if target in SCRIPTS else (ToolRun("trainchaos", note="no script"), {})
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
        point = trainchaos_point(label, ops, events)
        result.matched[label] = point or "(none)"
        if point is not None and point not in tc.labels:
            result.not_run.append(label)
        elif point is None or point not in tc.flagged:
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
                     f"{len(r.matched) - len(r.missed) - len(r.not_run)} of {len(r.matched) - len(r.not_run)}"
                     f"{f' ({len(r.not_run)} not run)' if r.not_run else ''} | {', '.join(r.missed) or 'none'} | "
                     f"{len(r.only_trainchaos)} ({len(r.power_only)}) | {cost(r.ckpt_chaos)} / {cost(r.trainchaos)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="plain,loop_ddp_rename,loop_ddp,lightning_trainer,hf_trainer")
    parser.add_argument("--out", default=os.path.join("reports", "ckpt-chaos-compare"))
    parser.add_argument("--tools", default=",".join(TOOLS),
                        help="the tools to run now; the other's results are read from its last run under --out")
    parser.add_argument("--trainchaos-points", default=None, metavar="bK,tK,...",
                        help="only these points of trainchaos's sweep (its --crash-after) [default: every one]")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    tools = tuple(t for t in args.tools.split(",") if t)
    if unknown := set(tools) - set(TOOLS):
        parser.error(f"--tools: unknown {', '.join(sorted(unknown))} (allowed: {', '.join(TOOLS)})")
    rows: list[Comparison] = []
    for target in args.targets.split(","):
        rows.append(compare(target, out, tools, args.trainchaos_points))
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
            mark = "  MISSED" if label in r.missed else "  (not run)" if label in r.not_run else ""
            print(f"  ckpt-chaos {label} -> trainchaos {point}{mark}")
    print("\n" + markdown(rows))
    return 1 if any(r.missed for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
