"""A partition that heals, on real gloo training across network namespaces (the shipped
scenario ``isolate-then-heal``): the cut-off node is detected as a network failure of that
node, nobody else is blamed, the job goes on without it and takes it back after the heal,
and ``heal_s`` measures how long that took.

The ranks start warm (``harness.warm_start``): the group restarts twice (shrunk, grown
back), and nothing here is a cold launch's figure.

Needs CAP_NET_ADMIN (root): skipped otherwise.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from chaos.net.fabric import short_id
from chaos.util.procs import find_run_processes
from tests.integration._support import REPO, cli_env, run_trainchaos, warm_copy

pytestmark = [pytest.mark.integration, pytest.mark.netns]

SCENARIO = REPO / "scenarios" / "network" / "isolate-then-heal.yaml"


@pytest.mark.timeout(200)
def test_partition_heals_and_the_node_is_taken_back(tmp_path: Path) -> None:
    scenario = warm_copy(SCENARIO, tmp_path / "scenario")
    res = run_trainchaos(["run", str(scenario), "--out", "reports"],
                         env=cli_env(tmp_path / "state"), cwd=tmp_path, timeout=190)
    journal = json.loads((tmp_path / "reports" / "isolate-then-heal" / "0" / "journal.json").read_text())
    metrics = journal["metrics"]
    fault = metrics["faults"][0]
    assert fault["detected_class"] == "network" and fault["detected_suspect"] == "rank-2", res.stdout
    assert fault["attribution"] == "correct"
    assert metrics["false_detections"] == 0, metrics["false_detection_events"]
    assert res.returncode == 0, res.stdout + res.stderr
    # Healed: the partition was removed during the run, and the job stepped at its full
    # world size again afterwards (heal_s counts only such steps).
    assert fault["t_revert"] is not None and fault["heal_s"] is not None and fault["heal_s"] > 0, fault
    assert metrics["completed"] and metrics["final_world_size"] == 3
    assert not find_run_processes(journal["run_id"])
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    listed += subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert f"tc-{short_id(journal['run_id'])}-" not in listed
