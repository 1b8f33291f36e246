"""The step-progress watchdog (harness.progress) and the slow-rank detector
(harness.slowrank): their verdicts from given states, and the watchdog for real over a
liveness endpoint on loopback."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from torch import nn

from harness.config import ConfigError, DetectConfig, ProgressConfig, SlowRankConfig
from harness.config_load import config_from_mapping
from harness.health import Diagnosis, LivenessServer, PeerAddress
from harness.progress import ProgressWatchdog, classify_stall, thread_position
from harness.sdc import SdcMonitor
from harness.slowrank import SlowRankDetector, find_slow_rank


def _state(rank: int, phase: str, step: int = 50, where: str = "probe.py:1 _stall_lock") -> dict:
    return {"rank": rank, "pid": 100 + rank, "step": step, "idle_s": 9.0, "phase": phase, "where": where}


def test_the_rank_outside_the_collective_its_peers_wait_in_is_named_stalled() -> None:
    verdict = classify_stall({0: _state(0, "collective"), 1: _state(1, "host"), 2: _state(2, "collective"),
                              3: _state(3, "collective")})
    assert (verdict.suspect, verdict.failure_class, verdict.cause) == (1, "stalled", "host")
    assert "_stall_lock" in verdict.reason and "ranks 0, 2, 3 wait in the collective of step 51" in verdict.reason


def test_a_rank_that_does_not_answer_is_hung_not_stalled() -> None:
    frozen = Diagnosis(2, "hang", "rank 2 accepts connections but does not answer")
    verdict = classify_stall({0: _state(0, "collective"), 1: _state(1, "collective"), 2: frozen})
    assert (verdict.suspect, verdict.failure_class, verdict.cause) == (2, "hang", "frozen")


def test_every_rank_in_the_collective_names_nobody() -> None:
    verdict = classify_stall({r: _state(r, "collective") for r in range(4)})
    assert (verdict.suspect, verdict.failure_class, verdict.cause) == (None, "stalled", "collective")
    several = classify_stall({r: _state(r, "host") for r in range(2)})
    assert several.suspect is None and several.cause == "host"


def test_the_training_thread_s_position_comes_from_its_stack() -> None:
    lock = threading.Lock()
    lock.acquire()
    thread = threading.Thread(target=lock.acquire, daemon=True)
    thread.start()
    time.sleep(0.05)
    phase, where = thread_position(thread.ident)
    lock.release()
    assert phase == "host" and "run" in where


def test_the_watchdog_names_its_own_stuck_loop_while_its_peer_waits() -> None:
    """For real: a peer's liveness endpoint answers that it waits in a collective; this
    process's main thread (the test's) stops beating; within the timeout the watchdog
    gathers both states and names this rank as stalled, with where its thread is."""
    peer_server = LivenessServer(1, "127.0.0.1")
    peer_server.status = lambda: _state(1, "collective", where="graph.py:825 _engine_run_backward")
    own_server = LivenessServer(0, "127.0.0.1")
    peer = PeerAddress(rank=1, host="127.0.0.1", port=peer_server.port, pid=0, node=0)
    verdicts = []
    watchdog = ProgressWatchdog.for_config(ProgressConfig(timeout_s=0.4), 0, [peer], own_server, 0.05, 100,
                                           verdicts.append)
    assert watchdog is not None and own_server.status is not None
    watchdog.beat(7)
    deadline = time.monotonic() + 5
    while not verdicts and time.monotonic() < deadline:
        time.sleep(0.02)  # the "training thread" stuck here, outside any collective
    (verdict,) = verdicts
    assert (verdict.suspect, verdict.failure_class, verdict.cause) == (0, "stalled", "host")
    assert "step 7 done" in verdict.reason and "test_progress_watchdog.py" in verdict.reason
    assert ProgressWatchdog.for_config(ProgressConfig(), 0, [], own_server, 0.5, 1, verdicts.append) is None


def test_the_last_step_stops_the_watchdog() -> None:
    server = LivenessServer(0, "127.0.0.1")
    verdicts = []
    watchdog = ProgressWatchdog.for_config(ProgressConfig(timeout_s=0.2), 0, [], server, 0.05, 3, verdicts.append)
    watchdog.beat(3)
    time.sleep(0.4)
    assert verdicts == []


# ------------------------------------------------------------------ the slow-rank detector


def test_the_slow_rank_is_the_one_far_above_its_peers() -> None:
    def steady(**least: float) -> dict[int, list[float]]:
        return {int(r[1:]): [v, v + 0.01, v + 0.02] for r, v in least.items()}

    assert find_slow_rank(steady(r0=0.10, r1=0.11, r2=0.10, r3=0.20), 1.3, 0.005).rank == 3
    assert find_slow_rank(steady(r0=0.10, r1=0.12, r2=0.10, r3=0.11), 1.3, 0.005) is None
    assert find_slow_rank(steady(r0=0.001, r1=0.002), 1.3, 0.005) is None  # a ratio on tiny steps is noise
    # The least of a window: one slow step is no slow rank.
    assert find_slow_rank({0: [0.1] * 3, 1: [0.1, 0.5, 0.1], 2: [0.1] * 3}, 1.3, 0.005) is None


def test_the_margin_widens_with_the_peers_noise() -> None:
    """3x its peers' least, but the peers themselves wander by as much: not found with a
    noise margin, found without one."""
    windows = {0: [0.01, 0.05, 0.09, 0.03], 1: [0.01, 0.07, 0.02, 0.08], 2: [0.03, 0.04, 0.035, 0.05],
               3: [0.01, 0.09, 0.06, 0.02]}
    assert find_slow_rank(windows, 2.0, 0.005, noise_mads=0).rank == 2
    assert find_slow_rank(windows, 2.0, 0.005, noise_mads=3) is None
    quiet = {0: [0.010, 0.011, 0.010], 1: [0.011, 0.010, 0.010], 2: [0.03, 0.031, 0.03], 3: [0.010, 0.010, 0.011]}
    assert find_slow_rank(quiet, 2.0, 0.005, noise_mads=3).rank == 2


def test_the_detector_reports_once_from_the_lowest_other_rank_and_rearms() -> None:
    cfg = SlowRankConfig(enabled=True, window=3, persist=1)
    events = {0: [], 2: []}
    detectors = {r: SlowRankDetector(cfg, r, 3, lambda kind, r=r, **f: events[r].append(f)) for r in events}
    times = [[0.1, 0.1, 0.1]] * 3 + [[0.1, 0.3, 0.1]] * 5 + [[0.1, 0.1, 0.1]] * 3 + [[0.1, 0.3, 0.1]] * 3
    for step, row in enumerate(times, 1):
        for det in detectors.values():
            det.observe(step, row)
    assert events[2] == []
    assert [(e["suspect"], e["failure_class"], e["detector"], e["step"]) for e in events[0]] == [
        ("rank-1", "slow", "slow_rank", 6), ("rank-1", "slow", "slow_rank", 14)]
    assert "rank 1 is slow" in events[0][0]["reason"]


def test_a_rank_must_be_found_slow_several_steps_in_a_row() -> None:
    events: list[dict] = []
    det = SlowRankDetector(SlowRankConfig(enabled=True, window=3, persist=3), 0, 3,
                           lambda kind, **f: events.append(f))
    # Slow through one whole window (found at step 6 only), back to normal, then for good.
    times = [[0.1, 0.1, 0.1]] * 3 + [[0.1, 0.3, 0.1]] * 3 + [[0.1, 0.1, 0.1]] + [[0.1, 0.3, 0.1]] * 6
    found = [det.observe(step, row) for step, row in enumerate(times, 1)]
    assert [e["step"] for e in events] == [12]  # found at 10, 11, 12: reported at the third
    assert "3 steps in a row" in events[0]["reason"]
    assert [step for step, f in enumerate(found, 1) if f is not None] == [12, 13]


def test_the_host_time_is_taken_from_the_last_collective_to_the_first_bucket() -> None:
    det = SlowRankDetector(SlowRankConfig(enabled=True), 0, 2, lambda *a, **k: None)
    hook = det.timed(lambda state, bucket: bucket)
    assert det.host_s() is None  # no collective seen yet
    det.observe(1, None)
    time.sleep(0.05)
    assert hook(None, "b1") == "b1"
    time.sleep(0.05)
    hook(None, "b2")  # a later bucket of the same step changes nothing
    assert 0.045 <= det.host_s() < 0.09
    assert SlowRankDetector(SlowRankConfig(), 0, 2, lambda *a, **k: None).host_s() is None  # off


def test_time_spent_waiting_for_a_cpu_is_not_the_rank_s_own() -> None:
    """Four ranks on two cores: the one the scheduler runs last would look twice as slow."""
    det = SlowRankDetector(SlowRankConfig(enabled=True), 0, 2, lambda *a, **k: None)
    # Read before and after the clock at each mark: 40 ms on the run queue between the sync
    # and the first bucket.
    queued = iter([1.0, 1.0, 1.04, 1.04])
    det._queued_s = lambda: next(queued)
    hook = det.timed(lambda state, bucket: None)
    det.observe(1, None)
    time.sleep(0.06)
    hook(None, None)
    assert 0.015 <= det.host_s() < 0.045


def test_a_wait_for_a_cpu_between_clock_and_delay_reads_is_counted_once() -> None:
    """The kernel adds a wait to the delay when the thread runs again: a wait that falls
    between the two reads shows in the second one, and the clock is read again."""
    det = SlowRankDetector(SlowRankConfig(enabled=True), 0, 2, lambda *a, **k: None)
    reads = iter([0.0, 0.0, 0.0, 0.5, 0.5])  # sync: agree; entry: a 0.5 s wait between, then agree
    det._queued_s = lambda: next(reads)
    hook = det.timed(lambda state, bucket: None)
    det.observe(1, None)
    time.sleep(0.02)
    hook(None, None)
    assert det.host_s() == pytest.approx(1e-9)  # 20 ms of which the 0.5 s wait is not the rank's: floored
    assert next(reads, "done") == "done"


def test_work_only_some_ranks_do_is_excused_from_the_host_time() -> None:
    det = SlowRankDetector(SlowRankConfig(enabled=True), 0, 2, lambda *a, **k: None)
    hook = det.timed(lambda state, bucket: None)
    det.observe(1, None)
    with det.excused():  # rank 0's checkpoint snapshot, a twin's digest
        time.sleep(0.08)
    time.sleep(0.02)
    hook(None, None)
    assert 0.015 <= det.host_s() < 0.06
    det.observe(2, None)  # the next step starts with nothing excused
    time.sleep(0.02)
    hook(None, None)
    assert 0.015 <= det.host_s() < 0.06
    with SlowRankDetector(SlowRankConfig(), 0, 2, lambda *a, **k: None).excused():
        pass  # off: nothing measured, nothing fails


@pytest.mark.parametrize("detectors_on", [True, False])
def test_host_times_ride_on_the_evidence_all_reduce(one_rank_group, detectors_on: bool) -> None:
    cfg = DetectConfig() if detectors_on else DetectConfig(nonfinite=False, spike=False, digest_every=0,
                                                           golden_every=0, fingerprint="off")
    monitor = SdcMonitor(cfg, 0, 1, nn.Linear(2, 2), 0)
    assert monitor.end_step(1, torch.tensor(2.5), 1.0, verify=False, stop=False, host_s=0.25) == 2.5
    assert monitor.host_times == [0.25]
    monitor.end_step(2, torch.tensor(2.5), 1.0, verify=False, stop=True)
    assert monitor.host_times is None and monitor.stop_votes == [0]


@pytest.mark.parametrize(("mapping", "says"), [
    ({"progress": {"timeout_s": -1}}, "harness.progress: progress.timeout_s must be >= 0"),
    ({"progress": {"timeout_s": 40}}, "progress.timeout_s (40) must be below failure.collective_timeout_s (30)"),
    ({"slow_rank": {"ratio": 1.0}}, "slow_rank.ratio must be > 1"),
    ({"slow_rank": {"window": 2}}, "slow_rank.window is 2; at least 3"),
    ({"slow_rank": {"persist": 0}}, "slow_rank.persist must be >= 1"),
    ({"slow_rank": {"noise_mads": -1}}, "slow_rank.noise_mads must be >= 0"),
    ({"slow_rank": {"bogus": 1}}, "harness.slow_rank.bogus: unknown option"),
])
def test_bad_options_are_located(mapping: dict, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_mapping(mapping)
    assert says in str(info.value)


def test_both_are_off_by_default() -> None:
    cfg = config_from_mapping({})
    assert cfg.progress.timeout_s == 0 and cfg.slow_rank.enabled is False
