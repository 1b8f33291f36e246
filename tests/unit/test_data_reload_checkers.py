"""The exactly-once data checker and the reload checker (docs/checkers.md): what the probe
reports, how the replay against the loaded checkpoints counts lost, duplicated and
rolled-back-only samples, what a restart owes (silent rollback), and the verdict's words."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos import probe
from chaos.errors import ChaosError
from chaos.metrics import BaselineInfo, RunInfo, compute_metrics
from chaos.metrics.families.data import baseline_samples, data_metrics
from chaos.metrics.families.reload import reload_metrics
from chaos.runner.verdict import judge
from chaos.scenario.load import parse_scenario

GB = 4  # global batch: 2 ranks x 2 samples


class Job:
    """A fake 2-rank harness job's events, in time order."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add(self, src: str, inc: int, kind: str, **fields: Any) -> None:
        self.events.append({"t": float(len(self.events) + 1), "src": src, "incarnation": inc, "kind": kind, **fields})

    def steps(self, inc: int, steps: range, cursor_of=lambda s: s - 1, epoch: int | None = None) -> None:
        for s in steps:
            c = cursor_of(s)
            for r in range(2):
                extra = {} if epoch is None else {"epoch": epoch}
                self.add(f"rank-{r}", inc, "step_end", step=s, loss=1.0,
                         samples=[[c * GB + 2 * r, c * GB + 2 * r + 2]], **extra)

    def load(self, inc: int, step: int, **fields: Any) -> None:
        for r in range(2):
            self.add(f"rank-{r}", inc, "ckpt_load", step=step, **fields)


def twin(last: int) -> dict[int, Any]:
    job = Job()
    job.steps(0, range(1, last + 1))
    return baseline_samples(job.events)


def test_a_restart_that_rewinds_the_data_with_the_model_trains_each_sample_once() -> None:
    job = Job()
    job.steps(0, range(1, 8))  # killed after step 7, checkpoint at 5
    job.load(1, 5)
    job.steps(1, range(6, 11))
    for baseline in (None, twin(10)):
        m = data_metrics(job.events, baseline)
        assert (m["data_samples"], m["data_lost"], m["data_duplicated"], m["data_rolled_back_only"]) == (40, 0, 0, 0)


def test_a_sampler_that_starts_over_duplicates_the_head_and_loses_the_tail() -> None:
    """torchft #58/#186: the model resumes from step 5, the data from batch 0."""
    job = Job()
    job.steps(0, range(1, 8))
    job.load(1, 5)
    job.steps(1, range(6, 11), cursor_of=lambda s: s - 6)
    m = data_metrics(job.events, twin(10))
    assert (m["data_lost"], m["data_duplicated"]) == (20, 20)
    assert m["data_rolled_back_only"] == 8  # steps 6-7 of the killed incarnation
    assert m["data_epochs"] == [{"epoch": 0, "expected": 40, "trained": 40, "lost": 20, "duplicated": 20,
                                 "rolled_back_only": 8}]
    # Without the twin the tail no process ever reported cannot be missed; the rest is seen.
    alone = data_metrics(job.events)
    assert (alone["data_lost"], alone["data_duplicated"], alone["data_rolled_back_only"]) == (8, 20, 8)


def test_a_sampler_that_keeps_going_past_the_checkpoint_loses_what_the_dead_incarnation_trained() -> None:
    """The data position is not rewound to the checkpoint: batches 5-6 were trained only by
    the incarnation whose work was rolled back."""
    job = Job()
    job.steps(0, range(1, 8))
    job.load(1, 5)
    job.steps(1, range(6, 11), cursor_of=lambda s: s + 1)
    m = data_metrics(job.events, twin(10))
    assert (m["data_lost"], m["data_rolled_back_only"], m["data_duplicated"]) == (8, 8, 0)


