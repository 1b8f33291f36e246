"""What the correctness checkers cost on a clean run (docs/checkers.md): goal under 2 % of
the run's wall time.

    python benchmarks/checker_bench.py [--steps 150] [--repeats 21] [--run-dir DIR] [--out reports/bench]

One clean run of the harness (2 nodes x 2 ranks, the default model, ``--steps`` steps,
checkpoints every 20, no fault) through ``trainchaos run``, or an existing run directory
(``--run-dir``). Then, on that run's own events, two costs, each the median of
``--repeats`` rounds:

- controller: every checker family's run metrics (``data``, ``reload``, and ``freshness``
  when it is registered) over the run, with the run itself standing in as its fault-free
  twin (so the data checker does its full comparison); the reference in the same process is
  the whole ``compute_metrics`` of the run, checkers included;
- rank: what reporting samples adds to a rank's steps: ``--steps`` ``step_end`` events
  with a shard of samples each minus as many without, on a probe writing to a real file
  (the hot path of every step), paid by every rank in parallel.

The ratio is (controller + rank) / the run's wall time (``journal.json``); the rank part is
also given against the rank's own training time (``run_end.train_s``). Run it under the
integration lock: the clean run loads both cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from chaos import probe  # noqa: E402
from chaos.metrics import BaselineInfo, RunInfo, compute_metrics  # noqa: E402
from chaos.metrics.families.data import baseline_samples  # noqa: E402
from chaos.metrics.family import RunContext  # noqa: E402
from chaos.metrics.registry import families  # noqa: E402
from chaos.metrics.timeline import Timeline  # noqa: E402
from chaos.runfiles.events import read_events  # noqa: E402
from chaos.runfiles.rundir import RunDir  # noqa: E402

CHECKERS = ("data", "reload", "freshness")
GOAL = 0.02

SCENARIO = """\
name: checker-bench
seed: 3
workload:
  harness: {{steps: {steps}, checkpoint: {{every_steps: 20, mode: async}}}}
topology: {{nodes: 2, ranks_per_node: 2}}
timeout_s: 600
"""


def clean_run(steps: int, out: Path) -> Path:
    scenario = out / "checker-bench.yaml"
    scenario.write_text(SCENARIO.format(steps=steps))
    subprocess.run([sys.executable, "-m", "chaos.cli", "run", str(scenario), "--out", str(out / "run")],
                   check=False, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdin=subprocess.DEVNULL)
    return out / "run" / "checker-bench" / "0"


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def controller_cost(events: list[dict[str, Any]], journal: dict[str, Any], repeats: int) -> dict[str, Any]:
    m = journal["metrics"]
    run = RunInfo("completed", m["t_start"], m["t_end"], m["steps_target"], m["world_size"])
    losses = {e["step"]: e.get("loss") for e in events if e.get("kind") == "step_end" and e.get("src") == "rank-0"}
    twin = BaselineInfo(digest=m.get("final_digest"), losses=losses, world_size=m["world_size"],
                        samples=baseline_samples(events))
    metrics = compute_metrics(events, [], run, twin)
    ctx = RunContext(Timeline(events, None), run, metrics, twin)
    checkers = [f for f in families() if f.name in CHECKERS and f.run_metrics is not None]
    per_family = {f.name: _median_s(lambda f=f: f.run_metrics(ctx), repeats) for f in checkers}
    return {"checkers": sorted(per_family), "per_family_s": per_family,
            "twin_samples_s": _median_s(lambda: baseline_samples(events), repeats),
            "compute_metrics_s": _median_s(lambda: compute_metrics(events, [], run, twin), repeats),
            "data_lost": metrics.data_lost, "data_duplicated": metrics.data_duplicated,
            "data_samples": metrics.data_samples}


def rank_cost(steps: int, per_rank: int, repeats: int) -> float:
    """Seconds ``steps`` steps' sample reports add to one rank (median of rounds)."""
    diffs = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            with_samples = probe.Probe(os.path.join(tmp, f"a{r}"), "rank-1", 0)
            without = probe.Probe(os.path.join(tmp, f"b{r}"), "rank-1", 0)
            start = time.perf_counter()
            for step in range(1, steps + 1):
                without.step_end(step, 1.0)
            plain = time.perf_counter() - start
            start = time.perf_counter()
            for step in range(1, steps + 1):
                first = step * per_rank * 4 + per_rank
                with_samples.samples(range(first, first + per_rank))
                with_samples.step_end(step, 1.0)
            diffs.append(time.perf_counter() - start - plain)
            with_samples.close()
            without.close()
    return max(statistics.median(diffs), 0.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--run-dir", help="measure this run instead of starting a clean one")
    parser.add_argument("--out", default="reports/bench")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run_dir = Path(args.run_dir) if args.run_dir else clean_run(args.steps, Path(tempfile.mkdtemp(dir=out)))
    journal = json.loads((run_dir / "journal.json").read_text())
    if journal.get("status") != "completed":
        print(f"the clean run did not complete ({journal.get('status')}): {run_dir}", file=sys.stderr)
        return 1
    events = read_events(RunDir(str(run_dir)).events)
    wall_s = float(journal["wall_s"])
    steps = int(journal["metrics"]["final_step"])
    run_end = next(e for e in events if e.get("kind") == "run_end")
    train_s = float(run_end.get("train_s") or wall_s)
    ctl = controller_cost(events, journal, args.repeats)
    per_rank = int((journal["scenario"]["workload"].get("harness") or {}).get("global_batch", 16)) // int(
        journal["metrics"]["world_size"])
    rank_s = rank_cost(steps, per_rank, args.repeats)
    checkers_s = sum(ctl["per_family_s"].values()) + ctl["twin_samples_s"]
    total = checkers_s + rank_s
    result = {"run_dir": str(run_dir), "steps": steps, "wall_s": wall_s, "train_s": train_s, "events": len(events),
              **ctl, "controller_s": checkers_s, "rank_s": rank_s, "ratio_to_wall": total / wall_s,
              "rank_ratio_to_train": rank_s / train_s, "goal": GOAL, "met": total / wall_s < GOAL}
    (out / "checker_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"clean run: {steps} steps, {len(events)} events, wall {wall_s:.1f} s (train {train_s:.1f} s)")
    for name, secs in ctl["per_family_s"].items():
        print(f"  checker {name:<10} {secs * 1e3:8.2f} ms (median of {args.repeats})")
    print(f"  twin samples   {ctl['twin_samples_s'] * 1e3:8.2f} ms")
    print(f"  reference: compute_metrics, all metrics: {ctl['compute_metrics_s'] * 1e3:.2f} ms")
    print(f"  rank: sample reports of {steps} steps: {rank_s * 1e3:.2f} ms per rank "
          f"({100 * rank_s / train_s:.3f} % of its training time)")
    print(f"checkers: {total * 1e3:.1f} ms = {100 * total / wall_s:.3f} % of the run's wall time "
          f"(goal < {100 * GOAL:g} %): {'met' if result['met'] else 'MISSED'}")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
