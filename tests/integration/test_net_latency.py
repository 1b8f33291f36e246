"""The ``latency`` fault on real gloo training across network namespaces: 50 ms on every
link slows the steps down (a gloo all-reduce between two nodes cannot take less than one
round trip, 100 ms), raises no detection, blames nothing, heals when it ends; the link
emulator and its TUN devices leave nothing behind, also after the controller is SIGKILLed.

Needs CAP_NET_ADMIN (root): skipped otherwise.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from chaos.net.fabric import short_id
from chaos.util.procs import find_run_processes
from tests.integration._sigkill import sigkilled_after_apply
from tests.integration._support import TRAINCHAOS, cli_env, run_trainchaos

pytestmark = [pytest.mark.integration, pytest.mark.netns]

SCENARIO = """\
name: {name}
seed: 5
workload:
  harness:
    model: {{name: mlp}}
    steps: {steps}
    global_batch: 24
    checkpoint: {{every_steps: 20}}
    failure: {{watchdog_s: 3, heartbeat_s: 0.5, collective_timeout_s: 20}}
topology: {{nodes: 2, ranks_per_node: 1}}
backend: netns
faults:
  - type: latency
    target: {{nodes: [0, 1]}}
    trigger: {{at_step: 15}}
    params: {{delay_ms: 50{extra}}}
targets: {{false_detections: {{max: 0}}, completes: true}}
timeout_s: 120
"""


def _env(tmp_path: Path) -> dict[str, str]:
    return cli_env(tmp_path / "state")


def _cli(tmp_path: Path, *argv: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return run_trainchaos(list(argv), env=_env(tmp_path), cwd=tmp_path, timeout=timeout)


def _left(run_id: str) -> list[str]:
    """Namespaces, interfaces (TUN devices included, in any namespace) and emulator
    processes of the run still on the machine."""
    tag = f"tc-{short_id(run_id)}-"
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    out += subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for ns in [line.split()[0] for line in out.splitlines() if line.startswith(tag)]:
        out += subprocess.run(["ip", "-n", ns, "-o", "link", "show"], capture_output=True, text=True).stdout
    left = [line for line in out.splitlines() if tag in line]
    return left + [p.cmdline for p in find_run_processes(run_id)]


@pytest.mark.timeout(150)
def test_latency_on_every_link_slows_steps_raises_no_alarm_and_heals(tmp_path: Path) -> None:
    # The job outlives the fault on any machine: under 50 ms each way a step takes at least
    # 0.1 s, so at most 60 steps fit in the fault's 6 s; 120 steps leave 45 to step after it
    # (at 45 steps, a machine whose faulted steps took 0.15 s ended the job before the revert).
    (tmp_path / "lat.yaml").write_text(SCENARIO.format(name="netns-latency", steps=120, extra=", duration_s: 6"))
    res = _cli(tmp_path, "run", "lat.yaml", "--out", "reports")
    run_dir = tmp_path / "reports" / "netns-latency" / "0"
    journal = json.loads((run_dir / "journal.json").read_text())
    metrics = journal["metrics"]
    fault = metrics["faults"][0]
    assert res.returncode == 0, res.stdout + res.stderr
    assert metrics["completed"] and metrics["final_step"] == 120
    # A slow but healthy network: nobody was called dead or hung, nothing was blamed.
    assert metrics["false_detections"] == 0, metrics["false_detection_events"]
    assert fault["detection_s"] is None and fault["detected_suspect"] is None
    assert fault["attribution"] == "none" and metrics["restart_count"] == 0
    # Physics, not a timing budget: with 50 ms each way an all-reduce between the two
    # nodes needs at least one 100 ms round trip, however idle or busy the machine is.
    assert fault["fault_step_s"] is not None and fault["fault_step_s"] >= 0.1, fault
    assert fault["baseline_step_s"] is not None and fault["slowdown"] > 1.0, fault
    # It was removed after 6 s and training went on.
    assert fault["t_revert"] is not None and fault["heal_s"] is not None, fault
    # The packets really crossed the emulator: it was started for this fault, and released.
    resources = [json.loads(line) for line in (run_dir / "resources.jsonl").read_text().splitlines()]
    emu = [r for r in resources if r.get("kind") == "link_emulator" and r["op"] == "create"]
    assert len(emu) == 1
    assert any(r["op"] == "destroyed" and r["id"] == emu[0]["id"] for r in resources)
    assert _left(journal["run_id"]) == []


@pytest.mark.machine_cleanup
@pytest.mark.timeout(150)
def test_sigkilled_controller_leaves_emulator_that_cleanup_removes(tmp_path: Path) -> None:
    (tmp_path / "long.yaml").write_text(SCENARIO.format(name="netns-latency-long", steps=3000, extra=""))
    run_dir = tmp_path / "reports" / "netns-latency-long" / "0"
    with sigkilled_after_apply([*TRAINCHAOS, "run", "long.yaml", "--out", "reports"], _env(tmp_path), tmp_path,
                               run_dir, "latency fault") as run_id:
        left = _left(run_id)
        assert any(f"tc-{short_id(run_id)}-e0" in line for line in left), left
        assert any("chaos.net.linkemu" in line for line in left), left
        check = _cli(tmp_path, "cleanup", "--check")
        assert check.returncode == 1 and "link_emulator" in check.stdout, check.stdout
        res = _cli(tmp_path, "cleanup")
        assert res.returncode == 0, res.stdout + res.stderr
        assert _left(run_id) == []
        check = _cli(tmp_path, "cleanup", "--check")
        assert check.returncode == 0, check.stdout
