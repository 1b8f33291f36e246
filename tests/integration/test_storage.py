"""Storage faults run for real: the FUSE fault layer mounted over the harness's checkpoint
tiers of a real 2-rank training run (scenarios/storage/). Each test asserts the detection
(class, who was blamed), the checkpoint actually loaded after the restart, the lost steps,
and that no mount or daemon is left; the last one SIGKILLs the controller mid-stall and
leaves the mount to ``trainchaos cleanup``.

The shipped scenarios run with warm ranks (``harness.warm_start``): each restarts the group
once, and nothing here is about a cold launch."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from chaos.cluster.mounts import fuse_mounts
from chaos.runfiles.events import read_events
from chaos.runner.run import run_scenario_once
from tests.integration._support import (
    REPO,
    assert_no_storage_left,
    cli_env,
    load_warm,
    popen_trainchaos,
    run_trainchaos,
    state_dir_env,
    storage_daemons_of,
)

STORAGE = REPO / "scenarios" / "storage"

pytestmark = [pytest.mark.integration, pytest.mark.fuse, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("storage")
    with state_dir_env(root / "state"):
        yield root


def _run(name: str, workdir) -> tuple[dict, list[dict]]:
    scenario = load_warm(STORAGE / f"{name}.yaml")
    journal = run_scenario_once(scenario, str(workdir / name), scenario.seed).to_dict()
    assert_no_storage_left(journal["run_id"])
    assert journal["status"] == "completed", journal["error"]
    return journal, read_events(os.path.join(journal["run_dir"], "events"))


def _of(events: list[dict], kind: str, **match) -> list[dict]:
    return [e for e in events if e["kind"] == kind and all(e.get(k) == v for k, v in match.items())]


def _restart_load(events: list[dict]) -> dict:
    return next(e for e in _of(events, "ckpt_load", src="rank-0") if e["incarnation"] >= 1)


def test_stalled_sync_save_is_blamed_on_its_writer_by_the_save_deadline(workdir):
    journal, events = _run("stall-sync-save-deadline", workdir)
    first = _of(events, "detected")[0]
    assert (first["failure_class"], first["suspect"], first["by"]) == ("storage", "rank-0", "rank-0")
    # The stall is planned at step 12: rank 0 holds after step 12 until it is in effect
    # (chaos.probe.hold), so the step-15 save is the stuck one. It never completed, and the restart
    # loaded the save before it.
    stuck = first["step"]
    assert first["detector"] == "save_deadline" and stuck == 15, first
    assert journal["faults"][0]["precision"] == "exact"
    assert not [e for e in _of(events, "ckpt_save_end", step=stuck) if e["incarnation"] == 0]
    load = _restart_load(events)
    assert load["step"] == stuck - 5 and load["verified"] and not load["skipped"]
    fault = journal["metrics"]["faults"][0]
    assert fault["attribution"] == "correct", fault["attribution_detail"]
    assert fault["resumed_from"] == stuck - 5
    assert fault["lost_steps"] == fault["last_step_before"] - (stuck - 5)
    assert journal["metrics"]["false_detections"] == 0
    assert journal["verdict"]["passed"], journal["verdict"]


def test_eio_on_half_the_writes_is_surfaced_and_never_reported_as_saved(workdir):
    journal, events = _run("eio-half-writes", workdir)
    m = journal["metrics"]
    failed = _of(events, "ckpt_save_failed", src="rank-0")
    assert failed and m["failed_saves"] == len(failed) and "Input/output error" in failed[0]["error"]
    abandoned = {e["step"] for e in failed if e["abandoned"]}
    saved = {e["step"] for e in _of(events, "ckpt_save_end") if e["incarnation"] == 0}
    assert not abandoned & saved, "an abandoned save was reported as saved"
    revert = _of(events, "fault_reverted", fault="f0-io_error")[0]
    assert any(e["t"] > revert["t"] for e in _of(events, "ckpt_save_end")), "no save succeeded later"
    # The kill at step 60 resumes from a complete checkpoint (every 5 steps), never a partial one.
    load = _restart_load(events)
    assert load["verified"] and not load["skipped"] and m["rejected_checkpoints"] == 0
    kill = next(f for f in m["faults"] if f["type"] == "kill_rank")
    assert kill["detected_class"] == "crash" and kill["attribution"] == "correct"
    assert kill["resumed_from"] == load["step"] and kill["lost_steps"] == kill["last_step_before"] - load["step"]
    assert kill["lost_steps"] <= 5


def test_corrupt_checkpoint_read_is_rejected_before_loading(workdir):
    journal, events = _run("corrupt-checkpoint-read", workdir)
    first = next(e for e in _of(events, "detected") if e["failure_class"] == "corruption")
    assert first["detector"] == "ckpt_checksum" and "step-00000040" in first["reason"]
    load = _restart_load(events)
    assert load["step"] == 30 and load["verified"]
    assert [s[0].rsplit("/", 1)[1] for s in load["skipped"]] == ["step-00000040"]
    m = journal["metrics"]
    assert m["rejected_checkpoints"] == 1 and m["ckpt_lost_steps"] == 10
    kill = next(f for f in m["faults"] if f["type"] == "kill_rank")
    assert kill["attribution"] == "correct" and kill["resumed_from"] == 30
    assert kill["lost_steps"] == kill["last_step_before"] - 30


# torn-write-node-crash takes the same path (only the cut differs, tests/unit/test_storage_layer.py);
# it is left out here to keep these runs within the suite's time budget.
def test_power_loss_drops_the_unfsynced_fast_tier(workdir):
    journal, events = _run("lose-unfsynced-node-crash", workdir)
    fault = journal["faults"][0]
    assert fault["details"]["dropped_files_total"] > 0 and fault["details"]["pids"]
    first = _of(events, "detected")[0]
    assert (first["failure_class"], first["suspect"]) == ("crash", "rank-0")
    load = _restart_load(events)
    # The fast tier's checkpoints came back empty: rejected; the shared tier's step 20 loaded.
    assert load["tier"] == "shared" and load["step"] == 20
    assert load["skipped"] and all("node-0/checkpoints/step-" in path for path, _ in load["skipped"])
    assert all("MANIFEST" in why or "bytes" in why for _, why in load["skipped"])
    m = journal["metrics"]
    assert m["rejected_checkpoints"] == len(load["skipped"]) and m["ckpt_lost_steps"] == 10
    crash = m["faults"][0]
    assert crash["attribution"] == "correct" and crash["resumed_from"] == 20
    assert crash["lost_steps"] == crash["last_step_before"] - 20
    # Resumed from the shared tier's step 20, the newest durable one: no silent rollback (the
    # fast tier's later checkpoints were never fsynced), and the data went back with the model.
    assert m["silent_rollback_steps"] == 0 and (m["data_samples"], m["data_lost"]) == (50 * 16, 0)


STALL_FOREVER = """\
name: controller-killed-mid-stall
seed: 1
workload:
  harness: {steps: 400, step_delay_s: 0.05, model: {name: mlp}, checkpoint: {every_steps: 5, mode: sync}}
