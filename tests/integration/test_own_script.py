"""The README's walk-through, for real: ``examples/own_script/scenarios/kill-rank.yaml`` run as
the README writes it (``trainchaos run`` from the repository root, the script named by a path
relative to it). A plain DDP script with its own ``torch.save`` checkpoints and its own
sampler, rank 1 SIGKILLed at step 15, resumed from the mid-epoch checkpoint of step 10: every
claim of the scenario holds, and the data and freshness checkers judge it (not ``unknown``):
each sample trained exactly once against the fault-free twin, every checkpoint the twin's
state at its step."""

from __future__ import annotations

import json

import pytest

from chaos.util.procs import find_run_processes
from tests.integration._support import REPO, cli_env, run_trainchaos

pytestmark = [pytest.mark.integration]

SCENARIO = "examples/own_script/scenarios/kill-rank.yaml"


@pytest.mark.timeout(300)
def test_the_own_script_kill_with_data_and_freshness_targets_passes_as_the_readme_says(tmp_path):
    out = tmp_path / "reports"
    proc = run_trainchaos(["run", SCENARIO, "--out", str(out)], env=cli_env(tmp_path / "state"),
                          timeout=280, cwd=REPO)
    output = proc.stdout + proc.stderr
    journal = json.loads((out / "own-kill-rank" / "0" / "journal.json").read_text())
    assert not find_run_processes(journal["run_id"]), "processes of the run left behind"
    assert proc.returncode == 0, output
    assert journal["status"] == "completed" and journal["verdict"]["passed"], journal["verdict"]
    metrics = journal["metrics"]
    (fault,) = metrics["faults"]
    # Who is blamed first is a race (the survivor's own exit on its failed all-reduce may be
    # reported first): the scenario claims no attribution, and neither does this test.
    assert (fault["last_step_before"], fault["resumed_from"]) == (15, 10), fault
    # 40 steps x 16 samples: the 5 steps after step 10 trained twice, the first time rolled back.
    assert (metrics["data_samples"], metrics["data_lost"], metrics["data_duplicated"]) == (640, 0, 0), metrics
    # Steps 10, 20, 30, 40: each read by the torch.save format and equal to the twin's state.
    assert (metrics["checked_checkpoints"], metrics["stale_checkpoints"]) == (4, 0), metrics
