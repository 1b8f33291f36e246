"""Timeline -> metrics on synthetic timelines (exact numbers, no processes)."""

from __future__ import annotations

import json
import math

import pytest

from chaos.metrics import BaselineInfo, FaultRecord, RunInfo, compute_metrics

RANKS = (0, 1, 2, 3)


def loss_at(step: int) -> float:
    return 4.0 / (1.0 + 0.1 * step)


class Timeline:
    """Builds a merged timeline. Rank ``r`` reports each step 0.01*r s after rank 0."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def ev(self, t: float, src: str, kind: str, inc: int = 0, **fields) -> Timeline:
        self.events.append({"t": t, "src": src, "incarnation": inc, "kind": kind, **fields})
        return self

    def start(self, t: float, inc: int = 0, ranks=RANKS, resumed_from=None, world_size=None):
        for r in ranks:
            self.ev(t + 0.01 * r, f"rank-{r}", "rank_start", inc, rank=r, pid=1000 + r,
                    resumed_from=resumed_from, world_size=world_size or len(ranks))
        return self

    def steps(self, t0: float, first: int, last: int, inc: int = 0, ranks=RANKS, dt=1.0,
              loss=loss_at):
        """Steps first..last; rank 0 reports step s at t0 + (s - first + 1) * dt."""
        for s in range(first, last + 1):
            for r in ranks:
                self.ev(t0 + (s - first + 1) * dt + 0.01 * r, f"rank-{r}", "step_end", inc,
                        step=s, loss=loss(s))
        return self

    def ckpt(self, t: float, step: int, inc: int = 0) -> Timeline:
        return self.ev(t, "rank-0", "ckpt_save_end", inc, step=step)

    def load(self, t: float, step: int, inc: int, ranks=RANKS) -> Timeline:
        for r in ranks:
            self.ev(t + 0.01 * r, f"rank-{r}", "ckpt_load", inc, step=step, skipped=False)
        return self

    def detect(self, t: float, suspect="rank-3", failure_class="crash", by="rank-0", inc=0):
        return self.ev(t, by, "detected", inc, by=by, reason="peer lost", suspect=suspect,
                       failure_class=failure_class)

    def end(self, t: float, step: int, inc: int, digest="d" * 64) -> Timeline:
        return self.ev(t, "rank-0", "run_end", inc, step=step, digest=digest, loss=loss_at(step))

    def sorted(self) -> list[dict]:
        return sorted(self.events, key=lambda e: e["t"])


def kill(fault_id="f0-kill_rank", t=25.5, targets=("rank-3",), cls="crash", **kw) -> FaultRecord:
    return FaultRecord(fault_id=fault_id, type=fault_id.split("-", 1)[-1], failure_class=cls,
                       target_srcs=list(targets), t_inject=t, **kw)


def run_info(status="completed", t_end=41.0, steps=40, world_size=4) -> RunInfo:
    return RunInfo(status=status, t_start=0.0, t_end=t_end, steps_target=steps,
                   world_size=world_size, timeout_s=300.0)


def kill_and_resume() -> Timeline:
    """Kill rank-3 after step 25 (ckpt at 20); restart resumes from 20 and runs to 40."""
    tl = Timeline().start(0.0).steps(0.0, 1, 25).ckpt(20.5, 20)
    tl.detect(26.3)
    tl.ev(26.4, "rank-0", "rank_exit", 0, code=1)
    tl.start(30.0, inc=1).load(31.0, 20, inc=1).steps(31.0, 21, 40, inc=1)
    return tl.end(40.5, 40, inc=1)


def test_kill_and_restart_from_checkpoint_exact_numbers():
    m = compute_metrics(kill_and_resume().sorted(), [kill()], run_info())
    (f,) = m.faults
    assert f.fired and f.restarted
    assert f.detection_s == pytest.approx(0.8)
    assert (f.detected_by, f.detection_reason) == ("rank-0", "peer lost")
    assert f.recovery_s == pytest.approx(32.0 - 25.5)  # step 21 of incarnation 1
    assert f.last_step_before == 25
    assert f.resumed_from == 20
    assert f.lost_steps == 5
    assert f.catchup_s == pytest.approx(36.0 - 25.5)  # step 25 reached again
    assert f.restarts_after == 1
    assert f.attribution == "correct"
    assert m.restart_count == 1
    assert m.completed and m.final_step == 40 and m.final_digest == "d" * 64
    assert m.wall_s == pytest.approx(41.0)
    # (detection, recovery, catchup, lost) worst case over the one fault
    assert (m.detection_s, m.recovery_s, m.lost_steps) == (f.detection_s, f.recovery_s, 5)
    assert not m.undetected and not m.unrecovered


def test_goodput_counts_redone_steps_once():
    m = compute_metrics(kill_and_resume().sorted(), [kill()], run_info())
    # Steps 1-20 of incarnation 0 (1 s each, step 1 from rank_start at t=0) and 21-40 of
    # incarnation 1 (step 21 from its ckpt_load at t=31); steps 21-25 of incarnation 0 redone.
    assert m.productive_s == pytest.approx(40.0)
    assert m.goodput == pytest.approx(40.0 / 41.0)
    assert m.lost_work_rank_s == pytest.approx((41.0 - 40.0) * 4)


def test_first_step_of_incarnation_counts_from_rank_start_without_ckpt_load():
    tl = Timeline().start(2.0).steps(3.0, 1, 10)  # step 1 at 4.0, rank_start at 2.0
    m = compute_metrics(tl.sorted(), [], run_info(t_end=20.0, steps=10))
    assert m.productive_s == pytest.approx(2.0 + 9 * 1.0)
    assert m.goodput == pytest.approx(11.0 / 20.0)
    assert m.faults_fired == 0 and m.detection_s is None and not m.undetected


def test_undetected_fault():
    tl = Timeline().start(0.0).steps(0.0, 1, 25)
    tl.start(30.0, inc=1, resumed_from=20).steps(31.0, 21, 40, inc=1)
    m = compute_metrics(tl.sorted(), [kill()], run_info())
    (f,) = m.faults
    assert f.detection_s is None and f.attribution == "none"
    assert f.attribution_detail == "undetected"
    assert m.undetected and m.detection_s is None
    assert f.recovery_s == pytest.approx(6.5) and f.resumed_from == 20 and f.lost_steps == 5


def test_fault_before_first_checkpoint_restarts_from_scratch():
    tl = Timeline().start(0.0).steps(0.0, 1, 15)
    tl.detect(16.0)
    tl.start(18.0, inc=1).steps(18.0, 1, 40, inc=1)
    m = compute_metrics(tl.sorted(), [kill(t=15.5)], run_info(t_end=60.0))
    (f,) = m.faults
    assert f.last_step_before == 15
    assert f.resumed_from == 0
    assert f.lost_steps == 15
    assert f.recovery_s == pytest.approx(19.0 - 15.5)
    assert f.catchup_s == pytest.approx(18.0 + 15 - 15.5)
    # the 15 steps of incarnation 0 were all redone: only incarnation 1's 40 steps survive
    assert m.productive_s == pytest.approx(40.0)


def test_fault_before_the_first_step():
    tl = Timeline().start(0.0)
    tl.detect(1.0)
    tl.start(3.0, inc=1).steps(3.0, 1, 40, inc=1)
    m = compute_metrics(tl.sorted(), [kill(t=0.5)], run_info(t_end=50.0))
    (f,) = m.faults
    assert f.last_step_before is None
    assert f.lost_steps == 0
    assert f.restarted and f.resumed_from == 0
    assert f.recovery_s == pytest.approx(3.5)
    assert f.catchup_s == f.recovery_s


def test_two_faults_each_measured_against_its_own_injection():
    tl = kill_and_resume()
    tl.events = [e for e in tl.events if e["kind"] != "run_end" and e["t"] < 45.5]
    tl.ckpt(41.5, 30, inc=1)  # incarnation 1 reaches step 34 at t=45 (+ rank offsets)
    tl.detect(46.0, suspect="rank-1", inc=1)
    tl.start(48.0, inc=2).load(49.0, 30, inc=2).steps(49.0, 31, 40, inc=2).end(59.5, 40, 2)
    faults = [kill(), kill("f1-kill_rank", t=45.5, targets=("rank-1",))]
    m = compute_metrics(tl.sorted(), faults, run_info(t_end=60.0))
    f0, f1 = m.faults
    assert (f0.detection_s, f0.recovery_s, f0.lost_steps) == (
        pytest.approx(0.8), pytest.approx(6.5), 5)
    assert f0.catchup_s == pytest.approx(10.5) and f0.restarts_after == 1
    assert f1.detection_s == pytest.approx(0.5)
    assert f1.last_step_before == 34  # not 25 from the rolled-back incarnation 0
    assert f1.resumed_from == 30 and f1.lost_steps == 4
    assert f1.recovery_s == pytest.approx(50.0 - 45.5)
    assert f1.catchup_s == pytest.approx(53.0 - 45.5)
    assert f1.restarts_after == 1
    assert m.restart_count == 2
    assert m.recovery_s == pytest.approx(6.5) and m.catchup_s == pytest.approx(10.5)
    assert m.lost_steps == 5 and m.detection_s == pytest.approx(0.8)


def test_later_faults_detection_is_not_credited_to_an_undetected_earlier_fault():
    tl = Timeline().start(0.0).steps(0.0, 1, 25)
    tl.detect(26.3, suspect="rank-3")  # blames the kill's target, not the straggler's
    tl.start(30.0, inc=1, resumed_from=20).steps(31.0, 21, 40, inc=1)
    straggler = kill("f0-straggler", t=10.5, targets=("rank-1",), cls="slow", t_revert=15.5)
    m = compute_metrics(tl.sorted(), [straggler, kill("f1-kill_rank")], run_info())
    f0, f1 = m.faults
    assert f0.detection_s is None and f0.attribution == "none"
    assert not f0.restarted and f0.lost_steps == 0
    assert f0.recovery_s == pytest.approx(16.01 - 10.5)  # rank-1's step 16, after the revert
    assert f1.detection_s == pytest.approx(0.8) and f1.attribution == "correct"


def test_restart_that_fails_again():
    tl = Timeline().start(0.0).steps(0.0, 1, 25).ckpt(20.5, 20)
    tl.detect(26.3)
    tl.start(30.0, inc=1).load(31.0, 20, inc=1)
    tl.ev(31.5, "rank-2", "rank_exit", 1, code=1)
    tl.start(35.0, inc=2).load(36.0, 20, inc=2).steps(36.0, 21, 40, inc=2).end(56.5, 40, 2)
    m = compute_metrics(tl.sorted(), [kill()], run_info(t_end=57.0))
    (f,) = m.faults
    assert f.recovery_s == pytest.approx(37.0 - 25.5)  # first step of incarnation 2
    assert f.restarts_after == 2
    assert m.restart_count == 2
    assert f.resumed_from == 20 and f.lost_steps == 5


def test_restart_that_fails_before_reporting_anything_still_counts():
    tl = Timeline().start(0.0).steps(0.0, 1, 25)
    tl.start(35.0, inc=2, resumed_from=20).steps(36.0, 21, 40, inc=2)
    m = compute_metrics(tl.sorted(), [kill()], run_info(t_end=57.0))
    assert m.faults[0].restarts_after == 2 and m.restart_count == 2


def test_restart_that_never_steps_is_unrecovered():
    tl = Timeline().start(0.0).steps(0.0, 1, 25).detect(26.3)
    tl.start(30.0, inc=1, resumed_from=20)
    m = compute_metrics(tl.sorted(), [kill()], run_info(status="failed", t_end=40.0))
    (f,) = m.faults
    assert f.restarted and f.recovery_s is None and f.catchup_s is None
    assert f.resumed_from == 20 and f.lost_steps == 5
    assert m.unrecovered and m.recovery_s is None and not m.completed


def test_hang_resumed_by_sigcont_without_restart():
    tl = Timeline().start(0.0).steps(0.0, 1, 25)
    tl.detect(30.0, suspect="rank-3", failure_class="hang")
    tl.steps(35.0, 26, 40)  # SIGCONT at 35.0, step 26 at 36.0 (rank-3 at 36.03)
    hang = kill("f0-hang_rank", cls="hang", t_revert=35.0)
    m = compute_metrics(tl.sorted(), [hang], run_info(t_end=51.0))
    (f,) = m.faults
    assert f.restarted is False and f.restarts_after == 0
    assert f.recovery_s == pytest.approx(36.03 - 25.5)
    assert f.catchup_s == f.recovery_s
    assert f.lost_steps == 0 and f.resumed_from is None
    assert f.attribution == "correct"
    assert m.restart_count == 0


def test_hang_never_resumed_is_unrecovered():
    tl = Timeline().start(0.0).steps(0.0, 1, 25)
    m = compute_metrics(tl.sorted(), [kill("f0-hang_rank", cls="hang", t_revert=300.0)],
                        run_info(status="hung", t_end=300.0))
    (f,) = m.faults
    assert f.t_revert is None  # the end-of-run cleanup is not a revert that counts
    assert f.recovery_s is None and not f.restarted and m.unrecovered


def test_step_finished_by_survivors_after_a_kill_is_not_recovery():
    tl = kill_and_resume()
    tl.ev(25.6, "rank-0", "step_end", 0, step=26, loss=loss_at(26))  # in flight when killed
    m = compute_metrics(tl.sorted(), [kill()], run_info())
    (f,) = m.faults
    assert f.restarted and f.recovery_s == pytest.approx(6.5)
    assert m.productive_s == pytest.approx(40.0)  # the orphan step 26 was redone


def test_in_process_fault_takes_t_inject_from_its_event():
    tl = Timeline().start(0.0).steps(0.0, 1, 25)
    tl.ev(25.05, "rank-2", "fault_injected", 0, fault="f0-device_error", target="rank-2",
          step=25)
    tl.detect(25.1, suspect="rank-2", failure_class="device", by="rank-2")
    tl.start(28.0, inc=1, resumed_from=20).steps(28.0, 21, 40, inc=1)
    rec = FaultRecord("f0-device_error", "device_error", "device", ["rank-2"], planned_step=25)
    m = compute_metrics(tl.sorted(), [rec], run_info(t_end=50.0))
    (f,) = m.faults
    assert f.fired and f.t_inject == 25.05 and f.injected_step == 25
    assert f.detection_s == pytest.approx(0.05)
    assert f.attribution == "correct"
    assert f.recovery_s == pytest.approx(29.0 - 25.05)


def test_fault_that_never_fired():
    tl = Timeline().start(0.0).steps(0.0, 1, 40)
    rec = FaultRecord("f0-kill_rank", "kill_rank", "crash", ["rank-3"], planned_step=100)
    m = compute_metrics(tl.sorted(), [rec], run_info())
    (f,) = m.faults
    assert not f.fired and f.detection_s is None and f.recovery_s is None
    assert m.faults_fired == 0 and not m.undetected and not m.unrecovered


@pytest.mark.parametrize(
    ("targets", "suspect", "cls", "expected", "detail"),
    [
        (["rank-3"], "rank-3", "crash", "correct", "blamed rank-3 (crash), fault was rank-3 (crash)"),
        (["rank-3"], "rank-1", "crash", "wrong", "blamed rank-1 (crash), fault was rank-3 (crash)"),
        (["rank-3"], "rank-3", "network", "wrong", "blamed rank-3 (network)"),
        (["rank-3"], "node-1", "crash", "wrong", "blamed node-1 (crash)"),
        (["node-1", "rank-2", "rank-3"], "node-1", "crash", "correct", "node-1, rank-2, rank-3"),
        (["rank-3"], None, "crash", "none", "without naming a suspect"),
    ],
)
def test_attribution(targets, suspect, cls, expected, detail):
    tl = kill_and_resume()
    tl.events = [e for e in tl.events if e["kind"] != "detected"]
    tl.detect(26.3, suspect=suspect, failure_class=cls)
    m = compute_metrics(tl.sorted(), [kill(targets=targets)], run_info())
    (f,) = m.faults
    assert f.attribution == expected
    assert detail in f.attribution_detail


def test_a_secondary_detection_times_it_and_the_next_one_is_blamed():
    """A survivor's report of a lost peer (chaos.workload.logprogress: no suspect, secondary)
    that came first is when the job noticed; the attribution is the next report's."""
    tl = kill_and_resume()
    tl.events = [e for e in tl.events if e["kind"] != "detected"]
    tl.detect(26.0, suspect=None, failure_class="crash")
    tl.events[-1]["secondary"] = True
    tl.detect(26.1, suspect="rank-3", failure_class="crash")
    (f,) = compute_metrics(tl.sorted(), [kill(targets=["rank-3"])], run_info()).faults
    assert f.detection_s == pytest.approx(0.5) and f.attribution == "correct" and f.detected_suspect == "rank-3"
    # no other report: named no one
    tl.events = [e for e in tl.events if e.get("suspect") != "rank-3"]
    (f,) = compute_metrics(tl.sorted(), [kill(targets=["rank-3"])], run_info()).faults
    assert f.attribution == "none" and "without naming a suspect" in f.attribution_detail