topology: {nodes: 2, ranks_per_node: 1}
faults:
  - type: io_stall
    target: {rank: 0}
    trigger: {at_step: 8}
    params: {ops: [write]}
timeout_s: 150
"""


@pytest.mark.machine_cleanup
def test_controller_killed_mid_stall_then_cleanup_unmounts(tmp_path):
    env = cli_env(tmp_path / "state")
    scenario = tmp_path / "stall.yaml"
    scenario.write_text(STALL_FOREVER)
    proc = popen_trainchaos(["run", str(scenario), "--out", str(tmp_path / "out")], env=env,
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    run_dir = tmp_path / "out" / "controller-killed-mid-stall" / "0"
    try:
        deadline = time.monotonic() + 90
        while not _stalled(run_dir):
            assert proc.poll() is None, "the run ended before the stall"
            assert time.monotonic() < deadline, "the stall never took hold"
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    mounts = [m for m in fuse_mounts() if str(run_dir) in m[1]]
    assert mounts, "the SIGKILLed controller's mount must still be there before cleanup"
    run_id = mounts[0][0].split("-shared")[0]
    assert storage_daemons_of(run_id)

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return run_trainchaos(list(argv), env=env, cwd=tmp_path, timeout=60)

    check = cli("cleanup", "--check")
    assert check.returncode == 1 and "fuse_mount" in check.stdout, check.stdout + check.stderr
    result = cli("cleanup")
    assert result.returncode == 0, result.stdout + result.stderr
    assert_no_storage_left(run_id)
    clean = cli("cleanup", "--check")
    assert clean.returncode == 0, clean.stdout + clean.stderr


def _stalled(run_dir: Path) -> bool:
    """The stall rule is in place and has held a write (the step-10 save is stuck in it)."""
    from chaos.storage.control import read_json

    state = read_json(str(run_dir / "storage" / "shared" / "state.json")) or {}
    return bool(state.get("hits", {}).get("f0-io_stall"))


def test_data_loader_stall_is_blamed_on_the_data_path_of_its_rank(workdir):
    journal, events = _run("data-loader-stall", workdir)
    first = _of(events, "detected")[0]
    assert (first["failure_class"], first["suspect"], first["by"]) == ("storage", "rank-1", "rank-1")
    assert first["detector"] == "data_deadline" and first["path"] == "data"
    assert first["file"].endswith("/data/corpus.txt") and str(journal["run_dir"]) in first["file"]
    fault = journal["metrics"]["faults"][0]
    assert fault["attribution"] == "correct", fault["attribution_detail"]
    # The restart loads the newest checkpoint saved before it: the stall is planned at step
    # 25 and rank 1 holds after step 25 until it is in effect (chaos.probe.hold), so its next read
    # stalls and step 30, and its save, never come: the step-20 checkpoint.
    load = _restart_load(events)
    saved = [e["step"] for e in _of(events, "ckpt_save_end") if e["incarnation"] == 0 and e["t"] < load["t"]]
    assert load["step"] == max(saved) == 20 and load["verified"], (load, saved)
    assert fault["resumed_from"] == load["step"]
    assert fault["lost_steps"] == fault["last_step_before"] - load["step"]
    assert journal["metrics"]["false_detections"] == 0
