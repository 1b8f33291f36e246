"""How fast the slow-rank detector names a throttled rank, and whether it ever blames a
healthy one: a study, not a pass/fail test of timing.

    python benchmarks/slow_rank_study.py [--repeats 3] [--clean-repeats 5] [--twin-repeats 2] [--out reports/bench]

1. ``scenarios/process/thermal-throttle.yaml`` (rank 3's factor ramps 1 -> 3 over 12 s),
   ``--repeats`` times: for each run, the steps the throttled rank completed between the
   moment its factor passed 1.5 and the slow-rank detection (``throttle_detection_steps``,
   chaos/faults/process/metrics.py; negative: named before 1.5), the factor at detection,
   who was named.
2. ``scenarios/process/slow-rank-fault-free.yaml`` (the same job without the fault),
   ``--clean-repeats`` times: every ``detected`` event is a false detection (goal: 0 in
   each of 5 repeats).
3. The throttle scenario's fault-free twin (``with_faults=False``, as ``baseline: true``
   runs it), ``--twin-repeats`` times: the same, while rank 0 also hashes the model at
   every step (the twin's digests): work only rank 0 does, which the detector must excuse.

Writes ``slow_rank_study.json`` under ``--out`` and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from chaos.probe import RampProfile
from chaos.runfiles.events import read_events
from chaos.runner.run import run_scenario_once
from chaos.scenario.load import load_scenario

SCENARIOS = os.path.join(os.path.dirname(__file__), os.pardir, "scenarios", "process")
THROTTLED = os.path.join(SCENARIOS, "thermal-throttle.yaml")
FAULT_FREE = os.path.join(SCENARIOS, "slow-rank-fault-free.yaml")


def throttled_run(run_dir: str, scenario: object) -> dict:
    journal = run_scenario_once(scenario, run_dir, scenario.seed)
    events = read_events(os.path.join(run_dir, "events"))
    params = scenario.faults[0].params
    injected = next(e for e in events if e["kind"] == "fault_injected" and e.get("src", "").startswith("rank-"))
    ramp = RampProfile(injected["t"], float(params["factor"]), float(params["ramp_s"]), params.get("hold_s"),
                       float(params.get("recover_s") or 0.0))
    found = [e for e in events if e["kind"] == "detected"]
    slow = next((e for e in found if e.get("detector") == "slow_rank" and e["t"] >= injected["t"]), None)
    fault = journal.metrics.faults[0]
    out = {"status": journal.status, "passed": journal.verdict.passed if journal.verdict else None,
           "target": injected["src"], "detections": len(found),
           "wrong": [e.get("suspect") for e in found if e.get("suspect") != injected["src"]],
           "steps_after_1_5": fault.value("throttle_detection_steps"), "attribution": fault.attribution}
    if slow is not None:
        out.update(named=slow.get("suspect"), at_step=slow.get("step"),
                   factor_at_detection=round(ramp.factor(slow["t"]) or 1.0, 2), ratio=slow.get("ratio"))
    return out


def clean_run(run_dir: str, scenario: object, with_faults: bool = True) -> dict:
    journal = run_scenario_once(scenario, run_dir, scenario.seed, with_faults=with_faults)
    events = read_events(os.path.join(run_dir, "events"))
    found = [e for e in events if e["kind"] == "detected"]
    return {"status": journal.status, "false_detections": len(found),
            "suspects": [e.get("suspect") for e in found]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clean-repeats", type=int, default=5)
    parser.add_argument("--twin-repeats", type=int, default=2)
    parser.add_argument("--out", default="reports/bench")
    args = parser.parse_args()
    throttle, fault_free = load_scenario(THROTTLED), load_scenario(FAULT_FREE)
    root = os.path.join(args.out, "slow-rank-study")
    throttled = [throttled_run(os.path.join(root, f"throttled-{i}"), throttle) for i in range(args.repeats)]
    clean = [clean_run(os.path.join(root, f"clean-{i}"), fault_free) for i in range(args.clean_repeats)]
    twins = [clean_run(os.path.join(root, f"twin-{i}"), throttle, with_faults=False) for i in range(args.twin_repeats)]
    latencies = [r["steps_after_1_5"] for r in throttled if r.get("steps_after_1_5") is not None]
    results = {
        "throttled_runs": throttled,
        "named_correctly": sum(1 for r in throttled if r.get("named") == r["target"]),
        "steps_after_1_5_median": statistics.median(latencies) if latencies else None,
        "steps_after_1_5_max": max(latencies) if latencies else None,
        "clean_runs": clean,
        "false_detections_max": max(r["false_detections"] for r in clean) if clean else None,
        "twin_runs": twins,
        "twin_false_detections_max": max(r["false_detections"] for r in twins) if twins else None,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "slow_rank_study.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=2)
    json.dump(results, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