def test_a_restart_from_scratch_without_a_load_event_still_rolls_back() -> None:
    job = Job()
    job.steps(0, range(1, 4))
    job.steps(1, range(1, 6))  # no checkpoint yet: started over, reporting no load
    m = data_metrics(job.events, twin(5))
    assert (m["data_lost"], m["data_duplicated"], m["data_rolled_back_only"]) == (0, 0, 0)


def test_epochs_are_counted_apart_and_the_twins_own_repeats_are_expected() -> None:
    """A DistributedSampler pads an epoch by repeating samples: the twin repeats them too."""
    job = Job()
    for inc, epoch in ((0, 0), (0, 1)):
        for r in range(2):
            job.add(f"rank-{r}", inc, "step_end", step=epoch + 1, epoch=epoch, samples=[[0, 3]] if r == 0 else [[2, 5]])
    base = baseline_samples(job.events)
    m = data_metrics(job.events, base)
    assert (m["data_lost"], m["data_duplicated"]) == (0, 0)
    assert [r["epoch"] for r in m["data_epochs"]] == [0, 1]
    assert data_metrics(job.events)["data_duplicated"] == 2  # sample 2, once per epoch, without the twin


def test_no_sample_reports_leave_the_data_metrics_unknown() -> None:
    job = Job()
    job.add("rank-0", 0, "step_end", step=1, loss=1.0)
    assert set(data_metrics(job.events).values()) == {None}


def test_a_restart_that_ignores_a_durable_checkpoint_is_a_silent_rollback() -> None:
    job = Job()
    job.steps(0, range(1, 6))
    job.add("rank-0", 0, "ckpt_save_end", step=2, durable=True)
    job.add("rank-0", 0, "ckpt_save_end", step=4, durable=True)
    job.add("rank-0", 1, "rank_start")
    restarts = [{"t": job.events[-1]["t"], "incarnation": 1, "resumed_from": 2}]
    m = reload_metrics(job.events, restarts, None)
    assert m["silent_rollback_steps"] == 2
    assert m["silent_rollbacks"] == [{"incarnation": 1, "resumed_from": 2, "newest_durable": 4}]
    # The load said why it passed over step 4 (a torn checkpoint): nothing silent.
    job.load(1, 2, skipped=[["/ckpt/step-00000004", "checksum mismatch"]])
    assert reload_metrics(job.events, restarts, None)["silent_rollback_steps"] == 0


def test_an_unfsynced_checkpoint_is_not_owed_to_a_restart() -> None:
    job = Job()
    job.add("rank-0", 0, "ckpt_save_end", step=2, durable=True)
    job.add("rank-0", 0, "ckpt_save_end", step=4, durable=False)
    restarts = [{"t": 10.0, "incarnation": 1, "resumed_from": 2}]
    assert reload_metrics(job.events, restarts, None)["silent_rollback_steps"] == 0


def test_reload_sanity_reads_the_reload_event_and_the_twins_loss_after_the_restart() -> None:
    job = Job()
    job.add("rank-0", 1, "reload", step=4, weights_finite=False)
    job.add("rank-1", 1, "reload", step=4, weights_finite=False)
    job.add("rank-0", 1, "step_end", step=5, loss=2.2)
    restarts = [{"t": 1.0, "incarnation": 1, "resumed_from": 4}]
    m = reload_metrics(job.events, restarts, {"5": 2.0, 6: 1.9})
    assert m["reload_nonfinite"] == 1  # one restart, however many ranks say so
    assert m["reload_loss_dev"] == pytest.approx(0.1) and m["reload_loss_steps"] == [5]
    assert reload_metrics(job.events, restarts, None)["reload_loss_dev"] is None


def _verdict(targets: dict[str, Any], events: list[dict[str, Any]], baseline: BaselineInfo | None = None):
    scenario = parse_scenario({"name": "x", "targets": targets, "baseline": baseline is not None}, "x.yaml")
    metrics = compute_metrics(events, [], RunInfo("completed", 0.0, 100.0, 10, 2), baseline)
    return judge(scenario.targets, metrics), metrics