def test_detection_before_the_fault_does_not_count():
    tl = kill_and_resume().detect(10.0, suspect="rank-1")
    m = compute_metrics(tl.sorted(), [kill()], run_info())
    assert m.faults[0].detection_s == pytest.approx(0.8)


def baseline(digest="d" * 64, world_size=4, tweak=None) -> BaselineInfo:
    losses = {s: loss_at(s) for s in range(1, 41)}
    if tweak:
        losses.update(tweak)
    return BaselineInfo(digest=digest, losses=losses, world_size=world_size)


def test_baseline_digest_match_and_zero_loss_deviation():
    m = compute_metrics(kill_and_resume().sorted(), [kill()], run_info(), baseline())
    assert m.has_baseline and m.digest_match is True and m.world_size_changed is False
    assert m.max_rel_loss_dev == pytest.approx(0.0)
    assert m.loss_dev_steps == list(range(31, 41))


def test_baseline_digest_mismatch_and_loss_deviation():
    b = baseline(digest="e" * 64, tweak={"38": loss_at(38) * 1.1})  # JSON keys are strings
    m = compute_metrics(kill_and_resume().sorted(), [kill()], run_info(), b)
    assert m.digest_match is False
    assert m.max_rel_loss_dev == pytest.approx(0.1 / 1.1)


