"""The dcp stack: a DDP job checkpointing with torch.distributed.checkpoint, recovered by a
torchrun restart. One rank is killed; the kill is detected, every rank restarts from the
checkpoint the `latest` marker names, the run is judged against the suite's targets and
its report written. The resumed run ends bitwise equal to the same job trained without a
fault and without the adapter: the adapter changes nothing, and DCP's resume is exact.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chaos.runfiles.events import read_events
from chaos.util.procs import find_run_processes
from tests.integration._stacks import (
    assert_data_exactly_once,
    run_without_baseline,
    straight_digest,
)
from tests.integration._support import REPO

pytestmark = pytest.mark.integration

SCENARIO = REPO / "scenarios" / "stacks" / "dcp" / "kill-rank.yaml"


@pytest.mark.timeout(400)
def test_kill_rank_of_a_dcp_job_is_recovered_from_its_checkpoint_exactly(tmp_path: Path) -> None:
    doc, journal, run = run_without_baseline(SCENARIO, tmp_path)
    assert (run / "summary.md").exists()

    metrics = journal["metrics"]
    fault = metrics["faults"][0]
    args = doc["workload"]["dcp"]["args"]
    every = int(args[args.index("--every") + 1])
    # The killed worker's agent reports its death; every rank restarts (incarnation 1) and
    # loads the checkpoint the marker named: a multiple of --every, before the kill.
    assert fault["detection_s"] is not None and fault["restarted"], fault
    assert fault["resumed_from"] % every == 0 and 0 < fault["resumed_from"] <= fault["last_step_before"]
    assert fault["lost_steps"] == fault["last_step_before"] - fault["resumed_from"] <= every
    events = read_events(os.path.join(journal["run_dir"], "events"))
    loads = {e["src"]: e["step"] for e in events if e["kind"] == "ckpt_load" and e["incarnation"] == 1}
    assert loads == {"rank-0": fault["resumed_from"], "rank-1": fault["resumed_from"]}, loads
    saves = [e for e in events if e["kind"] == "ckpt_save_end"]
    assert saves and all(e["bytes"] > 0 for e in saves)
    assert journal["verdict"]["passed"], journal["verdict"]
    # The example's sample reports (the data position is the step): the training that
    # survived the restart holds every step of both ranks once.
    assert_data_exactly_once(metrics, steps=doc["workload"]["dcp"]["steps"], ranks=2)

    (end,) = [e for e in events if e["kind"] == "run_end"]
    assert end["digest"] == straight_digest(tmp_path, "dcp", doc, journal["seed"])
    assert not find_run_processes(journal["run_id"])