def test_the_verdict_names_what_was_lost_and_duplicated() -> None:
    job = Job()
    job.steps(0, range(1, 8))
    job.load(1, 5)
    job.steps(1, range(6, 11), cursor_of=lambda s: s - 6)
    base = BaselineInfo(digest=None, losses={}, world_size=2, samples=twin(10))
    verdict, _ = _verdict({"data": "exactly_once"}, job.events, base)
    check = next(c for c in verdict.checks if c.name == "data")
    assert not check.ok
    assert check.reason == ("data exactly_once: 20 samples lost (8 trained only by a rolled-back incarnation) > 0, "
                            "20 samples duplicated > 0; first in epoch 0: 20 lost, 20 duplicated of 40 "
                            "(against the fault-free twin)")
    at_least, _ = _verdict({"data": "at_least_once"}, job.events, base)
    assert not next(c for c in at_least.checks if c.name == "data").ok
    bounded, _ = _verdict({"data": {"max_lost": 20, "max_duplicated": 20}}, job.events, base)
    assert next(c for c in bounded.checks if c.name == "data").ok


def test_a_data_target_on_a_workload_that_reports_nothing_fails_saying_so() -> None:
    job = Job()
    job.add("rank-0", 0, "step_end", step=10, loss=1.0)
    verdict, _ = _verdict({"data": "exactly_once"}, job.events)
    assert "no sample reports" in verdict.reasons()[0]


@pytest.mark.parametrize(("target", "message"), [
    ("once", "targets.data: expected exactly_once, at_least_once or {max_lost: N, max_duplicated: N}"),
    ({}, "targets.data: give max_lost and/or max_duplicated"),
    ({"max_lst": 1}, "targets.data.max_lst: unknown key 'max_lst'; did you mean 'max_lost'?"),
    ({"max_duplicated": -1}, "targets.data.max_duplicated: -1 is out of range: must be >= 0"),
])
def test_a_bad_data_target_is_one_located_error(target: Any, message: str) -> None:
    with pytest.raises(ChaosError, match="x.yaml: " + message.replace("{", r"\{").replace("}", r"\}")
                       .replace("?", r"\?").replace("(", r"\(")) as err:
        parse_scenario({"name": "x", "targets": {"data": target}}, "x.yaml")
    assert err.value.exit_code == 2


# -- the probe's side ----------------------------------------------------------------------


