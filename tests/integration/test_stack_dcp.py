"""The dcp stack: a DDP job checkpointing with torch.distributed.checkpoint, recovered by a
torchrun restart. One rank is killed; the kill is detected, every rank restarts from the
checkpoint the `latest` marker names, the run is judged against the suite's targets and
its report written. The resumed run ends bitwise equal to the same job trained without a
fault and without the adapter: the adapter changes nothing, and DCP's resume is exact.
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

SCENARIO = REPO / "scenarios" / "stacks" / "dcp" / "kill-rank.yaml"
EXAMPLE = REPO / "examples" / "dcp" / "train.py"


def reference_digest(tmp_path: Path, seed: int, steps: int, args: list[str]) -> str:
    """The example's final digest trained straight through by torchrun, without the adapter."""
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(EXAMPLE), "--steps", str(steps), "--seed", str(seed), "--ckpt-dir", str(tmp_path / "ref"),
         *args, "--no-adapter"],
        env={**cli_env(tmp_path / "state"), "TMPDIR": str(tmp_path)}, cwd=tmp_path,
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    found = re.search(r"final step (\d+) digest ([0-9a-f]{64})", out.stdout)
    assert out.returncode == 0 and found, out.stdout[-2000:] + out.stderr[-2000:]
    assert int(found.group(1)) == steps
    return found.group(2)


@pytest.mark.timeout(400)
def test_kill_rank_of_a_dcp_job_is_recovered_from_its_checkpoint_exactly(tmp_path: Path) -> None:
    doc = yaml.safe_load(SCENARIO.read_text())
    doc["baseline"] = False  # compared below with a run without the adapter instead
    doc["targets"].pop("final_state")
    (tmp_path / "kill-rank.yaml").write_text(yaml.safe_dump(doc))
    res = subprocess.run([*TRAINCHAOS, "run", "kill-rank.yaml", "--out", "reports"],
                         env=cli_env(tmp_path / "state"), cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, stdin=subprocess.DEVNULL)
    run = tmp_path / "reports" / doc["name"] / "0"
    journal = json.loads((run / "journal.json").read_text())
    assert journal["status"] == "completed", journal["error"]
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
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

    (end,) = [e for e in events if e["kind"] == "run_end"]
    assert end["digest"] == reference_digest(tmp_path, journal["seed"], doc["workload"]["dcp"]["steps"], args)
    assert not find_run_processes(journal["run_id"])
