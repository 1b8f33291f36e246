"""noisy_neighbor: validation, the load generator and its cgroups, the neighbour metrics on a
synthetic timeline, and the --compare table's targeted columns."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.cluster.cgroups import CgroupDir, cgroup_path, cgroup_procs, own_cgroup
from chaos.metrics import FaultRecord, RunInfo, compute_metrics
from chaos.report.comparison import comparison_rows, headers
from chaos.runfiles.record import RunRecord
from chaos.runfiles.resources import RunResources, pending_resources
from chaos.scenario.load import ScenarioError, load_suite
from chaos.scenario.variants import parse_variation
from chaos.util.procs import process_state

REPO = Path(__file__).resolve().parents[2]


def _ev(events, t, src, kind, inc=0, **fields):
    events.append({"t": t, "src": src, "incarnation": inc, "kind": kind, **fields})


def _timeline(victim_step_s: float, blame: str | None = None, cls: str = "hang") -> list[dict]:
    """Two ranks, rank 1 on node 1; steps of 0.1 s, then ``victim_step_s`` from t=10 to t=20."""
    events: list[dict] = []
    for r in (0, 1):
        _ev(events, 0.0, f"rank-{r}", "rank_start", rank=r, node=r, world_size=2)
    t, step = 0.0, 0
    while t < 30.0:
        t += victim_step_s if 10.0 <= t < 20.0 else 0.1
        step += 1
        for r in (0, 1):
            _ev(events, t + 0.001 * r, f"rank-{r}", "step_end", step=step, loss=1.0)
    if blame:
        _ev(events, 15.0, "rank-0", "detected", by="rank-0", reason="no heartbeat", suspect=blame,
            failure_class=cls)
    return events


def _metrics(events):
    record = FaultRecord("f0-noisy_neighbor", "noisy_neighbor", "slow", ["rank-1", "node-1"],
                         t_inject=10.0, t_revert=20.0, family="neighbor")
    return compute_metrics(events, [record], RunInfo("completed", 0.0, 31.0, 100, 2))


def test_victim_slowdown_against_its_own_steps_and_blame_is_a_false_alarm() -> None:
    m = _metrics(_timeline(0.25))
    (fm,) = m.faults
    assert fm.victim_step_s_before == pytest.approx(0.1, abs=1e-3)
    assert fm.victim_step_s_during == pytest.approx(0.25, abs=1e-3)
    assert fm.victim_slowdown == pytest.approx(2.5, abs=0.05)
    assert m.false_detections == 0 and m.restart_count == 0
    # A neighbour makes a node slow, not dead: calling the victim hung is a false alarm,
    # calling it slow is not.
    assert _metrics(_timeline(0.25, blame="rank-1", cls="hang")).false_detections == 1
    assert _metrics(_timeline(0.25, blame="rank-1", cls="slow")).false_detections == 0


def _scenario(tmp_path: Path, params: str, backend: str = "") -> Path:
    path = tmp_path / "nb.yaml"
    path.write_text(f"""name: nb
workload: {{harness: {{model: {{name: mlp}}, steps: 50}}}}
topology: {{nodes: 2, ranks_per_node: 1}}
{backend}
faults:
  - type: noisy_neighbor
    target: {{node: 1}}
    trigger: {{at_step: 10}}
    params: {params}
targets:
  victim_slowdown: {{min: 1.3}}
  restart_count: {{max: 0}}