def test_loss_deviation_uses_the_surviving_loss_of_redone_steps():
    tl = kill_and_resume()
    for e in tl.events:  # incarnation 0 diverged on steps 21-25; the redo is what counts
        if e["kind"] == "step_end" and e["incarnation"] == 0 and e["step"] > 20:
            e["loss"] = 99.0
    m = compute_metrics(tl.sorted(), [kill()], run_info(steps=40), baseline())
    assert m.max_rel_loss_dev == pytest.approx(0.0)


def test_changed_world_size_makes_digest_not_comparable():
    tl = Timeline().start(0.0).steps(0.0, 1, 25)
    tl.start(30.0, inc=1, ranks=(0, 1, 2), resumed_from=20).steps(31.0, 21, 40, 1, (0, 1, 2))
    tl.end(40.5, 40, 1, digest="x" * 64)
    m = compute_metrics(tl.sorted(), [kill()], run_info(), baseline())
    assert m.final_world_size == 3 and m.world_size_changed is True
    assert m.digest_match is None
    assert m.max_rel_loss_dev == pytest.approx(0.0)


def test_no_final_digest_is_a_mismatch():
    tl = Timeline().start(0.0).steps(0.0, 1, 25)
    m = compute_metrics(tl.sorted(), [], run_info(status="hung"), baseline())
    assert m.digest_match is False and m.final_digest is None and not m.completed
    assert m.final_step == 25


