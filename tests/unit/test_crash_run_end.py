"""A crash run of the durability sweep ends once its restart is judged (chaos.runner.crashend):
at the restarted writer's first state past the load, or at once when the restart fails; and
the sweep judges that state against the twin's at the same step."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from chaos.runfiles.record import RunRecord
from chaos.runner.crashend import CrashRunEnd, restart_digest
from chaos.runner.crashsweep import classify
from chaos.runner.handlers import HandlerRegistry, RunEnd, RunHandler
from chaos.runner.run import _Runner
from chaos.runner.state import RunProgress
from chaos.scenario.load import parse_scenario
from chaos.workload.base import CheckpointAudit

TWIN = {s: f"d{s}" for s in range(1, 31)}


def _ev(t: float, kind: str, **f: Any) -> dict[str, Any]:
    return {"t": t, "kind": kind, "src": f.pop("src", "rank-0"), "incarnation": f.pop("incarnation", 0), **f}


_BEFORE = [_ev(1, "ckpt_save_end", step=10), *(_ev(1 + s / 100, "step_end", step=s) for s in range(11, 21)),
           _ev(1.9, "state_digest", step=20, digest="d20"), _ev(2, "crash_point", after=1),
           _ev(2.1, "detected", src="node-0", by="node-0", reason="worker killed by signal 9")]
_RESTART = [_ev(3, "rank_start", incarnation=1), _ev(3.5, "ckpt_load", step=10, incarnation=1),
            _ev(3.6, "step_end", step=11, incarnation=1)]


def _fed(events: list[dict[str, Any]], digests: dict[int, str] = TWIN) -> CrashRunEnd:
    handler = CrashRunEnd("crash_point", digests)
    for ev in events:
        handler.event(ev)
    return handler


def test_a_crash_run_ends_once_the_restart_reports_its_state_past_the_load() -> None:
    assert _fed(_BEFORE).end() is None  # crashed, not restarted yet
    assert _fed(_BEFORE + _RESTART).end() is None  # a step, its digest not reported yet
    end = _fed(_BEFORE + _RESTART + [_ev(3.61, "state_digest", step=11, digest="d11", incarnation=1)]).end()
    assert end == RunEnd("completed", "the restart resumed from step 10 and reported its state at step 11: "
                                      "the crash run is judged")
    # Steps and digests before the crash (incarnation 0) are not the restart's.
    assert _fed(_BEFORE[:3] + [_ev(1.5, "state_digest", step=12, digest="d12")]).end() is None


def test_a_job_that_reports_no_digests_runs_on_to_its_end() -> None:
    events = _BEFORE + _RESTART + [_ev(3.61, "state_digest", step=11, digest="d11", incarnation=1)]
    assert _fed(events, digests={}).end() is None


@pytest.mark.parametrize("failure", [
    _ev(3.4, "rank_exit", code=1, reason="ValueError: no checkpoint loads", incarnation=1),
    _ev(3.4, "detected", src="node-0", by="node-0", reason="torchrun agent: worker local_rank 0 exited with code 1",
        incarnation=1),
    _ev(5.0, "rank_start", incarnation=2),
], ids=["rank_exit", "agent", "second_restart"])
def test_a_restart_that_cannot_load_ends_the_run_failed_at_once(failure: dict[str, Any]) -> None:
    end = _fed(_BEFORE + _RESTART[:1] + [failure]).end()
    assert end is not None and end.status == "failed" and "the restarted job" in end.reason


def test_neither_the_crash_itself_nor_an_agents_restart_of_the_group_is_a_failed_restart() -> None:
    # The crash's own kill is reported at incarnation 0; a rank stopped by its agent to take
    # a new member in (SIGTERM, 143) did not fail; another node's agent is not the writer's.
    events = _BEFORE + _RESTART[:1] + [
        _ev(3.2, "rank_exit", code=143, reason="terminated by torchrun (SIGTERM)", incarnation=1),
        _ev(3.3, "detected", src="node-1", by="node-1", reason="worker killed by signal 9", incarnation=1)]
    assert _fed(events).end() is None
    # After its first step past the load, the restart is judged: what follows ends nothing.
    done = _RESTART + [_ev(3.61, "state_digest", step=11, digest="d11", incarnation=1),
                       _ev(4, "rank_exit", code=1, reason="late", incarnation=1)]
    assert _fed(_BEFORE + done).end().status == "completed"  # type: ignore[union-attr]


def _journal(status: str = "completed", **metrics: Any) -> RunRecord:
    return RunRecord.from_dict({"schema_version": 2, "scenario": {"name": "crash"}, "status": status,
                                "error": None if status == "completed" else "the restarted job exited",
                                "metrics": {"final_digest": None, "stale_checkpoints": 0, **metrics}})


_ENDED = [_ev(3.7, "job_stop", src="injector", status="completed", reason="judged")]


def test_the_sweep_judges_an_early_ended_run_by_the_restarts_state_at_its_first_step() -> None:
    audit = CheckpointAudit(complete=(10,), pointer=10)
    right = _BEFORE + _RESTART + [_ev(3.61, "state_digest", step=11, digest="d11", incarnation=1)] + _ENDED
    assert restart_digest(right, "crash_point") == (11, "d11")
    assert classify(_journal(), right, audit, 20, "d30", TWIN)[:2] == (["ok"], "resumed from step 10")
    wrong = _BEFORE + _RESTART + [_ev(3.61, "state_digest", step=11, digest="d12", incarnation=1)] + _ENDED
    outcomes, detail, _ = classify(_journal(), wrong, audit, 20, "d30", TWIN)
    assert outcomes == ["wrong_result"] and "the state at step 11 after the restart differs" in detail
    # A run that ran to its end without a final digest is still judged by it.
    assert classify(_journal(), right[:-1], audit, 20, "d30", TWIN)[0] == ["wrong_result"]
    # A restart that failed fast (started over, nothing loaded) is judged as one that spent
    # torchrun's budget.
    failed = _BEFORE + _RESTART[:1] + [_ev(3.7, "job_stop", src="injector", status="failed", reason="x")]
    assert classify(_journal("failed"), failed, audit, 20, "d30", TWIN)[0] == ["lost_saved", "lost_interval", "failed"]


class _Ends(RunHandler):
    def __init__(self, end: RunEnd | None) -> None:
        self._end = end

    def end(self) -> RunEnd | None:
        return self._end


class _Broken(RunHandler):
    def end(self) -> RunEnd | None:
        raise RuntimeError("checker bug")


def test_the_first_handler_to_end_the_run_is_heard_and_a_broken_one_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    assert HandlerRegistry([RunHandler(), _Ends(None)]).end() is None
    with caplog.at_level(logging.ERROR, logger="chaos.runner.handlers"):
        end = HandlerRegistry([_Broken(), _Ends(RunEnd("failed", "a")), _Ends(RunEnd("completed", "b"))]).end()
    assert end == RunEnd("failed", "a")
    assert [r.getMessage() for r in caplog.records] == ["run handler _Broken failed in end"]


@pytest.mark.parametrize(("end", "error"), [(RunEnd("completed", "judged"), None),
                                            (RunEnd("failed", "cannot load"), "cannot load")])
def test_the_runner_ends_the_run_with_the_handlers_status(tmp_path: Path, end: RunEnd, error: str | None) -> None:
    scenario = parse_scenario({"name": "h", "seed": 1, "topology": {"nodes": 1, "ranks_per_node": 1}},
                              str(tmp_path / "h.yaml"))
    runner = _Runner(scenario, str(tmp_path / "run"), 1, True, RunProgress(), handlers=[_Ends(None)])
    assert not runner._ended_by_handler() and runner.status == "running"
    runner = _Runner(scenario, str(tmp_path / "run"), 1, True, RunProgress(), handlers=[_Ends(end)])
    assert runner._ended_by_handler()
    assert (runner.status, runner.error, runner.end_reason) == (end.status, error, end.reason)


def test_a_crash_run_has_torchruns_budget_of_one_restart_and_records_its_digests() -> None:
    from chaos.runner.crashsweep import CRASH_RUN_RESTARTS, _arm, _power_loss, _variant
    from chaos.scenario.load import load_suite

    repo = Path(__file__).resolve().parents[2]
    (scenario,) = load_suite([str(repo / "scenarios" / "checkers" / "crash-points-pointer-before-fsync.yaml")])
    assert CRASH_RUN_RESTARTS == 1
    assert _variant(scenario, "crash-03", [_arm(20, 3), _power_loss()], crash=True).topology.max_restarts == 1
    assert _variant(scenario, "trace", [_arm(20, -1)]).topology.max_restarts == scenario.topology.max_restarts
    runner = _Runner(scenario, "/nonexistent", 1, True, RunProgress(), record_digests=True)
    assert runner.record_digests and not _Runner(scenario, "/nonexistent", 1, True, RunProgress()).record_digests


def test_a_sweeps_runs_start_warm_unless_the_environment_says(monkeypatch) -> None:
    import os

    from chaos import contract
    from chaos.runner.crashsweep import sweep_starts_warm

    monkeypatch.delenv(contract.WARM_START_ENV, raising=False)
    with sweep_starts_warm():
        assert os.environ[contract.WARM_START_ENV] == "1"
    assert contract.WARM_START_ENV not in os.environ  # the controller's environment as it was
    monkeypatch.setenv(contract.WARM_START_ENV, "0")
    with sweep_starts_warm():
        assert os.environ[contract.WARM_START_ENV] == "0"
