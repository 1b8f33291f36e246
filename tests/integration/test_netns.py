"""The ``netns`` backend on real runs: gloo training across network namespaces, a partition
on the real traffic, and nothing left behind, also after the controller is SIGKILLed.

Needs CAP_NET_ADMIN (root): skipped otherwise. Leftovers are looked for by the run's own
short id (``tc-<8 hex>-``) in ``ip netns``, ``ip link`` and ``nft list tables``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from chaos.net.fabric import short_id
from chaos.util.procs import find_run_processes
from tests.integration._sigkill import sigkilled_after_apply
from tests.integration._support import TRAINCHAOS, cli_env, run_trainchaos

pytestmark = [pytest.mark.integration, pytest.mark.netns]

HARNESS = """\
workload:
  harness:
    model: {{name: mlp}}
    steps: {steps}
    global_batch: 24
    step_delay_s: {delay}
    checkpoint: {{every_steps: 20}}
    failure: {{watchdog_s: 3, heartbeat_s: 0.5, collective_timeout_s: 20}}
"""


def _env(tmp_path: Path) -> dict[str, str]:
    return cli_env(tmp_path / "state")


def _cli(tmp_path: Path, *argv: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return run_trainchaos(list(argv), env=_env(tmp_path), cwd=tmp_path, timeout=timeout)


def _fabric_left(run_id: str) -> list[str]:
    """Namespaces, interfaces and root nft tables of the run still on the machine."""
    tag = f"tc-{short_id(run_id)}-"
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    out += subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    left = [line for line in out.splitlines() if tag in line]
    return left + [line for line in tables.splitlines() if "trainchaos" in line]


def _journal(tmp_path: Path, name: str) -> dict:
    return json.loads((tmp_path / "reports" / name / "0" / "journal.json").read_text())


@pytest.mark.timeout(150)
def test_clean_run_across_namespaces_completes_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "clean.yaml").write_text("name: netns-clean\n" + HARNESS.format(steps=40, delay=0)
                                         + "topology: {nodes: 2, ranks_per_node: 1}\n"
                                         "backend: netns\ntargets: {false_detections: {max: 0}}\n"
                                         "timeout_s: 120\n")
    temp_before = set(os.listdir(tempfile.gettempdir()))
    res = _cli(tmp_path, "run", "clean.yaml", "--out", "reports")
    assert res.returncode == 0, res.stdout + res.stderr
    journal = _journal(tmp_path, "netns-clean")
    # Each node's temp files went to its own temp dir, removed with the run: nothing loose
    # (torchrun's torchelastic_* log dirs were left in /tmp when the node's TMPDIR was missing).
    loose = {n for n in set(os.listdir(tempfile.gettempdir())) - temp_before
             if n.startswith(("torchelastic_", journal["run_id"]))}
    assert not loose, loose
    metrics = journal["metrics"]
    assert metrics["completed"] and metrics["final_step"] == 40
    assert metrics["false_detections"] == 0
    # The gloo traffic really crossed the fabric: each rank advertised its node's address.
    resources = [json.loads(line) for line in
                 (tmp_path / "reports" / "netns-clean" / "0" / "resources.jsonl").read_text().splitlines()]
    kinds = [r["kind"] for r in resources if r["op"] == "create"]
    assert kinds.count("netns") == 2 and kinds.count("veth") == 2 and kinds.count("bridge") == 1
    assert sum(r["op"] == "destroyed" for r in resources) == len(kinds)
    assert _fabric_left(journal["run_id"]) == []
    assert not find_run_processes(journal["run_id"])


@pytest.mark.timeout(150)
def test_isolated_node_is_detected_as_network_and_blamed_and_nothing_is_left(tmp_path: Path) -> None:
    (tmp_path / "isolate.yaml").write_text(
        "name: netns-isolate\nseed: 3\n" + HARNESS.format(steps=150, delay=0.05)
        + "topology: {nodes: 3, ranks_per_node: 1, min_nodes: 2}\nbackend: netns\n"
        "faults:\n  - type: partition\n    target: {node: 2}\n    trigger: {at_step: 30}\n"
        "    params: {shape: isolate}\n"
        "targets: {attribution: correct, false_detections: {max: 0}}\ntimeout_s: 120\n")
    res = _cli(tmp_path, "run", "isolate.yaml", "--out", "reports")
    journal = _journal(tmp_path, "netns-isolate")
    fault = journal["metrics"]["faults"][0]
    assert fault["detected_class"] == "network", res.stdout
    assert fault["detected_suspect"] == "rank-2", res.stdout
    assert fault["attribution"] == "correct"
    assert journal["metrics"]["false_detections"] == 0, journal["metrics"].get("false_alarms")
    # The two healthy nodes went on without the cut-off one.
    assert journal["metrics"]["completed"] and journal["metrics"]["final_world_size"] == 2
    assert res.returncode == 0, res.stdout + res.stderr
    assert _fabric_left(journal["run_id"]) == []


@pytest.mark.machine_cleanup
@pytest.mark.timeout(150)
def test_sigkilled_controller_leaves_fabric_that_cleanup_removes(tmp_path: Path) -> None:
    (tmp_path / "long.yaml").write_text(
        "name: netns-long\n" + HARNESS.format(steps=2000, delay=0.05)
        + "topology: {nodes: 2, ranks_per_node: 1}\nbackend: netns\n"
        "faults:\n  - type: partition\n    target: {node: 1}\n    trigger: {at_step: 20}\n"
        "    params: {shape: one_way}\ntimeout_s: 120\n")
    run_dir = tmp_path / "reports" / "netns-long" / "0"
    with sigkilled_after_apply([*TRAINCHAOS, "run", "long.yaml", "--out", "reports"], _env(tmp_path), tmp_path,
                               run_dir, "partition") as run_id:
        assert _fabric_left(run_id), "the fabric should still be there after a SIGKILL"
        check = _cli(tmp_path, "cleanup", "--check")
        assert check.returncode == 1, check.stdout
        res = _cli(tmp_path, "cleanup")
        assert res.returncode == 0, res.stdout + res.stderr
        assert _fabric_left(run_id) == []
        assert not find_run_processes(run_id)
        check = _cli(tmp_path, "cleanup", "--check")
        assert check.returncode == 0, check.stdout


@pytest.mark.timeout(60)
@pytest.mark.skipif(not shutil.which("capsh"), reason="needs capsh to drop capabilities")
def test_without_cap_net_admin_nothing_starts_and_exit_is_2(tmp_path: Path) -> None:
    (tmp_path / "clean.yaml").write_text("name: netns-nocap\n" + HARNESS.format(steps=10, delay=0)
                                         + "topology: {nodes: 2, ranks_per_node: 1}\nbackend: netns\n")
    argv = " ".join([*TRAINCHAOS, "run", "clean.yaml", "--out", "reports"])
    res = subprocess.run(["capsh", "--drop=cap_net_admin,cap_sys_admin", "--", "-c", argv],
                         env=_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=50)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [line for line in (res.stdout + res.stderr).splitlines() if "CAP_NET_ADMIN is missing" in line]
    assert len(lines) == 1 and "clean.yaml" in lines[0], res.stdout + res.stderr
    assert not (tmp_path / "reports").exists()
