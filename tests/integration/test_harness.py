"""The harness under real faults: real torchrun agents, real gloo ranks, real signals.

Every test launches the job exactly as ``trainchaos run`` does (one torchrun agent per
simulated node, through the ``local`` cluster backend) and checks what a user
of the harness relies on: a fault-free run is reproducible and learns; a killed or frozen
rank is noticed and blamed, the group restarts from the last checkpoint and ends bitwise
identical to the fault-free run; corrupt checkpoints are never silently trained over.

After every run: no process of the run is left, none is left stopped, and nothing was
written outside the test's ``tmp_path``.

The first fault-free run starts cold; its repeat and the killed and hung runs start warm
(``harness.warm_start``: each node's agent and zygote are forked, the zygote forks the ranks,
so neither a start nor a restart pays the imports) and must still end bitwise on the cold
fault-free weights.

Wall time on a 2-core machine: about 2.5 minutes with other work on it (load 5; 4 runs of 4
ranks and 60 steps, 3 short runs of 2 ranks).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from chaos.cluster import lookup_backend
from chaos.cluster.base import RunSpec
from chaos.model.scenario import Topology
from chaos.runfiles.events import Event, read_events
from chaos.runfiles.resources import RunResources
from chaos.runner.run import run_scenario_once
from chaos.scenario.load import parse_scenario
from chaos.util.procs import find_run_processes
from chaos.workload.torchrun import TorchrunPerNode
from harness.checkpoint import STATE_FILE, CheckpointManager
from harness.config_load import config_from_mapping, config_to_args
from tests.integration._support import REPO, state_dir_env

pytestmark = pytest.mark.integration

SEED = 7
# 60 steps: the loss has fallen by more than 1 by step 40, and a fault at step 50 leaves a
# checkpoint (40) to resume from and steps after it to end on the fault-free weights.
STEPS = 60
CKPT_EVERY = 20
# The options every 2x2 run shares; the fault-free digest is compared across all of them.
WORKLOAD: dict[str, Any] = {"steps": STEPS, "checkpoint": {"every_steps": CKPT_EVERY, "mode": "async"}}
TOPOLOGY = {"nodes": 2, "ranks_per_node": 2}
# What a run writes into its run dir; any of these appearing elsewhere is a leak.
RUN_OUTPUTS = {"final.json", "checkpoints", "events", "logs", "tmp", "journal.json", "summary.md",
               "probe_faults.json", "fault_journal.jsonl"}


# ----------------------------------------------------------------------------- helpers

def _scenario(name: str, faults: list[dict[str, Any]] | None = None,
              failure: dict[str, Any] | None = None, timeout_s: float = 150, warm: bool = False):
    harness = {**WORKLOAD, "warm_start": warm}
    if failure:
        harness["failure"] = failure
    return parse_scenario({
        "name": name, "seed": SEED, "workload": {"harness": harness}, "topology": TOPOLOGY,
        "faults": faults or [], "timeout_s": timeout_s,
    }, f"<{name}>")


def _final(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "final.json").read_text())


def _of(events: list[Event], kind: str, **match: Any) -> list[Event]:
    return [e for e in events if e.get("kind") == kind and all(e.get(k) == v for k, v in match.items())]


def _proc_matches(pid: str, markers: list[bytes]) -> bool:
    for name in ("environ", "cmdline"):
        try:
            data = Path(f"/proc/{pid}/{name}").read_bytes()
        except OSError:
            return False
        if any(m in data for m in markers):
            return True
    return False


def _stopped_python_processes(markers: list[str]) -> list[str]:
    """Stopped (state T) python processes that belong to these runs (by run id or run dir)."""
    needles = [m.encode() for m in markers]
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        state = stat[stat.rfind(")") + 2:].split()[0]
        if state in ("T", "t") and b"python" in cmd and _proc_matches(pid, needles):
            found.append(pid + ": " + cmd.replace(b"\0", b" ").decode(errors="replace"))
    return found


def assert_run_left_nothing(run_id: str, run_dir: Path) -> None:
    left = find_run_processes(run_id)
    assert not left, f"processes of run {run_id} still alive: {left}"
    stopped = _stopped_python_processes([run_id, str(run_dir)])
    assert not stopped, f"stopped python processes of run {run_id} remain: {stopped}"


def run_harness(run_dir: Path, topology: Topology, options: dict[str, Any],
                timeout_s: float = 90) -> tuple[str, dict[int, int | None]]:
    """Run the harness directly on the local backend (no controller, no faults): (run id, rc per node)."""
    run_id = f"trainchaos-test-{uuid.uuid4().hex[:10]}"
    cfg = config_from_mapping({**options, "seed": SEED, "run_dir": str(run_dir)})
    (run_dir / "events").mkdir(parents=True)
    argv = ("-m", "harness", *config_to_args(cfg))
    spec = RunSpec(run_id, str(run_dir), topology, list(argv), launcher=TorchrunPerNode(argv))
    resources = RunResources(run_id, str(run_dir))
    cluster = lookup_backend("local")(spec, resources)
    try:
        cluster.start()
        deadline = time.monotonic() + timeout_s
        while any(s.returncode is None for s in cluster.poll().values()):
            assert time.monotonic() < deadline, f"harness run did not end within {timeout_s} s"
            time.sleep(0.1)
        return run_id, {n: s.returncode for n, s in cluster.poll().items()}
    finally:
        cluster.stop()
        assert not resources.release_all()
        assert_run_left_nothing(run_id, run_dir)


def _watched_entries() -> set[str]:
    """Entries a leaky run would create outside its run dir (concurrent tests' files excluded)."""
    entries = set()
    for base in (REPO, Path.cwd()):
        entries |= {str(base / n) for n in RUN_OUTPUTS if (base / n).exists()}
    tmp = Path(tempfile.gettempdir())
    entries |= {str(p) for p in tmp.iterdir() if p.name.startswith(("torchelastic", "trainchaos"))}
    return entries


@pytest.fixture(scope="module", autouse=True)
def state_dir(tmp_path_factory: pytest.TempPathFactory):
    """Runs register themselves in a state dir (for ``trainchaos cleanup``): keep it in tmp.

    Module-scoped and autouse, so it is in place before the module-scoped baseline run.
    """
    with state_dir_env(tmp_path_factory.mktemp("state")) as path:
        yield path


def assert_nothing_leaked(before: set[str], state_dir: Path) -> None:
    leaked = _watched_entries() - before
    assert not leaked, f"written outside tmp_path: {sorted(leaked)}"
    active = state_dir / "active"
    left = sorted(os.listdir(active)) if active.is_dir() else []
    assert not left, f"runs still registered as active after they ended: {left}"


@pytest.fixture(autouse=True)
def nothing_outside_tmp_path(state_dir: Path):
    before = _watched_entries()
    yield
    assert_nothing_leaked(before, state_dir)


def _run_scenario(scenario, run_dir: Path, with_faults: bool = True) -> dict[str, Any]:
    journal = run_scenario_once(scenario, str(run_dir), SEED, with_faults=with_faults).to_dict()
    assert_run_left_nothing(journal["run_id"], run_dir)
    return journal


@pytest.fixture(scope="module")
def fault_free(tmp_path_factory: pytest.TempPathFactory, state_dir: Path) -> dict[str, Any]:
    """The fault-free 2x2 run every other 2x2 run is compared with (computed once)."""
    run_dir = tmp_path_factory.mktemp("fault-free") / "run"
    before = _watched_entries()
    journal = _run_scenario(_scenario("fault-free"), run_dir, with_faults=False)
    assert_nothing_leaked(before, state_dir)
    assert journal["status"] == "completed", journal["error"]
    return {"run_dir": run_dir, "final": _final(run_dir), "events": read_events(str(run_dir / "events"))}


# ----------------------------------------------------------------------------- (a) fault-free

@pytest.mark.timeout(240)
def test_fault_free_run_is_reproducible_and_learns(fault_free: dict[str, Any], tmp_path: Path) -> None:
    run_dir = tmp_path / "again"
    journal = _run_scenario(_scenario("fault-free", warm=True), run_dir, with_faults=False)
    assert journal["status"] == "completed", journal["error"]

    first, again = fault_free["final"], _final(run_dir)
    assert first["step"] == again["step"] == STEPS
    assert first["world_size"] == again["world_size"] == 4
    assert again["digest"] == first["digest"], \
        "same seed and options must give bitwise-identical weights, whether the ranks started cold or warm"

    for final, events in ((first, fault_free["events"]), (again, read_events(str(run_dir / "events")))):
        losses = [e["loss"] for e in _of(events, "step_end", src="rank-0")]
        assert len(losses) == STEPS
        assert final["loss"] == losses[-1]
        assert final["loss"] < losses[0] - 0.5, f"loss did not fall: {losses[0]:.3f} -> {final['loss']:.3f}"
        assert not _of(events, "detected"), "a fault-free run reported a failure"
        restarted = [e for e in events if e["src"].startswith("rank-") and e["incarnation"] > 0]
        assert not restarted, f"a fault-free run restarted: {restarted[0]}"
        rank_starts = _of(events, "rank_start")
        assert len(rank_starts) == 4, f"ranks started more than once: {rank_starts}"


# ----------------------------------------------------------------------------- (b), (c) faults

@dataclass(frozen=True)
class FaultCase:
    id: str
    fault: dict[str, Any]
    failure_class: str
    """What the detecting peer must call it."""
    failure: dict[str, Any] | None = None
    """Harness failure options (they do not change the training math, so digests still compare)."""
    detect_within_s: float | None = None
    """Correctness bound on detection (watchdog + slack), not a benchmark."""


AT_STEP = 50
VICTIM = 3
FAULT_CASES = [
    FaultCase("kill-rank", {"type": "kill_rank", "target": {"rank": VICTIM},
                            "trigger": {"at_step": AT_STEP}, "params": {"signal": "SIGKILL"}},
              failure_class="crash"),
    FaultCase("hang-rank", {"type": "hang_rank", "target": {"rank": VICTIM},
                            "trigger": {"at_step": AT_STEP}, "params": {"duration_s": None}},
              failure_class="hang", failure={"watchdog_s": 3}, detect_within_s=3 + 5),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", FAULT_CASES, ids=lambda c: c.id)
def test_rank_fault_is_detected_and_training_resumes_to_the_same_weights(
    case: FaultCase, fault_free: dict[str, Any], tmp_path: Path
) -> None:
    run_dir = tmp_path / case.id
    journal = _run_scenario(_scenario(case.id, [case.fault], case.failure, warm=True), run_dir)
    events = read_events(str(run_dir / "events"))
    assert journal["status"] == "completed", journal["error"]

    (fault,) = journal["faults"]
    assert fault["error"] is None and fault["t_inject"] is not None, fault
    t_inject = fault["t_inject"]

    # A surviving peer noticed and blamed the right rank, with the right failure class; no
    # rank blamed anyone else. (Once a hung rank's node-mate kills it, the other peers may
    # rightly see a crash, so only one detection has to carry the fault's own class.)
    victim = f"rank-{VICTIM}"
    detections = [e for e in _of(events, "detected", incarnation=0) if e["t"] >= t_inject]
    assert detections and all(e.get("suspect") == victim for e in detections), detections
    blames = [e for e in detections if e["by"] != victim and e["failure_class"] == case.failure_class]
    assert blames, f"no peer called {victim}'s failure a {case.failure_class}: {detections}"
    if case.detect_within_s is not None:
        detection_s = min(e["t"] for e in blames) - t_inject
        assert detection_s < case.detect_within_s, f"detected after {detection_s:.1f} s"

    # The group restarted and resumed from the last checkpoint before the fault.
    resumed = [e for e in _of(events, "ckpt_load") if e["incarnation"] >= 1]
    assert resumed, "no checkpoint was loaded after the restart"
    assert {e["src"] for e in resumed} == {f"rank-{r}" for r in range(4)}, "every rank must resume"
    assert all(AT_STEP - CKPT_EVERY <= e["step"] <= AT_STEP and e["verified"] for e in resumed), resumed

    final = _final(run_dir)
    assert final["step"] == STEPS and final["world_size"] == 4
    assert final["digest"] == fault_free["final"]["digest"], "resumed run diverged from the fault-free run"


# ----------------------------------------------------------------------------- (d) corrupt checkpoints

SMALL = Topology(nodes=1, ranks_per_node=2, max_restarts=0)
SMALL_WORKLOAD = {"model": {"name": "mlp"}, "checkpoint": {"every_steps": 10, "keep": 3, "mode": "sync"}}


def _flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    for i in range(middle, middle + 16):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.timeout(240)
def test_all_checkpoints_corrupt_fails_loudly_unless_fresh_start_allowed(tmp_path: Path) -> None:
    ckpt_dir = tmp_path / "checkpoints"
    options = {**SMALL_WORKLOAD, "checkpoint": {**SMALL_WORKLOAD["checkpoint"], "dir": str(ckpt_dir)}}

    _, rcs = run_harness(tmp_path / "first", SMALL, {**options, "steps": 30})
    assert rcs == {0: 0}
    corrupt = sorted(ckpt_dir.glob(f"step-*/{STATE_FILE}"))
    assert len(corrupt) == 3, corrupt
    for path in corrupt:
        _flip_bytes(path)

    run_dir = tmp_path / "refused"
    _, rcs = run_harness(run_dir, SMALL, {**options, "steps": 40})
    assert rcs[0] not in (0, None), "a job whose every checkpoint is corrupt must fail"
    log = (run_dir / "logs" / "node-0.log").read_text(errors="replace")
    refusal = log[log.find("failed verification"):]
    assert log.find("failed verification") >= 0, "no refusal message in the node log"
    for path in corrupt:
        assert f"{path.parent}: {STATE_FILE}: sha256 mismatch" in refusal, \
            f"the refusal does not name the corrupt checkpoint {path.parent} and why"
    events = read_events(str(run_dir / "events"))
    assert not _of(events, "step_end"), "trained although every checkpoint was corrupt"
    assert not (run_dir / "final.json").exists()

    run_dir = tmp_path / "fresh"
    _, rcs = run_harness(run_dir, SMALL, {**options, "steps": 40, "allow_fresh_start": True})
    assert rcs == {0: 0}
    events = read_events(str(run_dir / "events"))
    steps = [e["step"] for e in _of(events, "step_end", src="rank-0")]
    assert steps == list(range(1, 41)), "a fresh start trains every step from step 0"
    assert not _of(events, "ckpt_load")
    assert _final(run_dir)["step"] == 40
    # The corrupt timeline is gone: the next restart resumes from a checkpoint of this run.
    loaded = CheckpointManager(str(ckpt_dir), keep=3, mode="sync", every_steps=10, every_seconds=0,
                               is_writer=False).load()
    assert loaded is not None
    assert loaded[1].step == 40 and loaded[1].skipped == []