def test_nonfinite_loss_is_reported_and_serialisable():
    tl = Timeline().start(0.0).steps(0.0, 1, 40, loss=lambda s: math.nan if s > 35 else loss_at(s))
    tl.end(40.5, 40, 0)
    tl.events[-1]["loss"] = math.nan
    m = compute_metrics(tl.sorted(), [], run_info(), baseline())
    assert m.nonfinite_loss_step == 36 and m.max_rel_loss_dev is None
    d = m.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["final_loss"] is None


def test_a_run_the_nonfinite_guard_stopped_before_any_nan_loss_is_not_healthy():
    """The guard leaves before the step's non-finite loss is reported: the detection is the
    only evidence. A job that never trains past it trained to NaN; one that does is healthy."""
    def guarded(tl: Timeline, t: float, step: int, inc: int) -> Timeline:
        return tl.ev(t, "rank-0", "detected", inc, by="rank-0", reason="non-finite values",
                     suspect=None, failure_class="corruption", detector="nonfinite", step=step)

    stopped = guarded(Timeline().start(0.0).steps(0.0, 1, 1), 2.5, 2, 0)
    m = compute_metrics(stopped.sorted(), [], run_info(status="failed", steps=20), baseline())
    assert m.healthy is False and m.first_nonfinite_step == 2
    assert m.health_problem == "the non-finite guard stopped training at step 2 and no step got past it"

    recovered = guarded(Timeline().start(0.0).steps(0.0, 1, 1), 2.5, 2, 0)
    recovered.start(3.0, inc=1).steps(3.0, 1, 20, inc=1).end(24.0, 20, 1)
    m = compute_metrics(recovered.sorted(), [], run_info(steps=20), baseline())
    assert m.healthy is True and m.first_nonfinite_step is None


