"""``cleanup`` and ``cleanup --check`` on runs left behind by a dead controller, and never on
a live one. Registry entries and resources are real files; the "dead controller" is a
controller tag naming no live process. Each test's sweep is confined to what it made
(``own_machine``): the shared temp directory is the test's own, so runs beside it keep theirs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from chaos.cli import cli
from chaos.runfiles.resources import OWNER_FILE, RunResources, scratch_base, tmp_dir_for
from chaos.runfiles.rollback import active_runs, live_dir, register_run, state_dir, unregister_run
from chaos.runner.cleanup import cleanup_runs, find_leftovers
from chaos.util.procs import controller_tag


@pytest.fixture(autouse=True)
def state(tmp_path: Path, own_machine: Path) -> Path:
    return tmp_path / "state"


def _left_run(tmp_path: Path, run_id: str, live: bool) -> Path:
    """A run with one node-local directory, registered by a controller that is (not) alive."""
    run_dir = tmp_path / run_id
    RunResources(run_id, str(run_dir)).acquire(
        "scratch_dir", {"path": os.path.join(scratch_base(), run_id, "node-0")})
    tag = controller_tag() if live else "999999999:1"
    (Path(state_dir()) / f"{run_id}.json").write_text(json.dumps(
        {"run_id": run_id, "run_dir": str(run_dir), "pid": os.getpid(), "controller": tag}))
    return Path(scratch_base()) / run_id / "node-0"


def test_check_lists_a_dead_runs_resources_and_changes_nothing(tmp_path: Path) -> None:
    left = _left_run(tmp_path, "trainchaos-dead", live=False)
    found = find_leftovers()
    assert found[0].startswith("run trainchaos-dead") and "1 resource(s) not released" in found[0]
    assert any(str(left) in line for line in found)
    assert len([x for x in found if str(left) in x]) == 1, "listed once, under its run"
    result = CliRunner().invoke(cli, ["cleanup", "--check"])
    assert result.exit_code == 1 and "trainchaos-dead" in result.output
    assert left.is_dir()


def test_cleanup_removes_a_dead_runs_resources_and_then_check_is_clean(tmp_path: Path) -> None:
    left = _left_run(tmp_path, "trainchaos-dead", live=False)
    report = cleanup_runs([])
    assert report.failures == []
    assert "trainchaos-dead: released 1 resource(s)" in report.lines
    assert not left.exists() and active_runs() == []
    assert find_leftovers() == []
    assert CliRunner().invoke(cli, ["cleanup", "--check"]).exit_code == 0


def test_a_live_run_is_never_touched(tmp_path: Path) -> None:
    left = _left_run(tmp_path, "trainchaos-live", live=True)
    report = cleanup_runs([])
    assert any("controller is still running; skipped" in line for line in report.lines)
    assert left.is_dir() and [r["run_id"] for r in active_runs()] == ["trainchaos-live"]
    assert find_leftovers() == [], "a live run's resources are not leftovers"


def test_an_unregistered_leftover_is_found_by_its_name_and_removed(tmp_path: Path) -> None:
    stray = Path(scratch_base()) / "trainchaos-forgotten" / "node-3"
    stray.mkdir(parents=True)
    assert any("trainchaos-forgotten" in line for line in find_leftovers())
    report = cleanup_runs([])
    assert any("removed leftover scratch_dir" in line for line in report.lines), report.lines
    assert not stray.parent.exists()
    assert find_leftovers() == []


def test_a_temp_dir_in_the_shared_tmp_is_a_leftover_only_when_its_controller_is_gone(tmp_path: Path) -> None:
    """Node temp dirs live in the machine's shared temp dir, where runs of other state dirs
    keep theirs too: ownership comes from the owner file, not from this registry."""
    live = RunResources("trainchaos-0a0a0a0a01", str(tmp_path / "live"))
    live.acquire("scratch_dir", {"path": tmp_dir_for("trainchaos-0a0a0a0a01", 0)})
    dead_path = Path(tmp_dir_for("trainchaos-0a0a0a0a02", 1))
    RunResources("trainchaos-0a0a0a0a02", str(tmp_path / "dead")).acquire("scratch_dir", {"path": str(dead_path)})
    (dead_path / OWNER_FILE).write_text(json.dumps({"run_id": "trainchaos-0a0a0a0a02", "controller": "999999999:1"}))
    try:
        found = find_leftovers()
        assert any(str(dead_path) in line for line in found), found
        assert not any("trainchaos-0a0a0a0a01" in line for line in found), "a live run's dir is no leftover"
        cleanup_runs([])
        assert not dead_path.exists() and Path(tmp_dir_for("trainchaos-0a0a0a0a01", 0)).is_dir()
    finally:
        assert live.release_all() == []
        assert not Path(tmp_dir_for("trainchaos-0a0a0a0a01", 0)).exists()


def test_a_live_run_of_another_state_dir_is_no_leftover_and_is_never_touched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run registered in another state dir (another user's, a test's beside this one) is
    invisible to this registry; its live mark says its controller runs, so what a kind finds
    of it by name is neither listed nor removed. Once the controller is gone, it is both."""
    import chaos.runner.cleanup
    from chaos.runfiles.resources import Leftover

    class Named:  # a kind that knows a run only by the name of what it made (a cgroup, a netns)
        kind = "named"
        removed: list[str] = []

        @classmethod
        def scan(cls) -> list[Leftover]:
            return [Leftover(cls.kind, "trainchaos-elsewhere-thing", "trainchaos-elsewhere", {})]

        @classmethod
        def destroy(cls, spec: dict, details: dict) -> None:
            cls.removed.append("trainchaos-elsewhere")

    monkeypatch.setattr(chaos.runner.cleanup, "known_kinds", lambda: {Named.kind: Named})
    monkeypatch.setenv("TRAINCHAOS_STATE_DIR", str(tmp_path / "other-state"))
    register_run("trainchaos-elsewhere", str(tmp_path / "elsewhere"))  # this process: alive
    monkeypatch.setenv("TRAINCHAOS_STATE_DIR", str(tmp_path / "state"))
    assert active_runs() == [], "not in this state dir's registry"
    assert find_leftovers() == []
    assert not any("elsewhere" in line for line in cleanup_runs([]).lines) and Named.removed == []

    mark = Path(live_dir()) / "trainchaos-elsewhere.json"
    mark.write_text(json.dumps({"run_id": "trainchaos-elsewhere", "controller": "999999999:1"}))
    assert find_leftovers() == ["named trainchaos-elsewhere-thing (run trainchaos-elsewhere)"]
    cleanup_runs([])
    assert Named.removed == ["trainchaos-elsewhere"] and not mark.exists(), "the dead mark is pruned"
    unregister_run("trainchaos-elsewhere")