""")
    return path


def test_params_are_validated_with_their_location(tmp_path: Path) -> None:
    load_suite([str(_scenario(tmp_path, "{kind: cpu, placement: same, workers: 2}"))])
    with pytest.raises(ScenarioError) as info:
        load_suite([str(_scenario(tmp_path, "{kind: gpu, placement: next_door, workers: 0}"))])
    where = {issue.location for issue in info.value.issues}
    assert {"faults[0].params.kind", "faults[0].params.placement", "faults[0].params.workers"} <= where
    path = _scenario(tmp_path, "{kind: cpu}")
    path.write_text(path.read_text().replace("{node: 1}", "{rank: 1}"))
    with pytest.raises(ScenarioError) as info:
        load_suite([str(path)])
    assert [issue.location for issue in info.value.issues] == ["faults[0].target.rank"]


def test_compare_reaches_into_the_fault_list(tmp_path: Path) -> None:
    path = _scenario(tmp_path, "{kind: cpu, placement: same}")
    scenarios = load_suite([str(path)], parse_variation("faults.0.params.placement=same,sibling"))
    assert [(s.name, s.faults[0].params["placement"]) for s in scenarios] == [
        ("nb--same", "same"), ("nb--sibling", "sibling")]


def test_compare_takes_a_backend_with_its_options(tmp_path: Path) -> None:
    """Local beside docker with a CPU limit per node (scenarios/neighbor/cpu-hog-isolation.yaml):
    a mapping value is labelled and named as YAML flow, not Python's repr."""
    path = _scenario(tmp_path, "{kind: cpu}")
    v = parse_variation("backend=local,{docker: {cpus: 1.0}}")
    scenarios = load_suite([str(path)], v)
    assert [(s.name, s.backend.name, s.backend.options.get("cpus")) for s in scenarios] == [
        ("nb--local", "local", None), ("nb--docker-cpus-1.0", "docker", 1.0)]
    assert [v.split(s.name) for s in scenarios] == [("nb", "local"), ("nb", "{docker: {cpus: 1.0}}")]


def test_comparison_shows_the_targeted_metrics() -> None:
    v = parse_variation("faults.0.params.placement=same,sibling")

    def journal(name: str, slowdown: float) -> RunRecord:
        return RunRecord.from_dict({"schema_version": 2, "scenario": {"name": name, "targets": {"victim_slowdown": {"max": 1.5, "min": None},
                                                       "restart_count": {"max": 0, "min": None},
                                                       "recovery_s": None}},
                "status": "completed", "verdict": {"passed": True}, "faults": [{"fault_id": "f0", "type": "t"}],
                "metrics": {"goodput": 0.9, "restart_count": 0, "faults": [{"victim_slowdown": slowdown}]}})

    journals = [journal("nb--same", 2.6), journal("nb--sibling", 1.1)]
    assert headers(journals)[-3:] == ["victim slowdown", "restarts", "verdict"]
    rows = comparison_rows(journals, v)
    assert [(r[1], r[-3], r[-2]) for r in rows] == [("same", "2.6 x", "0"), ("sibling", "1.1 x", "0")]


