"""The twin is judged too (issue 42): a correctness target the fault-free twin itself misses is
the first finding, and every comparison with that twin is flagged as against a wrong reference."""

from __future__ import annotations

from typing import Any

from chaos.metrics import BaselineInfo, RunInfo, compute_metrics
from chaos.metrics.families.data import baseline_samples
from chaos.report.summary import render_summary
from chaos.runfiles.record import BaselineRef, MetricsRecord, RunRecord
from chaos.runner.verdict import judge, judge_twin
from chaos.scenario.load import parse_scenario

STEPS, PER_RANK = 10, 4  # two ranks, 4 samples each per step, 80 samples per epoch


def _job(every_rank_trains_all: bool) -> list[dict[str, Any]]:
    """One epoch of 80 samples over two ranks: each rank its own half (a sound job), or each
    rank every sample (Accelerate run under torchrun on CPU without cpu=True: every rank its
    own single-process job)."""
    events = []
    for step in range(1, STEPS + 1):
        for r in (0, 1):
            if every_rank_trains_all:
                start = (step - 1) * 2 * PER_RANK
                spans = [[start, start + 2 * PER_RANK]]
            else:
                start = ((step - 1) * 2 + r) * PER_RANK
                spans = [[start, start + PER_RANK]]
            events.append({"t": step + 0.01 * r, "src": f"rank-{r}", "incarnation": 0, "kind": "step_end",
                           "step": step, "loss": 1.0 / step, "samples": spans, "epoch": 0})
    events.append({"t": STEPS + 0.5, "src": "rank-0", "incarnation": 0, "kind": "run_end", "step": STEPS,
                   "digest": "d" * 64, "loss": 0.1})
    return events


def _targets(**targets: Any):
    return parse_scenario({"name": "x", "baseline": True, "targets": targets}, "x.yaml").targets


def _run(events: list[dict[str, Any]], baseline: BaselineInfo | None = None):
    return compute_metrics(events, [], RunInfo("completed", 0.0, STEPS + 1.0, STEPS, 2), baseline)


def _twin(events: list[dict[str, Any]]) -> BaselineInfo:
    return BaselineInfo(digest="d" * 64, losses={}, world_size=2, samples=baseline_samples(events))


def test_a_twin_that_trains_every_sample_twice_is_the_first_finding_and_a_wrong_reference() -> None:
    targets = _targets(data="exactly_once", final_state="matches_baseline")
    events = _job(every_rank_trains_all=True)
    twin_metrics = MetricsRecord.of(_run(events))
    assert twin_metrics.data_duplicated == 80  # each of the 80 samples once more than once

    twin = judge_twin(targets, twin_metrics)
    (miss,) = twin
    assert (miss.name, miss.ok, miss.twin) == ("data", False, True)
    assert miss.reason == ("fault-free twin: data exactly_once: 79 samples duplicated > 0; first in epoch 0: 0 lost, "
                           "79 duplicated of 80 (not counting up to 1 per epoch: a sampler's padding); the job's own bug before "
                           "any fault (the twin ran none)")

    # The faulted run reproduces the twin exactly: against it, nothing is wrong...
    verdict = judge(targets, _run(events, _twin(events)), twin=twin)
    assert not verdict.passed
    assert verdict.reasons()[0] == miss.reason  # ...but the twin's own miss comes first
    compared = {c.name: c for c in verdict.checks if not c.twin}
    assert compared["data"].ok and compared["final_state"].ok
    for name in ("data", "final_state"):
        assert compared[name].wrong_reference
        assert (compared[name].reason or "").endswith("[against a wrong reference: the fault-free twin itself missed data]")
    assert verdict.twin_misses == [verdict.checks[0]]


def test_a_sound_twin_changes_nothing() -> None:
    targets = _targets(data="exactly_once")
    events = _job(every_rank_trains_all=False)
    twin = judge_twin(targets, MetricsRecord.of(_run(events)))
    assert [(c.name, c.ok, c.twin) for c in twin] == [("data", True, True)]
    assert twin[0].reason == "fault-free twin: data exactly_once: 80 samples trained, 0 lost, 0 duplicated over 1 epoch(s)"
    verdict = judge(targets, _run(events, _twin(events)), twin=twin)
    assert verdict.passed and not any(c.twin for c in verdict.checks)  # the twin's passes are its record's
    assert not any(c.wrong_reference for c in verdict.checks)