def test_a_fault_record_naming_no_backend_is_one_clear_failure_and_an_unapplied_one_is_reverted(
        tmp_path: Path) -> None:
    """A record of a Slurm node change that names no backend (a pre-release journal) cannot
    be undone: cleanup says which fault of which run and why, in one line, exit 3, and goes
    on. An ``apply`` whose inject never returned its record took nothing out: reverted."""
    from chaos.runfiles.rollback import FaultJournal
    from chaos.runfiles.rundir import RunDir

    _left_run(tmp_path, "trainchaos-old", live=False)
    journal = FaultJournal(RunDir(str(tmp_path / "trainchaos-old")).fault_journal)
    journal.apply("f0-drain_node", "drain_node", {"nodes": [1]})
    journal.applied("f0-drain_node", {"node_states": [{"slurm_node": "n2", "state": "DRAIN"}], "pids": []})
    journal.apply("f1-container_pause", "container_pause", {"nodes": [0]})  # killed mid-inject
    result = CliRunner().invoke(cli, ["cleanup"])
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    assert ("FAILED: trainchaos-old: cannot revert f0-drain_node (drain_node): its fault journal record "
            "names no backend") in result.output
    assert "trainchaos-old: reverted f1-container_pause (container_pause)" in result.output
    assert "trainchaos-old: released 1 resource(s)" in result.output, "the rest is still undone"
