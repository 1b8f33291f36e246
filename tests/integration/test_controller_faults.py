"""The controller's own faults, with the project's fault layer turned on itself: its output
directory (``--out``) full (ENOSPC) or failing (EIO) mid-run, a second controller given the
same run directory, and a fault journal damaged after a SIGKILL.

Each run is a real ``trainchaos run`` of a 1 x 2 job (the mlp model, paced steps). The
storage fault layer is mounted over ``--out`` by the test itself (``FuseMount``, as
test_storage_mount does) and its rules hit the controller's own files only (the fault
journal, the injector's events, the run record): the job's own writes pass, so whatever the
run ends as is about trainchaos. Expected every time: exit 3 (a tool error) naming the file
and the errno, never a verdict; every fault the run applied reverted; no process of the run
left; ``trainchaos cleanup --check`` clean.
"""

from __future__ import annotations

import errno
import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.cluster.mounts import FuseMount
from chaos.runfiles.resources import RunResources
from chaos.runfiles.rollback import FaultJournal
from chaos.runfiles.rundir import RunDir
from chaos.storage.control import MountControl
from chaos.util.procs import find_run_processes, kill_pids, process_state
from tests.integration._sigkill import sigkilled_after_apply
from tests.integration._support import TRAINCHAOS, cli_env, popen_trainchaos, run_trainchaos

pytestmark = [pytest.mark.integration, pytest.mark.machine_cleanup]

SCENARIO = """\
name: ctl
seed: 3
workload: {{harness: {{steps: 400, step_delay_s: 0.05, model: {{name: mlp}}, checkpoint: {{every_steps: 1000}},
                      failure: {{watchdog_s: 0, collective_timeout_s: 0}}}}}}
topology: {{nodes: 1, ranks_per_node: 2}}
faults:
{faults}timeout_s: 150
"""
# Rank 1 frozen from step 10 until the run ends (no watchdog: the job waits for trainchaos).
FROZEN = "  - {type: hang_rank, target: {rank: 1}, trigger: {at_step: 10}, params: {duration_s: null}}\n"
# Rank 0 frozen for a second, ``at`` s after the first step: a write of the controller's own
# (its fault journal's ``apply``, 1 s ahead) at a time the test knows, while FROZEN holds.
LATER = "  - {{type: hang_rank, target: {{rank: 0}}, trigger: {{at_time: {at}}}, params: {{duration_s: 1}}}}\n"
# The controller's own files; the job's (its events, checkpoints, logs) are left alone.
CONTROLLER_FILES = ["*/fault_journal.jsonl", "*/events/injector.*", "*/.journal.json.*"]
START_WAIT_S = 120


