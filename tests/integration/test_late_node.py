"""A node launched with the others but late to the rendezvous (a container slow to start, an
interpreter slow to import on a loaded host) is waited for before the first step: the job
trains at the size it was launched with, never at a smaller one that torchrun then restarts
around the latecomer (harness.admission.await_late_nodes).

Two real torchrun agents (``--nnodes 1:2``, one rank each) on a store this test hosts, as the
controller hosts it. The second agent starts only once the first one's group has formed
alone (its rank announced a world of 1): the late node is late by construction, not by a
sleep that a quick machine might outrun, and it comes once the first rank is ready to be
told (its SIGTERM handler in place), not while a busy host still runs its start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from torch.distributed import TCPStore

from chaos.contract import EVENTS_DIR_ENV, RDZV_ENDPOINT_ENV
from chaos.runfiles.events import read_events
from chaos.runfiles.rundir import LOGS_SUBDIR
from chaos.workload.torchrun import KEEP_ALIVE_INTERVAL_S
from tests.integration._support import catches_signal

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RUN = "trainchaos-test-late-node"
STEPS = 8
KEEP_ALIVE_ATTEMPTS = 30
"""No node is lost here, so none need be declared dead. The launcher's 5 missed keep-alives
(5 s) are its trade for finding a lost node soon; on a loaded CI host an agent starved that
long as the late one joins (the rendezvous then expires a live participant) fails a run that
has no restart to spare: the likeliest reading of the stop CI of 9916e97, where both agents
exited 1 and the report kept nothing else (their logs now go to it). This test judges
admission, not expiry."""


def _agent(port: int, run_dir: Path, events: Path, node: int) -> subprocess.Popen:
    """torchrun for one node; its output goes to ``<run_dir>/logs/node-N.log``, where a failed
    test's report finds it (tests/failure_logs.py): CI keeps only pytest's output."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1:2", "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", RUN,
            "--rdzv-conf", "is_host=false,join_timeout=60,last_call_timeout=1,read_timeout=30,"
                           f"keep_alive_interval={KEEP_ALIVE_INTERVAL_S},keep_alive_max_attempt={KEEP_ALIVE_ATTEMPTS}",
            "--max-restarts", "0", "--monitor-interval", "0.1", "--local-addr", "127.0.0.1",
            "-m", "harness", "--steps", str(STEPS), "--model-name", "mlp", "--global-batch", "8",
            "--run-dir", str(run_dir), "--checkpoint-every-steps", "0", "--failure-watchdog-s", "0"]
    env = {**os.environ, EVENTS_DIR_ENV: str(events), RDZV_ENDPOINT_ENV: f"127.0.0.1:{port}",
           "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "PYTHONPATH": str(REPO)}
    log = run_dir / LOGS_SUBDIR / f"node-{node}.log"
    log.parent.mkdir(exist_ok=True)
    with log.open("w") as out:
        return subprocess.Popen(argv, env=env, cwd=run_dir, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, text=True)


@pytest.mark.timeout(240)
def test_a_node_late_to_the_first_rendezvous_is_waited_for_and_the_job_trains_at_full_size(tmp_path: Path) -> None:
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))
    run_dir, events = tmp_path / "run", tmp_path / "events"
    run_dir.mkdir()
    events.mkdir()
    first = _agent(store.port, run_dir, events, 0)
    late = None
    try:
        # The first group has formed alone once its rank started; it waits for the late
        # node once its SIGTERM handler is in place (torchrun's SIGTERM admits the latecomer)
        deadline = time.monotonic() + 120
        while not (started := [e for e in read_events(str(events)) if e["kind"] == "rank_start"]) \
                or not catches_signal(started[0]["pid"], signal.SIGTERM):
            assert first.poll() is None and time.monotonic() < deadline, "the first agent ended or never started its rank"
            time.sleep(0.05)
        late = _agent(store.port, run_dir, events, 1)
        codes = [agent.wait(timeout=180) for agent in (first, late)]
        assert codes == [0, 0], "an agent failed: its log is in the report's run logs"
    finally:
        for agent in (first, late):
            if agent is not None and agent.poll() is None:
                agent.kill()
                agent.wait()

    seen = read_events(str(events))
    starts = [e for e in seen if e["kind"] == "rank_start"]
    assert starts[0]["world_size"] == 1, starts  # the first group formed without the late node
    waited = [e for e in seen if e["kind"] == "rank_exit" and e["src"] == starts[0]["src"]
              and e["incarnation"] == starts[0]["incarnation"]]
    assert [e["reason"] for e in waited] == [
        "stopped before the first step: torchrun re-forms the group to admit a late node"], waited
    # not one step at the smaller size: every step of the run was taken by both ranks
    steps = [e for e in seen if e["kind"] == "step_end"]
    assert {(e["src"], e["incarnation"]) for e in steps} == {
        (e["src"], e["incarnation"]) for e in starts if e["world_size"] == 2}
    assert sorted(e["step"] for e in steps) == sorted(list(range(1, STEPS + 1)) * 2)
    assert [e["world_size"] for e in seen if e["kind"] == "run_start"] == [2]
    assert json.loads((run_dir / "final.json").read_text())["world_size"] == 2