def _step_ends(events_dir: Path) -> list[dict[str, Any]]:
    (path,) = events_dir.glob("*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if '"step_end"' in line]


def test_samples_ride_on_the_steps_own_event_as_merged_ranges(tmp_path: Path) -> None:
    pr = probe.Probe(str(tmp_path), "rank-1", 0)
    pr.samples(range(4_000_000, 8_000_000))  # never expanded
    pr.step_end(1, 0.5)
    pr.samples([7, 3, 4, 5], epoch=2)
    pr.samples([8])  # a second micro-batch of the same step
    pr.step_end(2, 0.4)
    pr.step_end(3, 0.3)  # nothing reported for it
    pr.close()
    ends = _step_ends(tmp_path)
    assert ends[0]["samples"] == [[4_000_000, 8_000_000]] and "epoch" not in ends[0]
    assert ends[1]["samples"] == [[3, 6], [7, 9]] and ends[1]["epoch"] == 2
    assert "samples" not in ends[2]


def test_a_tracked_dataset_reports_what_the_loader_fetched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    pr = probe.Probe(str(tmp_path), "rank-0", 0)
    monkeypatch.setattr(probe, "_probe", pr)
    data = torch.arange(10.0).reshape(10, 1)
    sampler = torch.utils.data.SequentialSampler(range(10))
    loader = torch.utils.data.DataLoader(probe.track(data), batch_size=3, sampler=sampler)
    for step, batch in enumerate(loader, start=1):
        assert batch.shape[1] == 1  # the user's batches are untouched
        probe.step_end(step, 0.0)
    pr.close()
    assert [e["samples"] for e in _step_ends(tmp_path)] == [[[0, 3]], [[3, 6]], [[6, 9]], [[9, 10]]]


def test_track_refuses_what_is_not_a_map_style_dataset() -> None:
    with pytest.raises(TypeError, match="map-style dataset"):
        probe.track(iter(range(3)))


def test_the_run_report_draws_the_samples_lane() -> None:
    from chaos.report.run_page import render_run_html
    from chaos.report.runview import build_run_view
    from chaos.runfiles.record import RunRecord

    job = Job()
    job.steps(0, range(1, 8))
    job.load(1, 5)
    job.steps(1, range(6, 11), cursor_of=lambda s: s - 6)
    journal = RunRecord.from_dict({"schema_version": 2, "scenario": {"name": "x"}, "status": "completed",
                                   "metrics": {"t_start": 0.0, "t_end": 100.0, "data_lost": 20}})
    view = build_run_view(journal, job.events)
    assert [c for c in view.coverage if c[1] == 0] == [
        (1, 0, "duplicate"), (2, 0, "duplicate"), (3, 0, "duplicate"), (4, 0, "duplicate"), (5, 0, "duplicate"),
        (6, 0, "rolled_back"), (7, 0, "rolled_back")]
    page = render_run_html(journal, job.events)
    assert '<h2 id="samples">Sample coverage</h2>' in page
    assert "20 expected samples never trained by the surviving run" in page
    assert "step 6, incarnation 0: trained, then rolled back" in page


def test_compare_gates_the_checkers(tmp_path: Path) -> None:
    """`trainchaos compare`: samples lost where the baseline suite lost none is a regression."""
    from chaos.gate import compare_suites, load_suite_record, load_tolerances, render_markdown
    from chaos.report import write_suite_report
    from chaos.runfiles.record import RunRecord

    def suite(path: Path, lost: int, rollback: int) -> str:
        journals = [{"schema_version": 2, "scenario": {"name": "kill-rank", "targets": {}}, "repeat_index": i, "status": "completed",
                     "run_dir": f"/r/suite/kill-rank/{i}", "wall_s": 40.0, "faults": [],
                     "metrics": {"data_lost": lost, "data_duplicated": 0, "reload_nonfinite": 0,
                                 "silent_rollback_steps": rollback, "wall_s": 40.0},
                     "verdict": {"passed": True, "checks": []}} for i in range(3)]
        write_suite_report(str(path), [RunRecord.from_dict(j) for j in journals], "suite")
        return str(path)

    base, cur = suite(tmp_path / "a", 0, 0), suite(tmp_path / "b", 80, 10)
    comparison = compare_suites(load_suite_record(base), load_suite_record(cur), load_tolerances(None), base, cur)
    assert [r.metric for r in comparison.regressions] == ["data_lost", "silent_rollback_steps"]
    assert "| kill-rank | `data_lost` | 0 | 80 |" in render_markdown(comparison)


def test_a_tracked_dataset_in_a_loader_worker_reports_nothing_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """A worker process cannot write into the rank's event stream: no report is better than
    one the checker would take for the rank's."""
    import torch

    pr = probe.Probe(str(tmp_path), "rank-0", 0)
    monkeypatch.setattr(probe, "_probe", pr)
    loader = torch.utils.data.DataLoader(probe.track(torch.arange(6.0)), batch_size=3, num_workers=1,
                                         multiprocessing_context="fork")
    assert [b.tolist() for b in loader] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    probe.step_end(1, 0.0)
    pr.close()
    assert "samples" not in _step_ends(tmp_path)[0]
    assert "samples fetched in a DataLoader worker are not reported" in capfd.readouterr().err
