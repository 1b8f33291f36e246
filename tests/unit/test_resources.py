"""Run-scoped resources: journaled before they exist, torn down newest first, past failures,
and from the journal alone after a crash. Real directories and a real helper process."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from chaos.errors import ToolError
from chaos.runfiles.resources import (
    ResourceKind,
    RunResources,
    pending_resources,
    register_kind,
    release_records,
    scratch_base,
)
from chaos.runfiles.rollback import read_records
from chaos.util.procs import process_state

RUN_ID = "trainchaos-unit-resources"


@pytest.fixture(autouse=True)
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def _scratch(node: int) -> str:
    return os.path.join(scratch_base(), RUN_ID, f"node-{node}")


_order: list[str] = []


@register_kind
class _Flaky(ResourceKind):
    """Records the order of teardown; ``fail`` in its spec makes destroy raise."""

    kind: ClassVar[str] = "unit_flaky"

    @classmethod
    def create(cls, run_id: str, spec: dict[str, Any]) -> dict[str, Any]:
        if spec.get("fail_create"):
            raise OSError("device busy")
        return {"made": spec["name"]}

    @classmethod
    def destroy(cls, spec: dict[str, Any], details: dict[str, Any]) -> None:
        _order.append(spec["name"])
        if spec.get("fail"):
            raise OSError("still mounted")

    @classmethod
    def exists(cls, spec: dict[str, Any], details: dict[str, Any]) -> bool:
        return False


def test_journal_first_then_create_then_teardown_in_reverse(tmp_path: Path) -> None:
    res = RunResources(RUN_ID, str(tmp_path / "run"))
    res.acquire("scratch_dir", {"path": _scratch(0)})
    res.acquire("scratch_dir", {"path": _scratch(1)})
    assert os.path.isdir(_scratch(0)) and os.path.isdir(_scratch(1))
    ops = [(r["op"], r["id"]) for r in read_records(res.path)]
    assert ops == [("create", 0), ("created", 0), ("create", 1), ("created", 1)]

    assert res.release_all() == []
    assert not os.path.exists(_scratch(0)) and not os.path.exists(_scratch(1))
    assert not os.path.exists(os.path.dirname(_scratch(0))), "the run's scratch parent goes too"
    destroyed = [r["id"] for r in read_records(res.path) if r["op"] == "destroyed"]
    assert destroyed == [1, 0]
    assert pending_resources(res.path) == []


def test_teardown_goes_on_past_a_failure_and_reports_it(tmp_path: Path) -> None:
    _order.clear()
    res = RunResources(RUN_ID, str(tmp_path / "run"))
    for name, fail in (("a", False), ("b", True), ("c", False)):
        res.acquire("unit_flaky", {"name": name, "fail": fail})
    failures = res.release_all()
    assert _order == ["c", "b", "a"]
    assert len(failures) == 1 and "unit_flaky b: still mounted" in failures[0]
    assert [p["spec"]["name"] for p in pending_resources(res.path)] == ["b"]


def test_a_failed_create_is_still_torn_down_as_it_may_be_half_made(tmp_path: Path) -> None:
    _order.clear()
    res = RunResources(RUN_ID, str(tmp_path / "run"))
    with pytest.raises(ToolError, match="could not create unit_flaky x: device busy"):
        res.acquire("unit_flaky", {"name": "x", "fail_create": True})
    assert [p["spec"]["name"] for p in pending_resources(res.path)] == ["x"]
    assert res.release_all() == [] and _order == ["x"]


def test_after_a_crash_the_journal_alone_tears_down_a_helper_process(tmp_path: Path) -> None:
    res = RunResources(RUN_ID, str(tmp_path / "run"))
    details = res.acquire("helper_process", {"name": "sleeper",
                                             "argv": [sys.executable, "-c", "import time; time.sleep(60)"]})
    pid = details["pid"]
    assert process_state(pid) not in (None, "Z")
    # The controller "dies" here: a new reader has only the file.
    pending = pending_resources(res.path)
    assert [p["kind"] for p in pending] == ["helper_process"]
    assert release_records(res.path, pending) == []
    assert process_state(pid) in (None, "Z")
    assert pending_resources(res.path) == []


def test_scratch_dirs_outside_the_projects_naming_are_refused(tmp_path: Path) -> None:
    res = RunResources(RUN_ID, str(tmp_path / "run"))
    victim = tmp_path / "users-data"
    with pytest.raises(ToolError, match="refusing to own"):
        res.acquire("scratch_dir", {"path": str(victim)})
    victim.mkdir()
    assert res.release_all() == []
    assert victim.is_dir(), "a path without the project's prefix is never removed"


@pytest.mark.skipif(os.geteuid() != 0, reason="a directory of another user needs root to make")
def test_a_scratch_dir_another_user_made_first_is_refused(tmp_path: Path) -> None:
    # A node's TMPDIR is /tmp/<run id>-n<node>: a local user who saw the run id could make it
    # first and have the run's files (its owner file first) written where they choose.
    squatted = tmp_path / f"{RUN_ID}-n0"
    squatted.mkdir()
    os.chown(squatted, 65534, 65534)
    res = RunResources(RUN_ID, str(tmp_path / "run"))
    with pytest.raises(ToolError, match="another user owns it"):
        res.acquire("scratch_dir", {"path": str(squatted)})
    assert list(squatted.iterdir()) == []
