"""Issue 42, builds 5 and 6, on real runs of a user's own command (torchrun, real processes).

* The twin is judged too: a script whose every rank trains the whole dataset (Accelerate run
  under torchrun on CPU without ``cpu=True``: each rank its own single-process job), fault
  free. The faulted run matches its twin exactly, so against the twin nothing is wrong; the
  verdict still FAILs, first on the twin's own duplicated samples, and the comparison with
  the twin is flagged as against a wrong reference.
* Honest blindness: a script without the probe, a rank frozen for two seconds. The torchrun
  agent sees only a worker that dies; nothing else could have reported the job noticing a
  hang, so detection is ``unknown`` with the probe call named, never ``undetected``.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from chaos.runner.run import run_scenario_once
from chaos.scenario.load import parse_scenario
from chaos.util.procs import find_run_processes
from tests.integration._support import cli_env, run_trainchaos

pytestmark = pytest.mark.integration

EVERY_RANK_TRAINS_ALL = textwrap.dedent(
    """
    import time
    from chaos import probe

    step = 0
    for epoch in range(2):
        for start in range(0, 16, 4):  # the whole dataset on every rank
            step += 1
            probe.samples(range(start, start + 4), epoch=epoch)
            time.sleep(0.05)
            probe.step_end(step, loss=1.0 / step)
    """
)


@pytest.mark.timeout(180)
def test_a_twin_that_trains_every_sample_twice_fails_the_run_naming_the_twin(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(EVERY_RANK_TRAINS_ALL)
    (tmp_path / "twice.yaml").write_text(textwrap.dedent(f"""\
        name: twice
        baseline: true
        workload: {{command: "python {script}", steps: 8}}
        topology: {{nodes: 1, ranks_per_node: 2}}
        targets: {{data: exactly_once}}
        timeout_s: 90
        """))
    result = run_trainchaos(["run", str(tmp_path / "twice.yaml"), "--out", str(tmp_path / "out")],
                            env=cli_env(tmp_path / "state"), cwd=tmp_path, timeout=150)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    twin = json.loads((tmp_path / "out" / "twice" / "baseline" / "journal.json").read_text())
    run = json.loads((tmp_path / "out" / "twice" / "0" / "journal.json").read_text())
    assert twin["status"] == run["status"] == "completed", output
    assert not find_run_processes(run["run_id"]) and not find_run_processes(twin["run_id"])

    # 16 samples per epoch trained by both ranks: 16 repeats per epoch, one of which a
    # sampler's padding could explain; the twin's own record says so.
    assert twin["metrics"]["data_duplicated"] == 32
    (own,) = twin["twin_checks"]
    assert (own["name"], own["ok"], own["twin"]) == ("data", False, True)
    reason = own["reason"]
    assert reason.startswith("fault-free twin: data exactly_once: 30 samples duplicated > 0"), reason
    assert "the job's own bug before any fault" in reason

    first, *rest = run["verdict"]["checks"]
    assert first == own and run["baseline"]["checks"] == [own]
    (data,) = [c for c in rest if c["name"] == "data"]
    # The faulted run trained what its twin did: measured against it, nothing is wrong...
    assert data["ok"] and data["value"]["duplicated"] == 0
    # ...against a reference that is itself wrong, and the record says so.
    assert data["wrong_reference"] and "[against a wrong reference" in data["reason"]
    assert not run["verdict"]["passed"]
    summary = (tmp_path / "out" / "twice" / "0" / "summary.md").read_text()
    assert "The fault-free twin missed 1 correctness target(s) before any fault (data)" in summary


NO_PROBE = textwrap.dedent(
    """
    import time

    for step in range(1, 21):
        time.sleep(0.1)
        print(f"step {step} loss {1.0 / step:.4f}", flush=True)
    """
)


@pytest.mark.timeout(120)
def test_a_hang_in_a_script_without_the_probe_is_detection_unknown_with_the_fix(tmp_path: Path, state_dir: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(NO_PROBE)
    scenario = parse_scenario({
        "name": "blind-hang",
        "workload": {"command": f"python {script}", "progress_regex": r"step (?P<step>\d+) loss (?P<loss>[\d.]+)",
                     "steps": 20},
        "topology": {"nodes": 1, "ranks_per_node": 1},
        "faults": [{"type": "hang_rank", "target": {"rank": 0}, "trigger": {"at_step": 5},
                    "params": {"duration_s": 2}}],
        "targets": {"detection_s": {"max": 5}, "attribution": "correct"},
        "timeout_s": 90,
    }, str(tmp_path / "scenario.yaml"))
    record = run_scenario_once(scenario, str(tmp_path / "run"), seed=0)
    assert record.status == "completed", record.error
    assert not find_run_processes(str(record.run_id))
    assert record.metrics is not None and record.verdict is not None
    (fault,) = record.metrics.faults
    assert fault.detection_s is None and fault.attribution == "unknown"
    assert not record.metrics.undetected  # nothing says the job missed it
    reasons = record.verdict.reasons()
    assert len(reasons) == 2 and not any("undetected" in r for r in reasons), reasons
    assert reasons[0].startswith("fault f0-hang_rank: detection unknown: no detection source sees a hang "
                                 "fault in this workload; report what the script notices through the probe: "
                                 '`chaos.probe.emit("detected"'), reasons[0]
    assert reasons[1].startswith("f0-hang_rank: attribution unknown: "), reasons[1]
