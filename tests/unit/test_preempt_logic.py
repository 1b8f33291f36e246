"""harness.preempt: SIGTERM -> a stop vote -> one agreed step -> checkpoint, barrier, exit.

The logic with fakes for the collective and the exit; the vote riding on the evidence
all-reduce with a real one-rank gloo group. The multi-process behaviour (two nodes, real
SIGTERMs, the resume) is in tests/integration/test_preempt.py."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from harness.admission import admission_restart_possible, agent_cmdline
from harness.config import ConfigError, DetectConfig, FailureConfig
from harness.preempt import EXIT_PEER_STOPPED, EXIT_STOPPED, EmergencyStop
from harness.sdc import SdcMonitor


class _Left(Exception):
    """Stands for os._exit in these tests."""


def _stop(rank: int = 0, timeout_s: float = 30.0, **kwargs) -> tuple[EmergencyStop, list]:
    events: list = []
    stop = EmergencyStop(rank, timeout_s, emit=lambda kind, **f: events.append((kind, f)), **kwargs)

    def leave(code: int, reason: str) -> None:
        events.append(("rank_exit", {"code": code, "reason": reason}))
        raise _Left(code)

    stop._exit = leave  # type: ignore[method-assign]
    return stop, events


@pytest.mark.parametrize(("argv", "group_nodes", "possible"), [
    (["python", "-m", "torch.distributed.run", "--nnodes", "1:2", "x.py"], 1, True),
    (["python", "-m", "torch.distributed.run", "--nnodes", "1:2", "x.py"], 2, False),
    (["torchrun", "--nnodes=2", "x.py"], 2, False),
    (["torchrun", "--nnodes=2:4", "x.py"], 3, True),
    (["bash", "run.sh"], 1, False),
])
def test_only_an_elastic_group_below_its_maximum_can_be_restarted_to_admit_a_node(
        argv: list[str], group_nodes: int, possible: bool) -> None:
    assert admission_restart_possible(argv, group_nodes) is possible


def test_the_admission_check_reads_the_agent_under_a_warm_start_too() -> None:
    """harness.warm_start: a rank's parent is its node's zygote, not torchrun. Read from the
    zygote, a grow-back restart's SIGTERM (every peer alive, the group below its maximum) was
    taken for the node being stopped: a healthy rank reported itself (test_net_heal, warm)."""
    import os
    import signal
    import subprocess
    import sys

    # a stand-in agent (torchrun's marks and --nnodes) and its child, a stand-in zygote
    code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
            "'import os, time; print(os.getpid(), flush=True); time.sleep(30)'], stdout=subprocess.PIPE); "
            "print(p.stdout.readline().decode().strip(), flush=True); p.wait()")
    agent = subprocess.Popen([sys.executable, "-c", code, "torch.distributed.run", "--nnodes", "1:2"],
                             stdout=subprocess.PIPE)
    zygote = None
    try:
        assert agent.stdout is not None
        zygote = int(agent.stdout.readline())
        assert admission_restart_possible(agent_cmdline(start=zygote), 1) is True
        assert agent_cmdline() == []  # pytest's own ancestors are no torchrun
    finally:
        if zygote is not None:
            os.kill(zygote, signal.SIGKILL)
        agent.kill()
        agent.wait()


def test_a_sigterm_outside_the_training_loop_or_with_a_dead_peer_is_left_to_the_old_path() -> None:
    stop, events = _stop()
    assert stop.request(15, lambda: True) is False, "not in the loop yet: leave at once"
    stop.open()
    assert stop.request(15, lambda: False) is False, "a peer is dead: torchrun tearing down a failed group"
    assert not stop.vote() and events == []


def test_an_accepted_sigterm_is_reported_once_and_becomes_this_rank_s_vote(monkeypatch) -> None:
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    stop, events = _stop(rank=1)
    stop.open()
    assert stop.request(15, lambda: True) and stop.vote()
    assert stop.request(15, lambda: pytest.fail("asked once only")) is True
    kinds = [k for k, _ in events]
    assert kinds == ["detected", "stop_requested"]
    detected = events[0][1]
    assert detected["failure_class"] == "crash" and detected["cause"] == "stop_request"
    stop.close()


def test_the_first_step_with_a_vote_is_the_stop_step_for_every_rank() -> None:
    asked, _ = _stop(rank=1)
    other, _ = _stop(rank=0)
    for stop in (asked, other):
        stop.open()
        assert stop.tally(15, []) is None
        verdict = stop.tally(16, [1])
        assert verdict is not None and verdict.step == 16 and verdict.asked == [1]
        assert stop.tally(17, [0, 1]).step == 16, "the verdict does not move"
    assert asked.verdict.exit_code == EXIT_STOPPED == 143 and other.verdict.exit_code == EXIT_PEER_STOPPED


def test_leave_checkpoints_then_waits_for_everyone_then_exits() -> None:
    stop, events = _stop(rank=0)
    stop.open()
    stop.tally(16, [1])
    calls: list[str] = []
    with pytest.raises(_Left):
        stop.leave(lambda: calls.append("checkpoint"), lambda: calls.append("barrier"),
                   lambda: calls.append("stop watching"))
    assert calls == ["stop watching", "checkpoint", "barrier"]
    (kind, ckpt), (_, exit_) = events
    assert kind == "emergency_checkpoint" and ckpt["ok"] and ckpt["step"] == 16 and ckpt["asked"] == [1]
    assert exit_["code"] == EXIT_PEER_STOPPED and "rank 1 was asked to stop" in exit_["reason"]


def test_a_failed_emergency_checkpoint_still_stops_and_says_so() -> None:
    stop, events = _stop(rank=1)
    stop.open()
    stop.tally(16, [1])

    def broken() -> None:
        raise OSError("No space left on device")

    with pytest.raises(_Left):
        stop.leave(broken, lambda: pytest.fail("no barrier after a failed save"))
    assert events[0][1]["ok"] is False and "No space left" in events[0][1]["error"]
    assert events[1][1]["code"] == EXIT_STOPPED and "failed" in events[1][1]["reason"]


def test_no_agreement_within_the_timeout_gives_up_and_an_agreement_cancels_it(monkeypatch) -> None:
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    expired = threading.Event()
    stop, _ = _stop(timeout_s=0.05, on_expired=expired.set)
    stop.open()
    stop.request(15, lambda: True)
    assert expired.wait(5), "a group that never agrees must not hold the rank forever"

    expired2 = threading.Event()
    agreed, _ = _stop(timeout_s=0.3, on_expired=expired2.set)
    agreed.open()
    agreed.request(15, lambda: True)
    agreed.tally(16, [0])
    assert not expired2.wait(0.6)


def test_the_option_is_checked() -> None:
    assert FailureConfig().emergency_checkpoint is True
    with pytest.raises(ConfigError, match="emergency_checkpoint_s must be > 0"):
        FailureConfig(emergency_checkpoint_s=0)


@pytest.mark.parametrize("detectors_on", [True, False])
def test_the_vote_rides_on_the_evidence_all_reduce(one_rank_group, detectors_on: bool) -> None:
    cfg = DetectConfig() if detectors_on else DetectConfig(nonfinite=False, spike=False, digest_every=0,
                                                           golden_every=0, fingerprint="off")
    monitor = SdcMonitor(cfg, 0, 1, nn.Linear(2, 2), 0)
    assert monitor.end_step(1, torch.tensor(2.5), 1.0, verify=False, stop=False) == 2.5
    assert monitor.stop_votes == []
    assert monitor.end_step(2, torch.tensor(2.5), 1.0, verify=False, stop=True) == 2.5
    assert monitor.stop_votes == [0]
    assert monitor.end_step(3, torch.tensor(2.5), 1.0, verify=False) == 2.5 and monitor.stop_votes == []