def test_loadgen_joins_its_cgroup_and_dies_as_a_whole(tmp_path: Path) -> None:
    """A CPU load in a run-scoped CPU cgroup: it is in there with its workers, and killing
    the one pid the resource journal holds takes the workers with it; teardown removes the
    cgroup."""
    if own_cgroup("cpu") is None:
        pytest.skip("no cgroup v1 cpu hierarchy here")
    resources = RunResources("trainchaos-unit0nb", str(tmp_path))
    path = cgroup_path("cpu", "trainchaos-unit0nb-neighbor")
    try:
        resources.acquire("cgroup", {"path": path, "settings": {"cpu.cfs_period_us": 100_000,
                                                               "cpu.cfs_quota_us": 10_000}})
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen([sys.executable, "-m", "chaos.loadgen", "cpu", "--workers", "2",
                                 "--join-cgroup", path], env=env)
        deadline = time.monotonic() + 10
        while len(cgroup_procs(path)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        members = cgroup_procs(path)
        assert proc.pid in members and len(members) == 3
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 5
        while any(process_state(p) not in (None, "Z") for p in members) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(process_state(p) in (None, "Z") for p in members)
    finally:
        assert resources.release_all() == []
    assert not os.path.exists(path) and pending_resources(resources.path) == []
    assert not CgroupDir.exists({"path": path}, {})


# ------------------------------------------------------------------ memory_leak / oom_kill


def test_memory_faults_are_in_process_oom_faults_with_bounded_allocations(tmp_path: Path) -> None:
    from typing import get_args

    from chaos.faults.base import FailureClass, lookup

    for name in ("memory_leak", "oom_kill"):
        cls = lookup(name)
        assert cls.in_process and cls.failure_class == "oom" and "oom" in get_args(FailureClass)
    path = tmp_path / "leak.yaml"
    path.write_text("""name: leak
workload: {harness: {model: {name: mlp}, steps: 50}}
topology: {nodes: 2, ranks_per_node: 1}
backend: {local: {memory_mb: 32}}
faults:
  - type: memory_leak
    target: {rank: 1}
    trigger: {at_step: 10}
    params: {rate_mb_s: 0, max_mb: 0}
""")
    with pytest.raises(ScenarioError) as info:
        load_suite([str(path)])
    assert {i.location for i in info.value.issues} == {
        "backend.local.memory_mb", "faults[0].params.rate_mb_s", "faults[0].params.max_mb"}


def test_leak_allocates_resident_memory_up_to_its_bound() -> None:
    """The leak writes every page (an untouched allocation would leak nothing) and stops at
    max_mb; null rate_mb_s allocates it all at once (oom_kill)."""
    code = (
        "import time, chaos.probe.leak as leak\n"
        "def rss():\n"
        "    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1]) >> 10\n"
        "base = rss(); leak.start_leak({'rate_mb_s': None, 'max_mb': 40}); at_once = rss() - base\n"
        "leak.start_leak({'rate_mb_s': 200, 'max_mb': 30}); time.sleep(0.6); print(at_once, rss() - base)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout.split()
    at_once, total = int(out[0]), int(out[1])
    assert 38 <= at_once <= 48 and 66 <= total <= 80


def test_an_oom_is_attributed_and_recovery_counts_from_the_kill_not_the_leak() -> None:
    """The leak starts at t=10 (step 100), the kernel kills rank 1 at t=14 (step 140); the
    group resumes from step 120 at t=16. Until the kill the job trained on: the steps lost
    are those since the last checkpoint before the kill (not before the leak), and the
    restart is the kill's (recovery counts from the leak's start, as every recovery counts
    from its fault's)."""
    events: list[dict] = []
    for r in (0, 1):
        _ev(events, 0.0, f"rank-{r}", "rank_start", rank=r, node=r, world_size=2)
    for step in range(1, 141):
        for r in (0, 1):
            _ev(events, step * 0.1 + 0.001 * r, f"rank-{r}", "step_end", step=step, loss=1.0)
    _ev(events, 10.0, "rank-1", "fault_injected", fault="f0-memory_leak", step=100, mechanism="probe")
    _ev(events, 14.05, "kernel-node-1", "detected", by="kernel-node-1", suspect="rank-1", failure_class="oom",
        reason="the kernel's OOM killer killed pid 7 (rank 1)")
    _ev(events, 14.1, "rank-0", "detected", by="rank-0", suspect="rank-1", failure_class="crash", reason="gone")
    for r in (0, 1):
        _ev(events, 15.5, f"rank-{r}", "rank_start", 1, rank=r, node=r, world_size=2, resumed_from=120)
        _ev(events, 15.6, f"rank-{r}", "ckpt_load", 1, step=120)
        for step in range(121, 151):
            _ev(events, 16.0 + (step - 121) * 0.1 + 0.001 * r, f"rank-{r}", "step_end", 1, step=step, loss=1.0)
    record = FaultRecord("f0-memory_leak", "memory_leak", "oom", ["rank-1"], planned_step=100, family="memory")
    m = compute_metrics(events, [record], RunInfo("completed", 0.0, 20.0, 150, 2))
    (fm,) = m.faults
    assert (fm.detected_by, fm.detected_class, fm.attribution) == ("kernel-node-1", "oom", "correct")
    assert fm.detection_s == pytest.approx(4.05, abs=0.01)
    assert fm.restarted and fm.recovery_s == pytest.approx(16.0 - 10.0, abs=0.01)
    assert (fm.last_step_before, fm.resumed_from, fm.lost_steps) == (140, 120, 20)
    assert m.false_detections == 0



def test_the_oom_watcher_reports_the_kill_count_once_the_kernel_has_counted_it(tmp_path) -> None:
    import threading

    from chaos.cluster.oomwatch import _count_after_kill

    control = tmp_path / "memory.oom_control"
    control.write_text("oom_kill_disable 0\nunder_oom 1\noom_kill 0\n")
    # The eventfd fires when the kernel decides; the counter moves when it kills, a moment later.
    timer = threading.Timer(0.05, lambda: control.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"))
    timer.start()
    try:
        assert _count_after_kill(str(tmp_path), 0, wait_s=5) == 1
    finally:
        timer.join()
    assert _count_after_kill(str(tmp_path), 1, wait_s=0.05) == 1, "no new kill: the count as it is"