def test_a_sampler_padding_is_not_the_twins_bug_but_more_is() -> None:
    twin = MetricsRecord.of(_run(_job(every_rank_trains_all=False)))
    (epoch,) = twin.data_epochs or []
    padded = twin.model_copy(update={"world_size": 4, "data_duplicated": 3, "data_epochs": [dict(epoch, duplicated=3)]})
    assert judge_twin(_targets(data="exactly_once"), padded)[0].ok  # up to world size - 1 per epoch
    more = padded.model_copy(update={"data_duplicated": 4, "data_epochs": [dict(epoch, duplicated=4)]})
    assert "1 samples duplicated > 0" in (judge_twin(_targets(data="exactly_once"), more)[0].reason or "")


def test_stale_checkpoints_and_health_of_the_twin_are_judged_and_unmeasured_ones_are_left_alone() -> None:
    twin = MetricsRecord.of(_run(_job(every_rank_trains_all=False)))
    stale = twin.model_copy(update={"stale_checkpoints": 1, "healthy": False,
                                    "health_problem": "loss is not finite from step 7 on",
                                    "stale_checkpoint_list": [{"step": 5, "holds_step": 6}]})
    checks = judge_twin(_targets(stale_checkpoints={"max": 0}, data="exactly_once"), stale)
    assert [(c.name, c.ok) for c in checks] == [("data", True), ("stale_checkpoints", False),
                                                ("training_health", False)]
    assert (checks[1].reason or "").startswith("fault-free twin: stale checkpoints 1 > target 0 (step 5 holds step 6's state)")
    # a twin that measured no freshness (no digests) leaves the faulted run's check to say why
    assert judge_twin(_targets(stale_checkpoints={"max": 0}), twin) == []


def test_the_record_and_its_summary_lead_with_the_twins_finding() -> None:
    targets = _targets(data="exactly_once")
    events = _job(every_rank_trains_all=True)
    twin = judge_twin(targets, MetricsRecord.of(_run(events)))
    verdict = judge(targets, _run(events, _twin(events)), twin=twin)
    record = RunRecord.model_validate({
        "scenario": {"name": "x"}, "status": "completed", "verdict": verdict.model_dump(),
        "baseline": BaselineRef(status="completed", checks=twin).model_dump()})
    again = RunRecord.from_dict({**record.to_dict(), "schema_version": 2})
    assert again.baseline is not None and again.baseline.misses[0].twin
    assert again.verdict is not None and again.verdict.checks[0].twin
    finding = again.twin_finding
    assert finding is not None and finding.startswith("The fault-free twin missed 1 correctness target(s) before any fault (data)")
    summary = render_summary(again)
    assert summary.index(finding) < summary.index("fault-free twin: data exactly_once")


def test_a_twin_miss_flags_only_the_comparisons_it_makes_wrong() -> None:
    targets = _targets(data="exactly_once", stale_checkpoints={"max": 0}, final_state="matches_baseline")
    events = _job(every_rank_trains_all=False)
    base = _twin(events)
    faulted = _run(events, base)
    faulted.stale_checkpoints = 0
    sound = MetricsRecord.of(_run(events))

    def flagged(twin: MetricsRecord) -> dict[str, bool]:
        verdict = judge(targets, faulted, twin=judge_twin(targets, twin))
        return {c.name: c.wrong_reference for c in verdict.checks if not c.twin and c.name in (
            "data", "stale_checkpoints", "final_state")}

    # its own stale checkpoints leave its step digests and final weights the training's
    assert flagged(sound.model_copy(update={"stale_checkpoints": 2})) == {
        "data": False, "stale_checkpoints": False, "final_state": False}
    # a twin whose training is not healthy is no reference for anything
    assert flagged(sound.model_copy(update={"stale_checkpoints": 0, "healthy": False,
                                            "health_problem": "the final weights hold NaN or Inf"})) == {
        "data": True, "stale_checkpoints": True, "final_state": True}