class Controller:
    """A ``trainchaos run`` of SCENARIO with ``--out`` on the fault layer."""

    def __init__(self, tmp: Path, out: Path, faults: str) -> None:
        self.tmp, self.out = tmp, out
        self.env = cli_env(tmp / "state")
        (tmp / "ctl.yaml").write_text(SCENARIO.format(faults=faults))
        self.run_dir = out / "ctl" / "0"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> subprocess.Popen[str]:
        self.proc = popen_trainchaos(["run", "ctl.yaml", "--out", str(self.out)], env=self.env, cwd=self.tmp,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        return self.proc

    def run_id(self) -> str:
        return str(json.loads((self.run_dir / "run.json").read_text())["run_id"])

    def wait_applied(self, fault_id: str) -> dict[str, Any]:
        """The fault journal's record of ``fault_id`` once it is in effect."""
        deadline = time.monotonic() + START_WAIT_S
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"trainchaos exited ({self.proc.returncode}) before {fault_id}:\n"
                            + "\n".join(self.proc.communicate()))
            pending = {f["fault_id"]: f for f in FaultJournal(str(self.run_dir / "fault_journal.jsonl")).pending()}
            if pending.get(fault_id, {}).get("details", {}).get("stopped_pids"):
                return pending[fault_id]
            time.sleep(0.1)
        pytest.fail(f"{fault_id} not in effect within {START_WAIT_S} s")

    def finish(self, timeout: float = 90) -> tuple[int, str, str]:
        assert self.proc is not None
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.terminate()  # SIGTERM: it reverts its faults and stops its job
            out, err = self.proc.communicate(timeout=120)
            pytest.fail(f"trainchaos did not end within {timeout} s:\n{out[-3000:]}\n{err[-3000:]}")
        return self.proc.returncode, out, err

    def cli(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return run_trainchaos(list(argv), env=self.env, cwd=self.tmp, timeout=120)


@pytest.fixture
def layer(tmp_path: Path) -> Iterator[tuple[Path, MountControl]]:
    """The fault layer mounted over an empty ``out/``; unmounted after the test."""
    run_id = f"trainchaos-{uuid.uuid4().hex[:10]}"
    resources = RunResources(run_id, str(tmp_path / "layer"))
    out = tmp_path / "out"
    out.mkdir()
    resources.acquire(FuseMount.kind, {"path": str(out), "control_dir": str(tmp_path / "control"),
                                       "fsname": f"{run_id}-out", "track_unfsynced": False})
    yield out, MountControl(str(tmp_path / "control"))
    assert resources.release_all() == []


def _fail_controller_writes(control: MountControl, rule_id: str, code: int,
                            paths: list[str] = CONTROLLER_FILES) -> None:
    control.add_rule({"rule_id": rule_id, "action": "error", "errno": code, "paths": paths,
                      "ops": ["create", "write", "fsync", "flush"]})


def _assert_nothing_left(ctl: Controller, run_id: str, faults: list[dict[str, Any]]) -> None:
    left = find_run_processes(run_id)
    assert not left, "processes left behind:\n" + "\n".join(f"{p.pid} {p.state} {p.cmdline[:100]}" for p in left)
    for fault in faults:
        for pid in fault["details"]["stopped_pids"]:
            assert process_state(pid) in (None, "Z"), f"a frozen rank (pid {pid}) is still there"
    assert not list((ctl.tmp / "state" / "active").glob("*.json")), "the run is still registered"
    check = ctl.cli("cleanup", "--check")
    assert check.returncode == 0, check.stdout + check.stderr


def _assert_tool_error(rc: int, out: str, err: str, *causes: str) -> None:
    assert rc == 3, f"exit {rc}, a tool error expected:\n{out[-3000:]}\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    for cause in causes:
        assert cause in err, f"{cause!r} not in:\n{err[-3000:]}"
    assert not re.search(r"\b(PASS|FAIL)\b", out), f"a verdict on the training stack:\n{out[-3000:]}"


@pytest.mark.fuse
@pytest.mark.timeout(START_WAIT_S + 120)
def test_reports_dir_full_mid_run_ends_as_a_tool_error_that_names_the_file(tmp_path: Path, layer) -> None:
    """ENOSPC on the fault journal while FROZEN is in effect: the next fault's ``apply``
    cannot be written, so it is never injected; the run ends as a tool error, FROZEN is
    reverted, the job stopped. The run record (another file) can still be written, and
    says why."""
    out, control = layer
    ctl = Controller(tmp_path, out, FROZEN + LATER.format(at=8))
    ctl.start()
    frozen = ctl.wait_applied("f0-hang_rank")
    run_id = ctl.run_id()
    _fail_controller_writes(control, "full", errno.ENOSPC, ["*/fault_journal.jsonl"])
    try:
        rc, stdout, stderr = ctl.finish()
    finally:
        control.remove_rule("full")
    _assert_tool_error(rc, stdout, stderr, "trainchaos itself failed")
    assert "TOOL ERROR" in stdout, stdout
    record = json.loads((ctl.run_dir / "journal.json").read_text())
    assert record["status"] == "tool_error" and record["verdict"] is None, record["error"]
    assert (f"the controller's own output failed: {ctl.run_dir}/fault_journal.jsonl: No space left on "
            "device (ENOSPC)") in record["error"], record["error"]
    injected = [f["fault_id"] for f in record["faults"] if f.get("t_inject") is not None]
    assert injected == ["f0-hang_rank"], "the fault whose apply was never written was injected"
    _assert_nothing_left(ctl, run_id, [frozen])


@pytest.mark.fuse
@pytest.mark.timeout(START_WAIT_S + 150)
def test_reports_dir_failing_mid_run_and_a_second_controller_on_the_same_run_dir(
        tmp_path: Path, layer) -> None:
    """A second controller given the running one's directory is refused at once, naming the
    holder, and disturbs nothing. Then EIO on every write of the controller's own until it
    has exited: FROZEN is still reverted, the job stopped, and the run's record, which cannot
    be written, is a tool error that names the file and the errno."""
    out, control = layer
    # Later than above: the second controller's start (imports, preflight) comes first.
    ctl = Controller(tmp_path, out, FROZEN + LATER.format(at=20))
    first = ctl.start()
    frozen = ctl.wait_applied("f0-hang_rank")
    run_id = ctl.run_id()
    before = {p.pid for p in find_run_processes(run_id)}
    start_record = (ctl.run_dir / "run.json").read_text()
    # From now on every write of the controller's own fails, until it has exited.
    _fail_controller_writes(control, "eio", errno.EIO)

    t0 = time.monotonic()
    second = ctl.cli("run", "ctl.yaml", "--out", str(out))
    assert second.returncode == 3, second.stdout + second.stderr
    assert (f"trainchaos: {ctl.run_dir} is in use by another trainchaos controller (pid {first.pid}, "
            f"run {run_id})") in second.stderr, second.stderr
    assert time.monotonic() - t0 < 60, "refused at once, not after waiting"
    assert first.poll() is None and (ctl.run_dir / "run.json").read_text() == start_record
    assert {p.pid for p in find_run_processes(run_id)} == before, "the second controller touched the job"
    assert all(process_state(p) == "T" for p in frozen["details"]["stopped_pids"])

    try:
        rc, stdout, stderr = ctl.finish()
    finally:
        control.remove_rule("eio")
    _assert_tool_error(rc, stdout, stderr, f"the run's record could not be written: {ctl.run_dir}/.journal.json.",
                       "Input/output error (EIO)",
                       f"the controller's own output failed: {ctl.run_dir}/fault_journal.jsonl: Input/output error (EIO)")
    assert not (ctl.run_dir / "journal.json").exists()
    _assert_nothing_left(ctl, run_id, [frozen])


@pytest.mark.timeout(START_WAIT_S + 90)
def test_cleanup_after_a_sigkill_reverts_from_a_damaged_fault_journal(tmp_path: Path) -> None:
    """The controller SIGKILLed with FROZEN in effect; its fault journal then gets a garbage
    line and a torn last line (what a failing disk or a broken tool leaves). ``trainchaos
    cleanup`` names both lines, reverts the fault from the records around them, and leaves
    nothing; its own ``reverted`` record starts a line of its own after the torn one."""
    ctl = Controller(tmp_path, tmp_path / "out", FROZEN)
    argv = [*TRAINCHAOS, "run", "ctl.yaml", "--out", str(ctl.out)]
    with sigkilled_after_apply(argv, ctl.env, tmp_path, ctl.run_dir, "freeze") as run_id:
        journal_path = Path(RunDir(str(ctl.run_dir)).fault_journal)
        frozen = FaultJournal(str(journal_path)).pending()
        assert [f["fault_id"] for f in frozen] == ["f0-hang_rank"]
        lines = len(journal_path.read_bytes().splitlines())
        with open(journal_path, "ab") as fh:
            fh.write(b"\x00garbage, not a record\n")
            fh.write(b'{"t": 1, "op": "reverted", "fault_id": "f0-ha')
        result = ctl.cli("cleanup")
        kill_pids([p.pid for p in find_run_processes(run_id)])  # whatever the test leaves
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert f"{run_id}: reverted f0-hang_rank (hang_rank)" in result.stdout, result.stdout
    assert f"fault journal: {journal_path}:{lines + 1}: not JSON" in result.stdout, result.stdout
    assert f"fault journal: {journal_path}:{lines + 2}: torn (no end of line)" in result.stdout, result.stdout
    assert FaultJournal(str(journal_path)).pending() == [], "cleanup's reverted record was lost"
    assert json.loads((ctl.run_dir / "journal.json").read_text())["status"] == "aborted"
    _assert_nothing_left(ctl, run_id, frozen)
