"""The nvrx_inprocess stack: NVIDIA's in-process restart (inprocess.Wrapper) on CPU with gloo.
One rank's training function raises a device error; the wrapper restarts the function on
every rank inside the same processes (no process exits, torchrun restarts nothing), each
re-entry reloads the latest DCP checkpoint; the run is detected, recovered, judged and
reported, and ends bitwise equal to the job trained straight through without the adapters.
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

SCENARIO = REPO / "scenarios" / "stacks" / "nvrx_inprocess" / "raise-in-rank.yaml"


@pytest.mark.timeout(400)
def test_an_error_in_one_rank_is_restarted_in_place_and_resumes_exactly(tmp_path: Path) -> None:
    doc, journal, run = run_without_baseline(SCENARIO, tmp_path)
    assert (run / "summary.md").exists()

    fault = journal["metrics"]["faults"][0]
    args = doc["workload"]["nvrx_inprocess"]["args"]
    every = int(args[args.index("--every") + 1])
    # Rank 1 itself reports the error the wrapper restarts on, naming itself, at once.
    assert fault["detected_by"] == "rank-1" and fault["attribution"] == "correct", fault
    assert fault["restarted"] and fault["resumed_from"] % every == 0
    assert fault["lost_steps"] == fault["last_step_before"] - fault["resumed_from"] <= every
    assert journal["verdict"]["passed"], journal["verdict"]
    # The in-place restart's load rolled back the steps trained past the checkpoint: the
    # surviving training holds every step of both ranks once.
    assert_data_exactly_once(journal["metrics"], steps=doc["workload"]["nvrx_inprocess"]["steps"], ranks=2)

    events = read_events(os.path.join(journal["run_dir"], "events"))
    starts = [e for e in events if e["kind"] == "rank_start"]
    # In place: each rank's second incarnation is the same process as its first, and the
    # survivor learnt of the restart from the wrapper (its detection, before its re-entry).
    for src in ("rank-0", "rank-1"):
        pids = {e["incarnation"]: e["pid"] for e in starts if e["src"] == src}
        assert set(pids) == {0, 1} and pids[0] == pids[1], (src, pids)
    survivor = [e for e in events if e["kind"] == "detected" and e["src"] == "rank-0"]
    assert survivor and survivor[0]["detector"] == "nvrx_inprocess"
    assert survivor[0]["t"] < min(e["t"] for e in starts if e["incarnation"] == 1)

    (end,) = [e for e in events if e["kind"] == "run_end"]
    assert end["digest"] == straight_digest(tmp_path, "nvrx_inprocess", doc, journal["seed"])
    assert not find_run_processes(journal["run_id"])
