"""The engine's contracts on real runs: a failure of trainchaos is a tool error (exit 3, a
journal, nothing left), and spares stand in for a lost node.

The ranks start warm (``harness.warm_start``): nothing here is a cold launch's figure, the
spare's restart forks its ranks, and "nothing left" then covers each node's zygote too.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from chaos.util.procs import find_run_processes
from tests.integration._support import cli_env, machine_cleanup_lock, run_trainchaos

pytestmark = pytest.mark.integration

PLUGINS = Path(__file__).resolve().parent / "plugins"

TINY = "warm_start: true\n    steps: {steps}\n    model: {{name: mlp}}\n    checkpoint: {{every_steps: 10}}"


def _env(tmp_path: Path) -> dict[str, str]:
    return cli_env(tmp_path / "state", PLUGINS, TRAINCHAOS_PLUGINS="broken_fault")


def _cli(tmp_path: Path, *argv: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return run_trainchaos(list(argv), env=_env(tmp_path), cwd=tmp_path, timeout=timeout)


def _record_schema_errors(tmp_path: Path, journal: dict) -> list[str]:
    """What of ``journal`` breaks the schema ``trainchaos schema --journal`` prints."""
    printed = _cli(tmp_path, "schema", "--journal", timeout=60)
    assert printed.returncode == 0, printed.stderr
    return [f"{list(e.path)}: {e.message}" for e in Draft202012Validator(json.loads(printed.stdout)).iter_errors(journal)]


def _scratch_dirs(tmp_path: Path) -> list[Path]:
    base = tmp_path / "state" / "scratch"
    return sorted(base.glob("trainchaos-*")) if base.exists() else []


@pytest.mark.timeout(240)
def test_inject_that_raises_ends_as_tool_error_with_exit_3_and_nothing_left(tmp_path: Path) -> None:
    scenario = tmp_path / "broken.yaml"
    scenario.write_text(f"""\
name: broken
workload:
  harness:
    {TINY.format(steps=60)}
topology: {{nodes: 2, ranks_per_node: 1}}
faults:
  - type: broken_for_test
    target: {{rank: 1}}
    trigger: {{at_step: 20}}
targets:
  detection_s: {{max: 5}}
timeout_s: 150
""")
    result = _cli(tmp_path, "run", str(scenario), "--out", str(tmp_path / "out"))
    output = result.stdout + result.stderr
    assert result.returncode == 3, output
    assert "TOOL ERROR" in result.stdout and "injector exploded on purpose" in output

    run_dir = tmp_path / "out" / "broken" / "0"
    journal = json.loads((run_dir / "journal.json").read_text())
    assert journal["status"] == "tool_error"
    assert journal["verdict"] is None, "a run trainchaos broke must not be judged"
    assert any("injector exploded on purpose" in e for e in journal["tool_errors"]), journal["tool_errors"]
    assert journal["faults"][0]["error"].startswith("inject failed: RuntimeError")
    assert not _record_schema_errors(tmp_path, journal)

    # Every resource the run held was released, newest first, and journaled as such.
    records = [json.loads(line) for line in (run_dir / "resources.jsonl").read_text().splitlines()]
    created = [r["id"] for r in records if r["op"] == "created"]
    destroyed = [r["id"] for r in records if r["op"] == "destroyed"]
    assert created and destroyed == sorted(created, reverse=True), records
    assert not _scratch_dirs(tmp_path)
    assert not find_run_processes(journal["run_id"])
    with machine_cleanup_lock():  # a test beside it may have a SIGKILLed controller's leftovers
        check = _cli(tmp_path, "cleanup", "--check", timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.timeout(240)
def test_spare_takes_the_place_of_a_killed_node(tmp_path: Path) -> None:
    """With a spare, losing a node costs a restart, not capacity: the spare (node 2, started
    once the job's first round formed) joins and the job finishes at full size."""
    scenario = tmp_path / "spare.yaml"
    scenario.write_text(f"""\
name: spare
seed: 3
workload:
  harness:
    {TINY.format(steps=60)}
topology: {{nodes: 2, ranks_per_node: 1, spares: 1}}
faults:
  - type: kill_node
    target: {{node: 1}}
    trigger: {{at_step: 25}}
targets:
  attribution: correct
  recovery_s: {{max: 60}}
  false_detections: {{max: 0}}
timeout_s: 150
""")
    result = _cli(tmp_path, "run", str(scenario), "--out", str(tmp_path / "out"))
    run_dir = tmp_path / "out" / "spare" / "0"
    journal = json.loads((run_dir / "journal.json").read_text())
    assert result.returncode == 0, result.stdout + result.stderr
    assert journal["status"] == "completed"
    metrics = journal["metrics"]
    assert metrics["final_world_size"] == 2, "the spare must bring the job back to full size"
    assert metrics["false_detections"] == 0
    fault = journal["faults"][0]
    assert fault["resolved_target"]["nodes"] == [1] and fault["resolved_target"]["ranks"] == [1]
    assert not _record_schema_errors(tmp_path, journal)

    starts = []
    for path in (run_dir / "events").glob("rank-*.jsonl"):
        starts += [json.loads(line) for line in path.read_text().splitlines() if '"rank_start"' in line]
    first = {e["rank"]: e["node"] for e in starts if e["incarnation"] == 0}
    restarted_on = {e["node"] for e in starts if e["incarnation"] > 0}
    assert first == {0: 0, 1: 1}, f"spares must not take a node's place in the first round: {first}"
    assert restarted_on == {0, 2}, f"after node 1 died the job must run on node 0 and the spare: {starts}"
    assert not _scratch_dirs(tmp_path)
