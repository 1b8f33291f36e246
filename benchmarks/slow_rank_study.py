"""How fast the slow-rank detector names a throttled rank, and whether it ever blames a
healthy one: a study, not a pass/fail test of timing.

    python benchmarks/slow_rank_study.py [--repeats 3] [--clean-repeats 5] [--out reports/bench]

1. ``scenarios/process/thermal-throttle.yaml`` (rank 3's factor ramps 1 -> 3 over 12 s),
   ``--repeats`` times: for each run, the steps the throttled rank completed between the
   moment its factor passed 1.5 and the slow-rank detection (negative: named before 1.5),
   the factor at detection, who was named. The moment is the ramp's own (``RampProfile``)
   from the probe's ``fault_injected`` event, on the rank's clock.
2. The same scenario without its fault, ``--clean-repeats`` times: every ``detected`` event
   is a false detection (goal: 0 over 5 repeats).

Writes ``slow_rank_study.json`` under ``--out`` and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from chaos.events import read_events
from chaos.probe import RampProfile
from chaos.run import run_scenario_once
from chaos.scenario import load_scenario

SCENARIO = os.path.join(os.path.dirname(__file__), os.pardir, "scenarios", "process", "thermal-throttle.yaml")
THRESHOLD = 1.5


def throttled_run(run_dir: str, seed: int, scenario: object) -> dict:
    journal = run_scenario_once(scenario, run_dir, seed)
    events = read_events(os.path.join(run_dir, "events"))
    fault = scenario.faults[0]
    params = fault.params
    injected = next(e for e in events if e["kind"] == "fault_injected" and e.get("src", "").startswith("rank-"))
    target = injected["src"]
    ramp = RampProfile(injected["t"], float(params["factor"]), float(params["ramp_s"]), params.get("hold_s"),
                       float(params.get("recover_s") or 0.0))
    t_pass = injected["t"] + ramp.passes(THRESHOLD)
    found = [e for e in events if e["kind"] == "detected"]
    slow = next((e for e in found if e.get("detector") == "slow_rank" and e["t"] >= injected["t"]), None)
    steps = [e["t"] for e in events if e["kind"] == "step_end" and e["src"] == target]
    out = {"status": journal["status"], "target": target, "detections": len(found),
           "wrong": [e.get("suspect") for e in found if e.get("suspect") != target]}
    if slow is not None:
        lo, hi = sorted((t_pass, slow["t"]))
        between = sum(1 for t in steps if lo < t <= hi)
        out.update(named=slow.get("suspect"), steps_after_1_5=between if slow["t"] >= t_pass else -between,
                   factor_at_detection=round(ramp.factor(slow["t"]) or 1.0, 2), ratio=slow.get("ratio"))
    return out


def clean_run(run_dir: str, seed: int, scenario: object) -> dict:
    journal = run_scenario_once(scenario, run_dir, seed, with_faults=False)
    events = read_events(os.path.join(run_dir, "events"))
    found = [e for e in events if e["kind"] == "detected"]
    return {"status": journal["status"], "false_detections": len(found),
            "suspects": [e.get("suspect") for e in found]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clean-repeats", type=int, default=5)
    parser.add_argument("--out", default="reports/bench")
    args = parser.parse_args()
    scenario = load_scenario(SCENARIO)
    root = os.path.join(args.out, "slow-rank-study")
    throttled = [throttled_run(os.path.join(root, f"throttled-{i}"), scenario.seed, scenario)
                 for i in range(args.repeats)]
    clean = [clean_run(os.path.join(root, f"clean-{i}"), scenario.seed, scenario) for i in range(args.clean_repeats)]
    latencies = [r["steps_after_1_5"] for r in throttled if "steps_after_1_5" in r]
    results = {
        "throttled_runs": throttled,
        "named_correctly": sum(1 for r in throttled if r.get("named") == r["target"]),
        "steps_after_1_5_median": statistics.median(latencies) if latencies else None,
        "steps_after_1_5_max": max(latencies) if latencies else None,
        "clean_runs": clean,
        "false_detections_max": max(r["false_detections"] for r in clean) if clean else None,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "slow_rank_study.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=2)
    json.dump(results, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