def test_to_dict_is_json_serialisable():
    m = compute_metrics(kill_and_resume().sorted(), [kill()], run_info(), baseline())
    d = json.loads(json.dumps(m.to_dict(), allow_nan=False))
    assert d["faults"][0]["fault_id"] == "f0-kill_rank"
    assert d["faults"][0]["lost_steps"] == 5
    assert d["goodput"] == pytest.approx(40.0 / 41.0)


def test_completed_needs_the_last_step():
    tl = Timeline().start(0.0).steps(0.0, 1, 30)
    assert not compute_metrics(tl.sorted(), [], run_info(steps=40)).completed
    assert compute_metrics(tl.sorted(), [], run_info(steps=30)).completed
    assert not compute_metrics(tl.sorted(), [], run_info("interrupted", steps=30)).completed


# -- false detections and teardown -------------------------------------------------------


def test_consequences_of_a_restart_are_not_false_detections():
    """After rank-3 is killed, peers also see ranks 0-2 go as their agents tear them down for
    the restart: blaming those is the restart itself, not a new alarm."""
    tl = kill_and_resume()
    tl.detect(26.5, suspect="rank-2", by="rank-1")  # rank 2 torn down by its agent
    tl.detect(27.0, suspect="rank-0", by="node-1")
    m = compute_metrics(tl.sorted(), [kill()], run_info())
    assert m.false_detections == 0 and m.false_detection_events == []
    assert m.faults[0].attribution == "correct"


