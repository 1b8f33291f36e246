"""``run --crash-points`` has one judge: what ``--dry-run`` accepts, the real run does not
refuse later for the same reason, and what it refuses it refuses before the trace (the twin) runs
(``chaos.runner.crashsweep.sweep_plan``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chaos.runner.crashsweep as crashsweep
from chaos.errors import EXIT_BAD_INPUT, ScenarioError

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(str(p) for p in (REPO / "scenarios").rglob("*.yaml") if "scale" not in p.parts)
TRACE = [{"kind": "storage_boundary", "seq": k, "op": "fsync", "path": f"f{k}", "t": 0.0} for k in (1, 2, 3)]


class _Started(Exception):
    """The real run reached its first process (the trace, the twin): everything before it accepted."""


def _real_run_accepts(path: str, save_step: int | None, points: list[int] | None,
                      monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[bool, str]:
    """The real sweep up to the moment it would start the trace (the twin); then every run
    it would start is built as the real sweep builds it (processes replaced by stand-ins),
    so that a refusal after the trace is seen too."""
    started: list[str] = []

    def once(scenario: Any, *_args: Any, **_kwargs: Any) -> Any:
        started.append(scenario.name)
        return SimpleNamespace(status="completed", run_dir=str(tmp_path))

    monkeypatch.setattr(crashsweep, "twin_reference", lambda *_a: SimpleNamespace(digests={}, digest=None))
    monkeypatch.setattr(crashsweep, "run_scenario_once", once)
    monkeypatch.setattr(crashsweep, "read_events", lambda _path: TRACE)
    monkeypatch.setattr(crashsweep, "RunDir", lambda _d: SimpleNamespace(events="", crash_image=str(tmp_path / "none")))
    try:
        crashsweep.run_sweeps([path], str(tmp_path / "out"), save_step, False, lambda _t: None, points)
    except ScenarioError as exc:
        assert exc.exit_code == EXIT_BAD_INPUT
        assert not started, f"refused after starting {started}: {exc}"
        return False, str(exc)
    assert started, "the real sweep started nothing"
    return True, ""


def _dry_run_accepts(path: str, save_step: int | None, points: list[int] | None, tmp_path: Path) -> tuple[bool, str]:
    try:
        crashsweep.run_sweeps([path], str(tmp_path / "dry"), save_step, True, lambda _t: None, points)
    except ScenarioError as exc:
        return False, str(exc)
    return True, ""


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(SHIPPED),
       save_step=st.one_of(st.none(), st.sampled_from([10, 20, 40])),
       points=st.one_of(st.none(), st.lists(st.integers(0, 20_000), min_size=1, max_size=3)))
def test_dry_run_accepts_exactly_what_the_real_run_accepts_before_starting(
        path: str, save_step: int | None, points: list[int] | None, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    dry, why_dry = _dry_run_accepts(path, save_step, points, tmp_path)
    real, why_real = _real_run_accepts(path, save_step, points, monkeypatch, tmp_path)
    assert dry == real, f"dry run {'accepted' if dry else 'refused: ' + why_dry}; real run " \
                        f"{'accepted' if real else 'refused: ' + why_real}"
    assert why_dry == why_real


@pytest.mark.parametrize(("backend", "workload", "where"), [
    ("netns", "harness: {steps: 30, checkpoint: {every_steps: 10}}", "crash_point.type"),
    ("local", "harness: {steps: 30, checkpoint: {every_steps: 10}}", None),
])
def test_a_backend_the_storage_layer_cannot_serve_is_refused_by_the_dry_run(
        backend: str, workload: str, where: str | None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The case that spent a twin's time: a scenario on netns passed ``--dry-run``, and the
    real run exited 2 only when it built the trace run, after the twin."""
    from click.testing import CliRunner

    from chaos.cli import cli

    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"name: s\nbackend: {backend}\nworkload: {{{workload}}}\n"
                        "topology: {nodes: 2, ranks_per_node: 1}\nfaults: []\n")
    result = CliRunner().invoke(cli, ["run", "--crash-points", "--dry-run", "--no-preflight", str(scenario)])
    if where is None:
        assert result.exit_code == 0, result.output
        return
    assert isinstance(result.exception, ScenarioError) and result.exception.exit_code == EXIT_BAD_INPUT
    assert f"s.yaml: {where}: --crash-points cannot sweep this scenario" in str(result.exception)
    assert "set backend: local" in str(result.exception)
    real, _ = _real_run_accepts(str(scenario), None, None, monkeypatch, tmp_path)
    assert not real


def test_a_crash_after_beyond_the_arm_faults_range_is_refused_by_the_dry_run(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nworkload: {harness: {steps: 30, checkpoint: {every_steps: 10}}}\n"
                        "topology: {nodes: 2, ranks_per_node: 1}\nfaults: []\n")
    with pytest.raises(ScenarioError, match=r"s.yaml: crash_point.params.after: --crash-points cannot sweep"):
        crashsweep.run_sweeps([str(scenario)], str(tmp_path / "o"), None, True, lambda _t: None, [3, 20_000])
