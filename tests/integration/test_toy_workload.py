"""A workload kind from another package, end to end: the toy kind
(``tests/integration/plugins/toy_workload/``: a pydantic options model, a plain script per
rank under torchrun reporting through ``chaos.probe``) is found through the
``trainchaos.workloads`` entry point of a dist-info this test writes (no install, no edit of
trainchaos). A scenario names it as ``workload: {toy_workload: {...}}``: ``trainchaos schema``
lists it, ``trainchaos validate`` locates its problems under its key, and ``trainchaos run``
runs it for real (a torchrun job, a rank killed, a verdict)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration._support import cli_env, run_trainchaos

pytestmark = pytest.mark.integration

PLUGINS = Path(__file__).resolve().parent / "plugins"

SCENARIO = """\
name: toy-workload
workload:
  toy_workload: {steps: 30, step_sleep_s: 0.1, resume_every: 5}
topology: {nodes: 2, ranks_per_node: 1, max_restarts: 3}
faults:
  - type: kill_rank
    target: {rank: 1}
    trigger: {at_step: 12}
targets:
  recovery_s: {max: 60}
timeout_s: 150
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A directory holding only the toy's distribution metadata: on PYTHONPATH, its entry
    point is seen by importlib.metadata as an installed package's."""
    dist = tmp_path / "site" / "toy_workload-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-workload\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[trainchaos.workloads]\ntoy_workload = toy_workload:ToyWorkload\n")
    return dist.parent


def _cli(tmp_path: Path, site: Path, *argv: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return run_trainchaos(list(argv), env=cli_env(tmp_path / "state", site, PLUGINS, COLUMNS="300"),
                          cwd=tmp_path, timeout=timeout)


@pytest.mark.timeout(300)
def test_a_workload_kind_from_an_entry_point_is_validated_listed_and_runs(tmp_path: Path, site: Path) -> None:
    # The JSON Schema lists the kind and its options as the registry has them.
    schema = _cli(tmp_path, site, "schema", timeout=60)
    assert schema.returncode == 0, schema.stderr
    workload = json.loads(schema.stdout)["$defs"]["WorkloadDoc"]
    assert "toy_workload" in workload["properties"], workload["properties"]
    # One alternative of the section like a built-in kind's: its key, and none of the keys that
    # only go beside command (progress_regex, steps, checkpoint_dir...).
    alternatives = {tuple(alt["required"]): alt for alt in workload["oneOf"]}
    assert alternatives[("toy_workload",)]["not"] == alternatives[("harness",)]["not"]
    assert {"required": ["progress_regex"]} in alternatives[("toy_workload",)]["not"]["anyOf"]
    assert set(json.loads(schema.stdout)["$defs"]["ToyOptions"]["properties"]) == {
        "steps", "step_sleep_s", "resume_every"}

    # Its options are checked by the schema and by the kind, each problem under its key (exit 2).
    bad = tmp_path / "bad.yaml"
    bad.write_text(SCENARIO.replace("steps: 30,", "steps: 0, stpes: 3,").replace(
        "  toy_workload:", "  steps: 30\n  toy_workload:"))
    refused = _cli(tmp_path, site, "validate", str(bad), timeout=60)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "workload.toy_workload.steps: 0 is out of range: must be between 1 and 1000" in refused.stderr
    assert "workload.toy_workload.stpes: unknown toy_workload option 'stpes'; did you mean 'steps'?" in refused.stderr
    assert "workload.steps: only for 'command'" in refused.stderr, refused.stderr
    crossed = tmp_path / "crossed.yaml"
    crossed.write_text(SCENARIO.replace("resume_every: 5", "resume_every: 40"))
    refused = _cli(tmp_path, site, "validate", str(crossed), timeout=60)
    assert refused.returncode == 2 and "workload.toy_workload.resume_every: 40 is more than steps (30)" \
        in refused.stderr, refused.stdout + refused.stderr
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(SCENARIO.replace("toy_workload:", "toy_workloads:"))
    refused = _cli(tmp_path, site, "validate", str(unknown), timeout=60)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert ("workload.toy_workloads: unknown workload kind 'toy_workloads'; did you mean 'toy_workload'? "
            "known: harness, command") in refused.stderr, refused.stderr

    # A real run: two torchrun agents run the kind's script, rank 1 is killed at step 12 and
    # the group restarts; the job reaches its steps through the probe and meets its target.
    scenario = tmp_path / "toy.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "out"
    result = _cli(tmp_path, site, "run", str(scenario), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS toy-workload[0]" in result.stdout, result.stdout

    run_dir = out / "toy-workload" / "0"
    journal = json.loads((run_dir / "journal.json").read_text())
    assert journal["status"] == "completed" and journal["verdict"]["passed"] is True
    assert journal["scenario"]["workload"]["kind"] == "toy_workload"
    assert journal["metrics"]["recovery_s"] is not None and journal["metrics"]["recovery_s"] < 60
    [fault] = journal["faults"]
    assert fault["type"] == "kill_rank" and fault["step_at_inject"] == 12, fault
    # The ranks were the kind's script, started by torchrun, and wrote their resume files.
    assert (run_dir / "toy-resume-0.txt").read_text() == "30"
    assert (run_dir / "toy-resume-1.txt").read_text() == "30"
    events = [json.loads(line) for path in sorted((run_dir / "events").glob("*.jsonl"))
              for line in path.read_text().splitlines()]
    starts = [e for e in events if e["kind"] == "rank_start" and e.get("stack") == "toy_workload"]
    assert {e["rank"] for e in starts} == {0, 1} and len(starts) >= 3, starts  # rank 1 started twice
    assert any(e["kind"] == "run_end" and e["step"] == 30 for e in events)

    check = _cli(tmp_path, site, "cleanup", "--check", timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
