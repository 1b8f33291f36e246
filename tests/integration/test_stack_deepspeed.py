"""DeepSpeed as the system under test (workload kind ``deepspeed``): a ZeRO-3 engine on CPU,
run per rank by torchrun, reporting through ``chaos.adapters.deepspeed``; its checkpoints read
by the ``deepspeed`` format (every rank's ZeRO-3 partition, the weights rebuilt by
zero_to_fp32, DeepSpeed's ``latest``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.runfiles.events import read_events
from chaos.util.procs import find_run_processes
from tests.integration._stacks import run_kill_rank, run_without_baseline
from tests.integration._support import REPO, cli_env, run_trainchaos

pytestmark = pytest.mark.integration

SUITE = REPO / "scenarios" / "stacks" / "deepspeed"


@pytest.mark.timeout(300)
def test_a_killed_zero3_rank_is_detected_resumed_by_load_checkpoint_and_judged(tmp_path: Path) -> None:
    journal = run_kill_rank("deepspeed", tmp_path)
    metrics = journal["metrics"]
    # Freshness judged by format (chaos.ckptformat.deepspeed): each tag folder, its two ZeRO-3
    # partitions rebuilt into whole weights, holds the twin's state at its step.
    assert metrics["stale_checkpoints"] == 0 and metrics["checked_checkpoints"] >= 2, metrics
    # The data position DeepSpeed does not save, derived from the restored global_steps: the
    # surviving lineage trained every sample of the twin's once.
    assert metrics["data_samples"] == 30 * 32 and metrics["data_lost"] == metrics["data_duplicated"] == 0, metrics
    events = read_events(str(Path(journal["run_dir"]) / "events"))
    (load,) = {e["tag"] for e in events if e["kind"] == "ckpt_load"}
    assert load == f"global_step{metrics['faults'][0]['resumed_from']}"


@pytest.mark.fuse
@pytest.mark.timeout(420)
def test_the_crash_point_sweep_of_a_zero3_save_finds_nothing_made_durable(tmp_path: Path) -> None:
    """``run --crash-points`` on DeepSpeed's save of step 10: it fsyncs and renames nothing, so
    the trace finds no durability boundary, and the one power loss of rank 0's node (at the
    close of the save's window, before the next save begins) drops everything rank 0 wrote:
    its partitions of both tags and `latest`. The restart finds no `latest` to follow and
    trains from step 0 (to the twin's weights: the example is deterministic)."""
    out = tmp_path / "sweep"
    proc = run_trainchaos(["run", "--crash-points", str(SUITE / "crash-points-zero3-save.yaml"), "--out", str(out)],
                          env=cli_env(tmp_path / "state"), cwd=tmp_path, timeout=400)
    output = proc.stdout + proc.stderr
    sweep = json.loads((out / "deepspeed-crash-points-zero3-save" / "crash_points.json").read_text())
    assert sweep["save_step"] == 10 and sweep["twin_status"] == sweep["trace_status"] == "completed", output
    assert sweep["boundaries"] == [], sweep["boundaries"]
    (crash,) = sweep["results"]
    assert crash["after"] == 0 and crash["resumed_from"] == 0, crash
    assert set(crash["outcomes"]) == {"dangling_pointer", "torn", "lost_saved", "lost_interval"}, crash
    assert crash["pointer"] == -1 and crash["complete"] == [] and set(crash["torn"]) == {"5", "10"}, crash
    assert proc.returncode == 1, output
    run_id = json.loads((Path(crash["run_dir"]) / "journal.json").read_text())["run_id"]
    assert not find_run_processes(run_id)


@pytest.mark.timeout(300)
def test_a_zero3_job_resumes_at_another_data_parallel_size_through_a_universal_checkpoint(tmp_path: Path) -> None:
    _, journal, run = run_without_baseline(SUITE / "resize-universal.yaml", tmp_path)
    metrics = journal["metrics"]
    assert journal["verdict"]["passed"], journal["verdict"]
    assert metrics["world_size"] == 2 and metrics["final_world_size"] == 1, metrics
    (restart,) = metrics["restarts"]
    assert restart["resumed_from"] % 5 == 0 and 0 < restart["resumed_from"] <= restart["last_step_before"]
    events = read_events(str(run / "events"))
    loads = [e for e in events if e["kind"] == "ckpt_load"]
    # The survivor alone, from ds_to_universal's conversion of the pair's tag.
    assert [(e["src"], e["tag"]) for e in loads] == [("rank-0", f"global_step{restart['resumed_from']}_universal")]
    assert metrics["data_lost"] == metrics["data_duplicated"] == 0, metrics
    assert not find_run_processes(journal["run_id"])
