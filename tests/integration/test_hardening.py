"""Verdicts that cannot lie, on real runs (one suite, four scenarios, one controller):

- a run that trains to non-finite numbers fails with the health reason, whatever else it met;
- a straggler on two ranks slows the job by a steady factor (no compounding delay), and the
  journal's restart metrics agree with each other;
- the repeats of a random trigger are three experiments: each injects at its own time;
- with DataLoader worker processes under each rank, kill_rank hits the rank, not a worker.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration._support import cli_env, run_trainchaos

pytestmark = pytest.mark.integration

# Ranks forked by a warm zygote (harness.warm_start: one torch import per node, not per rank,
# and none again for exploding's three rollback restarts) where nothing asserted depends on
# how a rank was started; loader-workers stays cold: its kill must find the rank among
# DataLoader workers that carry the same environment.
SCENARIOS = {
    "exploding": """\
name: exploding
workload:
  harness: {warm_start: true, steps: 20, lr: 1.0e+30, model: {name: mlp}, checkpoint: {every_steps: 0}}
topology: {nodes: 1, ranks_per_node: 2}
targets: {completes: false}   # nothing else asked: health alone must fail the run
timeout_s: 120
""",
    "two-stragglers": """\
name: two-stragglers
workload:
  harness: {warm_start: true, steps: 40, step_delay_s: 0.05, model: {name: mlp}, checkpoint: {every_steps: 10}}
topology: {nodes: 1, ranks_per_node: 2}
faults:
  - type: straggler
    target: {ranks: [0, 1]}
    trigger: {at_step: 10}
    params: {factor: 3}
targets:
  false_detections: {max: 0}
timeout_s: 150
""",
    "loader-workers": """\
name: loader-workers
seed: 6
baseline: true
workload:
  harness: {warm_start: false, steps: 40, data_workers: 2, model: {name: mlp}, checkpoint: {every_steps: 10}}
topology: {nodes: 1, ranks_per_node: 2}
faults:
  - type: kill_rank
    target: {rank: 1}
    trigger: {at_step: 15}
targets:
  attribution: correct
  final_state: matches_baseline
  false_detections: {max: 0}
timeout_s: 150
""",
    "random-repeats": """\
name: random-repeats
seed: 4
repeat: 3
workload:
  harness: {warm_start: true, steps: 60, step_delay_s: 0.05, model: {name: mlp}, checkpoint: {every_steps: 10}}
topology: {nodes: 1, ranks_per_node: 2}
faults:
  - type: hang_rank
    target: {rank: 1}
    trigger: {random: {window_s: [0.5, 2.5]}}
    params: {duration_s: 0.3}
timeout_s: 150
""",
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("hardening")
    for name, text in SCENARIOS.items():
        (tmp / f"{name}.yaml").write_text(text)
    result = run_trainchaos(["run", str(tmp), "--out", str(tmp / "out")],
                            env=cli_env(tmp / "state"), cwd=tmp, timeout=600)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]  # exploding fails
    journals: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((tmp / "out").glob("*/[0-9]*/journal.json")):
        journal = json.loads(path.read_text())
        journals.setdefault(journal["scenario"]["name"], []).append(journal)
    return journals


def test_a_run_that_trains_to_nan_fails_with_the_health_reason(suite) -> None:
    (journal,) = suite["exploding"]
    metrics = journal["metrics"]
    assert metrics["healthy"] is False and metrics["first_nonfinite_step"] is not None
    verdict = journal["verdict"]
    assert verdict["passed"] is False
    failed = [c for c in verdict["checks"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["training_health"], failed
    assert failed[0]["reason"].startswith("training is not healthy: loss is not finite from step")


def test_two_stragglers_slow_the_job_steadily_and_the_metrics_agree(suite) -> None:
    (journal,) = suite["two-stragglers"]
    assert journal["status"] == "completed", journal["error"]
    assert journal["verdict"]["passed"], journal["verdict"]
    metrics = journal["metrics"]
    # A compounding delay doubled the step time every step until a collective timed out.
    assert metrics["restart_count"] == 0 and metrics["restarts"] == []
    (fault,) = metrics["faults"]
    assert fault["restarted"] is False and fault["restarts_caused"] == 0 and fault["lost_steps"] == 0
    assert metrics["lost_steps_total"] == 0 and metrics["false_detections"] == 0
    steps = [e for e in _events(journal) if e["kind"] == "step_end" and e["src"] == "rank-0"]
    gaps = [b["t"] - a["t"] for a, b in zip(steps, steps[1:], strict=False)]
    before, after = sorted(gaps[2:8]), sorted(gaps[15:])
    slow, fast = after[len(after) // 2], before[len(before) // 2]
    assert slow > 1.5 * fast, f"the straggler must slow the job: {fast:.3f} s -> {slow:.3f} s"
    assert max(after) < 10 * fast, f"the slowdown must not compound: {after}"


def test_each_repeat_of_a_random_trigger_is_its_own_experiment(suite) -> None:
    journals = sorted(suite["random-repeats"], key=lambda j: j["repeat_index"])
    assert [j["repeat_index"] for j in journals] == [0, 1, 2]
    assert len({j["plan_seed"] for j in journals}) == 3
    offsets = [j["plan"][0]["offset_s"] for j in journals]
    assert len(set(offsets)) == 3 and all(0.5 <= o <= 2.5 for o in offsets), offsets
    injected = [j["faults"][0]["t_inject"] - _first_step(j) for j in journals]
    assert all(abs(i - o) < 1.0 for i, o in zip(injected, offsets, strict=True)), (injected, offsets)
    for j in journals:
        assert j["seed"] == 4, "the training seed stays the scenario's: one baseline fits all"


def test_the_bundled_job_with_loader_workers_loses_its_rank_not_a_worker(suite) -> None:
    """The harness reads through DataLoader worker processes (children of each rank with
    its RANK): kill_rank must hit the rank, and batches must stay those of the fault-free
    twin (the final weights are bitwise equal)."""
    (journal,) = suite["loader-workers"]
    assert journal["verdict"]["passed"], journal["verdict"]
    events = _events(journal)
    (killed,) = journal["faults"][0]["details"]["pids"]
    rank1 = [e for e in events if e["kind"] == "rank_start" and e["src"] == "rank-1" and e["t"] < journal["faults"][0]["t_inject"]]
    workers = [e for e in events if e["kind"] == "data_workers" and e["src"] == "rank-1" and e["incarnation"] == 0]
    assert rank1 and workers and len(workers[0]["pids"]) == 2
    assert killed == rank1[-1]["pid"] and killed not in workers[0]["pids"]
    assert journal["metrics"]["digest_match"] is True


def _events(journal: dict[str, Any]) -> list[dict[str, Any]]:
    events = []
    for path in sorted((Path(journal["run_dir"]) / "events").glob("*.jsonl")):
        events += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(events, key=lambda e: e["t"])


def _first_step(journal: dict[str, Any]) -> float:
    return min(e["t"] for e in _events(journal) if e["kind"] == "step_end")
