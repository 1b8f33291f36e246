"""A user's own training script as the system under test: no probe, progress from log lines.

The script knows nothing of trainchaos: it prints ``step N loss L``, keeps its own resume
file, and reads its data through a torch DataLoader with two worker processes (children of
the rank that carry the same RANK in their environment). trainchaos must still find the rank
to kill by its environment -- the rank, never a loader worker --, see the torchrun agent
report the death, and measure recovery and lost steps from the log lines.
"""

from __future__ import annotations

import os
import re
import textwrap

import pytest

from chaos.runfiles.events import read_events
from chaos.runner.run import run_scenario_once
from chaos.scenario.load import parse_scenario
from chaos.util.procs import find_run_processes

SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from torch.utils.data import DataLoader, Dataset

    class Batches(Dataset):
        def __len__(self):
            return 10**6
        def __getitem__(self, index):
            return index

    rank = int(os.environ["RANK"])
    loader = iter(DataLoader(Batches(), batch_size=None, num_workers=2))
    workers = ",".join(str(w.pid) for w in loader._workers)
    print(f"rank {rank} pid {os.getpid()} loader-workers {workers}", flush=True)
    state = os.path.join(sys.argv[1], f"resume-{rank}.txt")
    step = int(open(state).read()) if os.path.exists(state) else 0
    while step < 60:
        next(loader)
        step += 1
        time.sleep(0.05)
        print(f"step {step} loss {3.0 / step:.4f}", flush=True)
        if step % 10 == 0:
            with open(state + ".tmp", "w") as fh:
                fh.write(str(step))
            os.replace(state + ".tmp", state)
    """
)


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_kill_rank_of_a_user_command_is_measured_from_its_logs(tmp_path, state_dir):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    scenario = parse_scenario(
        {
            "name": "user-command-kill",
            "workload": {
                "command": f"python {script} {tmp_path}",
                "progress_regex": r"step (?P<step>\d+) loss (?P<loss>[\d.]+)",
                "steps": 60,
            },
            "topology": {"nodes": 1, "ranks_per_node": 2},
            "faults": [{"type": "kill_rank", "target": {"rank": 1}, "trigger": {"at_step": 25}}],
            # the ranks never synchronise: one may have passed the next resume-file step
            "targets": {"detection_s": {"max": 5}, "lost_steps": {"max": 20}, "attribution": "correct"},
            "timeout_s": 120,
        },
        str(tmp_path / "scenario.yaml"),
    )
    journal = run_scenario_once(scenario, str(tmp_path / "run"), seed=0).to_dict()

    assert journal["status"] == "completed", journal["error"]
    assert journal["metrics"]["steps_target"] == 60 and journal["metrics"]["completed"]
    fault = journal["faults"][0]
    assert fault["details"]["pids"], "the rank's process was not found by its environment"
    log = (tmp_path / "run" / "logs" / "node-0.log").read_text()
    first = re.search(r"rank 1 pid (\d+) loader-workers (\d+),(\d+)", log)
    assert first, log[-2000:]
    rank_pid, workers = int(first.group(1)), {int(first.group(2)), int(first.group(3))}
    assert fault["details"]["pids"] == [rank_pid], f"killed {fault['details']['pids']}, the rank is {rank_pid}, its loader workers {workers}"
    # Planned at step 25; progress read from log lines lands it at that step or a little later
    # (how much later is the host's scheduling), never earlier.
    assert fault["step_at_inject"] >= 25
    # No probe in the script, so no rank held: the journal says how late it landed instead.
    assert fault["hold"] is None and fault["lag_ms"] is not None and fault["lag_ms"] >= 0
    metrics = journal["metrics"]["faults"][0]
    # The script reports nothing itself: the torchrun agent is the detector, and it names
    # the killed rank.
    assert metrics["detected_by"] == "node-0"
    assert metrics["attribution"] == "correct", metrics["attribution_detail"]
    # Each rank resumes from its own resume file, written every 10 steps. Not bounded by the
    # step seen at the kill: log lines reach trainchaos late (through torchrun's tee), so the
    # killed rank may have written a later resume file than the last line read before it died.
    assert metrics["resumed_from"] % 10 == 0 and 10 <= metrics["resumed_from"] < 60
    # The script's ranks never synchronise, so one may be steps ahead of the other (how many
    # is the host's scheduling): lost steps count from the furthest step any rank reported
    # before the fault, the metric's definition, checked here against the run's own events.
    steps_before = [e["step"] for e in read_events(os.path.join(journal["run_dir"], "events"))
                    if e["kind"] == "step_end" and e["t"] < fault["t_inject"]]
    assert metrics["last_step_before"] == max(steps_before) >= fault["step_at_inject"]
    assert metrics["lost_steps"] == max(metrics["last_step_before"] - metrics["resumed_from"], 0)
    assert metrics["recovery_s"] is not None
    assert journal["verdict"]["passed"], journal["verdict"]
    assert not find_run_processes(journal["run_id"])
