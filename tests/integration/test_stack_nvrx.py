"""The nvrx_inprocess stack: NVIDIA's in-process restart (inprocess.Wrapper) on CPU with gloo.
One rank's training function raises a device error; the wrapper restarts the function on
every rank inside the same processes (no process exits, torchrun restarts nothing), each
re-entry reloads the latest DCP checkpoint; the run is detected, recovered, judged and
reported, and ends bitwise equal to the job trained straight through without the adapters.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from chaos.events import read_events
from chaos.procs import find_run_processes
from tests.integration._support import REPO, TRAINCHAOS, cli_env

pytestmark = pytest.mark.integration

SCENARIO = REPO / "scenarios" / "stacks" / "nvrx_inprocess" / "raise-in-rank.yaml"
EXAMPLE = REPO / "examples" / "nvrx_inprocess" / "train.py"


def reference_digest(tmp_path: Path, seed: int, steps: int, args: list[str]) -> str:
    """The example's final digest trained straight through by torchrun, without the adapters."""
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(EXAMPLE), "--steps", str(steps), "--seed", str(seed), "--ckpt-dir", str(tmp_path / "ref"),
         *args, "--no-adapter"],
        env={**cli_env(tmp_path / "state"), "TMPDIR": str(tmp_path), "TORCH_CPP_LOG_LEVEL": "error"},
        cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    found = re.search(r"final step (\d+) digest ([0-9a-f]{64})", out.stdout)
    assert out.returncode == 0 and found, out.stdout[-2000:] + out.stderr[-2000:]
    return found.group(2)


@pytest.mark.timeout(400)
def test_an_error_in_one_rank_is_restarted_in_place_and_resumes_exactly(tmp_path: Path) -> None:
    doc = yaml.safe_load(SCENARIO.read_text())
    doc["baseline"] = False  # compared below with a run without the adapters instead
    doc["targets"].pop("final_state")
    (tmp_path / "raise.yaml").write_text(yaml.safe_dump(doc))
    res = subprocess.run([*TRAINCHAOS, "run", "raise.yaml", "--out", "reports"],
                         env=cli_env(tmp_path / "state"), cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, stdin=subprocess.DEVNULL)
    run = tmp_path / "reports" / doc["name"] / "0"
    journal = json.loads((run / "journal.json").read_text())
    assert journal["status"] == "completed", journal["error"]
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert (run / "summary.md").exists()

    fault = journal["metrics"]["faults"][0]
    args = doc["workload"]["nvrx_inprocess"]["args"]
    every = int(args[args.index("--every") + 1])
    # Rank 1 itself reports the error the wrapper restarts on, naming itself, at once.
    assert fault["detected_by"] == "rank-1" and fault["attribution"] == "correct", fault
    assert fault["restarted"] and fault["resumed_from"] % every == 0
    assert fault["lost_steps"] == fault["last_step_before"] - fault["resumed_from"] <= every
    assert journal["verdict"]["passed"], journal["verdict"]

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
    assert end["digest"] == reference_digest(tmp_path, journal["seed"], doc["workload"]["nvrx_inprocess"]["steps"], args)
    assert not find_run_processes(journal["run_id"])
