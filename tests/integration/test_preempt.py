"""SIGTERM -> an emergency checkpoint at an agreed step (harness.preempt), on the ``local``
backend, through the real ``trainchaos run``: real torchrun agents, real gloo ranks, real
signals.

* A node's processes get SIGTERM (the agent and its workers, as Slurm signals a task): the
  ranks of both nodes agree on one step, checkpoint it, the signalled node leaves and the
  other restarts without it from that checkpoint: no step lost.
* Every rank gets SIGTERM (torchrun forwarding a stop of the whole job): the group
  checkpoints one step, restarts from it, and ends bitwise equal to a fault-free twin, so
  the emergency checkpoint holds the whole state (weights, optimizer, RNG, data position).
* With ``failure.emergency_checkpoint: false`` the same SIGTERM loses the steps since the
  last periodic checkpoint (the test that the agreement is what saves them).

The same path on Slurm (a drain with grace, a preemption) is in test_slurm.py.

The ranks start warm (``harness.warm_start``): every run here restarts its group, and none
asserts anything of a cold launch. A node's SIGTERM reaches its zygote too, which leaves the
stop to its ranks (harness/zygote.py), so the agreement is the same as cold.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.util.procs import find_run_processes
from tests.integration._support import cli_env, run_trainchaos

pytestmark = pytest.mark.integration


def _scenario(name: str, target: str, topology: str, extra: str = "", failure: str = "") -> str:
    return f"""\
name: {name}
seed: 7
{extra}
workload:
  harness: {{warm_start: true, steps: 40, model: {{name: mlp}}, checkpoint: {{every_steps: 10}}{failure}}}
topology: {topology}
faults:
  - type: {"kill_node" if "node" in target else "kill_rank"}
    target: {target}
    trigger: {{at_step: 15}}
    params: {{signal: SIGTERM}}
timeout_s: 150
"""


def _run(tmp_path: Path, text: str) -> tuple[dict, Path]:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    env = cli_env(tmp_path / "state")
    result = run_trainchaos(["run", str(scenario), "--out", str(tmp_path / "out")],
                            env=env, cwd=tmp_path, timeout=200)
    run_dir = next(p for p in (tmp_path / "out").glob("*/0") if (p / "journal.json").exists())
    journal = json.loads((run_dir / "journal.json").read_text())
    assert journal["status"] == "completed", result.stdout + result.stderr
    assert not find_run_processes(journal["run_id"])
    return journal, run_dir


def _events(run_dir: Path, kind: str) -> list[dict]:
    out = []
    for path in (run_dir / "events").glob("rank-*.jsonl"):
        out += [e for e in map(json.loads, path.read_text().splitlines()) if e["kind"] == kind]
    return sorted(out, key=lambda e: e["t"])


def _steps_before_restart(run_dir: Path) -> int:
    return max(e["step"] for e in _events(run_dir, "step_end") if e["incarnation"] == 0)


@pytest.mark.timeout(240)
def test_a_sigtermed_node_checkpoints_the_agreed_step_and_the_rest_resumes_from_it(tmp_path: Path) -> None:
    journal, run_dir = _run(tmp_path, _scenario(
        "term-node", "{node: 1}", "{nodes: 2, ranks_per_node: 1, min_nodes: 1}"))
    m = journal["metrics"]
    assert m["lost_steps"] == 0 and m["final_step"] == 40 and m["final_world_size"] == 1, m
    assert m["detection_s"] is not None and m["faults"][0]["attribution"] == "correct", m["faults"][0]

    stops = _events(run_dir, "emergency_checkpoint")
    assert len(stops) == 2 and all(e["ok"] for e in stops), stops
    step = stops[0]["step"]
    assert {e["step"] for e in stops} == {step} and stops[0]["asked"] == [1], "one step, agreed by both ranks"
    assert step == _steps_before_restart(run_dir), "nothing trained after the agreed step"
    assert any(e["step"] == step and e["incarnation"] == 0 for e in _events(run_dir, "ckpt_save_end"))
    exits = {e["src"]: e["code"] for e in _events(run_dir, "rank_exit") if e["incarnation"] == 0}
    assert exits == {"rank-1": 143, "rank-0": 77}, exits
    loads = [e for e in _events(run_dir, "ckpt_load") if e["incarnation"] == 1]
    assert loads and loads[0]["step"] == step


@pytest.mark.timeout(300)
def test_every_rank_sigtermed_resumes_bitwise_equal_to_the_fault_free_twin(tmp_path: Path) -> None:
    journal, run_dir = _run(tmp_path, _scenario(
        "term-all", "{ranks: [0, 1]}", "{nodes: 2, ranks_per_node: 1}", extra="baseline: true"))
    m = journal["metrics"]
    assert m["lost_steps"] == 0 and m["final_step"] == 40, m
    assert m["digest_match"] is True, "the emergency checkpoint must hold the whole training state"
    stops = _events(run_dir, "emergency_checkpoint")
    # One agreed step for all; the two SIGTERMs are sent one after the other, so the vote
    # that stopped the group may have counted one or both of them.
    assert {e["step"] for e in stops} == {_steps_before_restart(run_dir)}
    assert stops[0]["asked"] and set(stops[0]["asked"]) <= {0, 1}


@pytest.mark.timeout(240)
def test_without_emergency_checkpoint_the_same_sigterm_loses_steps(tmp_path: Path) -> None:
    journal, run_dir = _run(tmp_path, _scenario(
        "term-off", "{node: 1}", "{nodes: 2, ranks_per_node: 1, min_nodes: 1}",
        failure=", failure: {emergency_checkpoint: false}"))
    assert journal["metrics"]["lost_steps"] >= 5, journal["metrics"]  # resumed from step 10
    assert not _events(run_dir, "emergency_checkpoint")