def test_a_healthy_rank_blamed_without_any_fault_on_it_is_a_false_detection():
    """A latency fault on rank 3's link; rank 1 (healthy) is called hung; the group restarts."""
    tl = Timeline().start(0.0).steps(0.0, 1, 10)
    tl.detect(10.5, suspect="rank-1", failure_class="hang", by="rank-0")
    tl.detect(10.6, suspect="rank-2", by="rank-3")  # torn down by the restart: a consequence
    tl.start(14.0, inc=1).steps(14.0, 11, 20, inc=1)
    latency = kill("f0-latency", t=5.0, targets=("rank-3",), cls="network", family="network")
    m = compute_metrics(tl.sorted(), [latency], run_info(steps=20, t_end=25.0))
    assert m.false_detections == 1
    assert m.false_detection_events[0]["suspect"] == "rank-1"
    assert m.false_detection_events[0]["failure_class"] == "hang"


def test_every_detection_in_a_fault_free_run_is_false_and_each_new_alarm_counts():
    tl = Timeline().start(0.0).steps(0.0, 1, 5)
    tl.detect(5.5, suspect="rank-2", failure_class="hang")
    tl.start(8.0, inc=1).steps(8.0, 6, 10, inc=1)
    tl.detect(13.5, suspect="rank-0", failure_class="hang", by="rank-1", inc=1)  # after recovery
    m = compute_metrics(tl.sorted(), [], run_info(steps=10, t_end=20.0))
    assert m.false_detections == 2


