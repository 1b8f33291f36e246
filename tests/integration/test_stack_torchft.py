"""torchft under trainchaos: one replica group killed, the other trains on, the group heals.

One short run of the bundled example (two replica groups of one rank, tiny model): replica
group 1's worker is SIGKILLed; torchft's quorum must drop it (a ``detected`` from the
stack's own view, blaming that group), replica group 0 must keep training without a
restart, and group 1's torchrun must restart it, heal it from group 0's live state (no
checkpoint: ``ckpt_load`` from a peer) and bring it back into the quorum. The run is judged
against its targets and its report written; afterwards no lighthouse and no training
process of the run is left. Then the example alone (torchrun + a lighthouse, no trainchaos)
with and without the adapter line: the same final digest.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.runfiles.events import read_events
from chaos.runner.run import run_scenario_once
from chaos.scenario.load import parse_scenario
from chaos.util.procs import find_run_processes
from chaos.workload.torchft import EXAMPLE
from chaos.workload.torchft.lighthouse import free_port
from tests.integration._support import REPO

LIGHTHOUSE = Path(sys.executable).with_name("torchft_lighthouse")


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_killed_replica_group_is_dropped_the_other_trains_on_and_it_heals_from_a_peer(tmp_path, state_dir):
    scenario = parse_scenario({
        "name": "torchft-kill-group",
        # The survivors train on for about 15 s after the fault (45 steps of 0.3 s): longer
        # than group 1's torchrun takes to restart it here (3-10 s on a busy host), so it
        # rejoins a live peer. (A group back after every other has finished finds none, and
        # trains the whole job again alone, from step 0: torchft has no notion of the job's end.)
        "workload": {"torchft": {"steps": 60, "pg_timeout_s": 2, "step_sleep_s": 0.3}},
        "topology": {"nodes": 2, "ranks_per_node": 1},
        "faults": [{"type": "kill_rank", "target": {"replica_group": 1}, "trigger": {"at_step": 15}}],
        "targets": {"survivor_restarts": {"max": 0}, "lost_steps": {"max": 0},
                    "attribution": "correct", "false_detections": {"max": 0}},
        "timeout_s": 240,
    }, str(tmp_path / "scenario.yaml"))
    run_dir = tmp_path / "run"
    journal = run_scenario_once(scenario, str(run_dir), seed=0).to_dict()

    assert journal["status"] == "completed", journal["error"]
    assert journal["verdict"]["passed"], journal["verdict"]
    fault = journal["metrics"]["faults"][0]
    assert fault["detector"] == "torchft_quorum" and fault["detected_suspect"] == "rank-1"
    assert fault["survivor_restarts"] == 0 and fault["survivor_stall_s"] is not None
    events = read_events(str(run_dir / "events"))
    t_inject = journal["faults"][0]["t_inject"]
    survivor = [e for e in events if e["src"] == "rank-0" and e["kind"] == "rank_start"]
    assert len(survivor) == 1, "replica group 0 restarted"
    assert any(e["src"] == "rank-0" and e["kind"] == "step_end" and e["t"] > t_inject for e in events)
    healed = [e for e in events if e["src"] == "rank-1" and e["kind"] == "ckpt_load" and e["t"] > t_inject]
    assert healed and healed[0]["tier"] == "peer" and healed[0]["incarnation"] >= 1
    back = [e for e in events if e["src"] == "rank-1" and e["kind"] == "step_end" and e["incarnation"] >= 1]
    assert back and back[-1]["step"] == 60, "replica group 1 did not train again to the end"
    # Data (the example's probe.samples line, each group's share of a step), here without a
    # twin, against what any group reported: group 0's 60 steps at least, and nothing trained
    # twice beyond the one share of docs/stacks.md's torchft finding 5 (the healing group's
    # first step draws its pre-heal step 0's batch).
    metrics = journal["metrics"]
    assert metrics["data_duplicated"] in (0, 16), metrics["data_epochs"]
    assert metrics["data_samples"] >= 60 * 16, metrics["data_epochs"]
    assert (run_dir / "summary.md").is_file() and (run_dir / "journal.json").is_file()
    assert (run_dir / "logs" / "lighthouse.log").is_file()
    assert find_run_processes(journal["run_id"]) == [], "a lighthouse or training process was left"

    # The adapter observes and never steers: the same digest with and without its line.
    digests = [_alone(tmp_path / f"alone-{chaos}", chaos) for chaos in (False, True)]
    assert digests[0] == digests[1]


def _alone(where: Path, chaos: bool) -> str:
    """The example as a user runs it: a lighthouse and one torchrun (one replica group)."""
    where.mkdir()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TORCHFT_LIGHTHOUSE": f"http://127.0.0.1:{port}",
           "REPLICA_GROUP_ID": "0", "NUM_REPLICA_GROUPS": "1", "OMP_NUM_THREADS": "1", "TMPDIR": str(where)}
    env = {k: v for k, v in env.items() if not k.startswith("TRAINCHAOS_")}
    if chaos:
        env["TRAINCHAOS_EVENTS_DIR"] = str(where / "events")
    lighthouse = subprocess.Popen([str(LIGHTHOUSE), "--bind", f"127.0.0.1:{port}", "--min_replicas", "1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        # The lighthouse takes seconds to start on a busy host; the Manager gives it its
        # connect timeout only.
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and lighthouse.poll() is None, "no lighthouse"
                time.sleep(0.1)
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
                str(EXAMPLE), "--steps", "12", "--digest-out", str(where / "digest"),
                *(["--chaos"] if chaos else [])]
        done = subprocess.run(argv, env=env, cwd=where, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    finally:
        lighthouse.kill()
        lighthouse.wait(timeout=10)
    if chaos:
        ends = [e for e in read_events(str(where / "events")) if e["kind"] == "run_end"]
        assert ends and ends[0]["step"] == 12
    shutil.rmtree(where / "events", ignore_errors=True)
    return (where / "digest").read_text().strip()