def test_what_the_job_reports_while_trainchaos_stops_it_is_no_detection():
    """hang-no-watchdog: nothing notices the frozen rank; at timeout_s trainchaos stops the
    job and a peer reports rank 0 gone. That is teardown, not a detection (true or false)."""
    tl = Timeline().start(0.0).steps(0.0, 1, 10)
    tl.detect(62.0, suspect="rank-0", by="rank-1")
    run = RunInfo(status="hung", t_start=0.0, t_end=63.0, steps_target=40, world_size=4,
                  timeout_s=60.0, t_stop=61.0)
    m = compute_metrics(tl.sorted(), [kill("f0-hang_rank", t=10.5, cls="hang")], run)
    assert m.faults[0].detection_s is None and m.undetected
    assert m.false_detections == 0
    # The same event before the stop would have been a (wrong) detection.
    run.t_stop = None
    m = compute_metrics(tl.sorted(), [kill("f0-hang_rank", t=10.5, cls="hang")], run)
    assert m.faults[0].attribution == "wrong" and m.false_detections == 1


# -- restart accounting: metrics that agree with each other ---------------------------------


def assert_restart_invariants(m) -> None:
    assert len(m.restarts) == m.restart_count
    assert sum(f.restarts_caused for f in m.faults) + m.unexplained_restarts == m.restart_count
    assert m.lost_steps_total == sum(r["lost_steps"] or 0 for r in m.restarts)
    assert sum(f.lost_steps or 0 for f in m.faults) <= m.lost_steps_total
    for f in m.faults:
        assert f.restarted == (f.restarts_caused > 0), f
        if not f.restarted:
            assert f.lost_steps in (0, None), f


def test_a_slowdown_that_later_restarts_the_group_owns_that_restart_and_its_lost_steps():
    """A straggler (no revert) slows the job; 15 s later a collective times out and the group
    restarts from step 20. The journal once said restarted: false, lost_steps: 0 next to
    restart_count: 1."""
    tl = Timeline().start(0.0).steps(0.0, 1, 25).ckpt(20.5, 20)
    tl.detect(26.0, suspect="rank-1", failure_class="hang")
    tl.start(30.0, inc=1).load(31.0, 20, inc=1).steps(31.0, 21, 40, inc=1).end(51.0, 40, 1)
    straggler = kill("f0-straggler", t=10.5, targets=("rank-1",), cls="slow")
    m = compute_metrics(tl.sorted(), [straggler], run_info(t_end=52.0))
    (f,) = m.faults
    assert m.restart_count == 1 and f.restarts_caused == 1 and f.restarted
    assert f.lost_steps == 5 and m.lost_steps == 5 and m.lost_steps_total == 5
    assert m.restarts[0]["cause"] == "f0-straggler"
    assert_restart_invariants(m)


def test_a_restart_no_fault_explains_is_counted_as_unexplained():
    tl = Timeline().start(0.0).steps(0.0, 1, 10).ckpt(8.5, 8)
    tl.detect(11.0, suspect="rank-2", failure_class="hang")
    tl.start(14.0, inc=1).load(15.0, 8, inc=1).steps(15.0, 9, 20, inc=1)
    m = compute_metrics(tl.sorted(), [], run_info(steps=20, t_end=30.0))
    assert m.restart_count == 1 and m.unexplained_restarts == 1
    assert m.restarts[0]["cause"] is None and m.lost_steps_total == 2
    assert_restart_invariants(m)


def test_a_restart_superseded_before_loading_resumed_from_nowhere_and_loses_nothing():
    """Power returns while the shrunk group trains: torchrun restarts it to admit the nodes
    (incarnation 2, rank 0 alone started: no load, no step), then again when the last node
    joins (incarnation 3 loads the step-57 emergency checkpoint). Incarnation 2 never
    resumed from anything: it is neither a rollback to step 0 nor 57 lost steps."""
    tl = Timeline().start(0.0).steps(0.0, 1, 30).ckpt(10.5, 10).ckpt(20.5, 20)
    tl.detect(30.6, suspect="rank-2")
    tl.start(33.0, inc=1, ranks=(0,)).load(33.5, 20, inc=1, ranks=(0,)).steps(33.5, 21, 57, inc=1, ranks=(0,))
    tl.ckpt(71.0, 57, inc=1)
    tl.start(75.0, inc=2, ranks=(0,))
    tl.start(80.0, inc=3).load(81.0, 57, inc=3).steps(81.0, 58, 120, inc=3).end(144.5, 120, 3)
    m = compute_metrics(tl.sorted(), [kill(t=30.5, targets=("rank-2",))], run_info(steps=120, t_end=145.0))
    (f,) = m.faults
    assert m.restart_count == 3 and f.restarts_caused == 3
    assert [r["resumed_from"] for r in m.restarts] == [20, None, 57]
    assert [r["lost_steps"] for r in m.restarts] == [10, None, 0]
    assert f.lost_steps == 10 and m.lost_steps_total == 10
    assert m.silent_rollback_steps == 0
    assert_restart_invariants(m)


@pytest.mark.parametrize("build", ["kill_and_resume", "fails_again"])
def test_restart_invariants_hold(build: str):
    if build == "kill_and_resume":
        tl = kill_and_resume()
    else:
        tl = Timeline().start(0.0).steps(0.0, 1, 25).ckpt(20.5, 20)
        tl.detect(26.3)
        tl.start(30.0, inc=1).load(31.0, 20, inc=1)
        tl.start(35.0, inc=2).load(36.0, 20, inc=2).steps(36.0, 21, 40, inc=2).end(56.5, 40, 2)
    m = compute_metrics(tl.sorted(), [kill()], run_info(t_end=57.0))
    assert m.faults[0].lost_steps == 5, "a restart that fails again loses nothing a second time"
    assert_restart_invariants(m)


def test_ettr_is_the_steps_kept_against_a_twin_stepping_at_the_median_step_time():
    m = compute_metrics(kill_and_resume().sorted(), [kill()], run_info())
    # Every kept step took 1 s (step 21 from its ckpt_load, left out: the first step after the
    # kill); from step 1 (t=1) to the end (t=41) the twin makes 40 steps; the run kept 39 past step 1.
    assert m.twin_step_s == pytest.approx(1.0)
    assert m.ettr == pytest.approx(39.0 / 40.0)


def test_ettr_charges_a_survivor_step_that_waits_out_a_failure_which_goodput_counts_as_productive():
    # No restart: the step after the fault at 22.5 waits 9 s for the lost peer, then 1 s steps;
    # every 10th step saves a checkpoint for 1 s more, which the twin pays as well.
    tl = Timeline().start(0.0).steps(0.0, 1, 20).steps(29.0, 21, 30)
    for e in tl.events:
        e["t"] += sum(1.0 for k in (10, 20, 30) if e.get("step", 0) >= k and e["kind"] == "step_end")
    tl.end(42.0, 30, inc=0)
    m = compute_metrics(tl.sorted(), [kill(t=22.5)], run_info(t_end=42.0, steps=30))
    assert m.goodput == pytest.approx(1.0)
    assert m.twin_step_s == pytest.approx(32.0 / 29.0)  # 29 steps (all but step 21): 29 s + 3 saves
    assert m.ettr == pytest.approx(29.0 * (32.0 / 29.0) / 41.0)
