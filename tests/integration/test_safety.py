"""The safety contract, on real runs: whatever happens to the controller, nothing is left behind.

Each test starts the real ``trainchaos run`` on a 2x2 job whose rank 3 is frozen with SIGSTOP
(``hang_rank``, no duration): a stopped process is the worst thing to leak, because nothing
ever ends it by itself. Then the controller is interrupted (SIGINT, SIGTERM), killed
(SIGKILL, then ``trainchaos cleanup``), or left to hit its timeout with the job's own hang
detection switched off. Every test asserts the leak (or its absence) *before* the fixture's
finalizer sweeps up, so a regression fails the test instead of being hidden by the sweep.

Processes of a test are recognised by ``TRAINCHAOS_STATE_DIR=<this test's tmp dir>`` in their
environment (the run inherits it from the controller), so that other trainchaos runs on the
same machine are neither counted nor killed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from chaos.runfiles.record import run_record_json_schema
from chaos.runfiles.resources import pending_resources, tmp_dir_for
from chaos.runfiles.rollback import FaultJournal
from chaos.util.procs import ProcInfo, find_run_processes, kill_pids, process_state
from tests.integration._support import TRAINCHAOS, cli_env, run_trainchaos

pytestmark = pytest.mark.integration

HANG_AT_STEP = 30
# Long enough that the run is still going when the test acts on it (200 steps x >= 50 ms).
SCENARIO = """\
name: {name}
seed: 5
workload:
  harness:
    steps: 200
    step_delay_s: 0.05
    model: {{name: mlp}}
    checkpoint: {{every_steps: 20}}
{failure}topology: {{nodes: 2, ranks_per_node: 2}}
faults:
  - type: hang_rank
    target: {{rank: 3}}
    trigger: {{at_step: {at_step}}}
    params: {{duration_s: null}}
{targets}timeout_s: {timeout_s}
"""

# Time for 4 ranks to start and reach the fault on a busy 2-core machine.
INJECT_WAIT_S = 120
# SIGINT/SIGTERM -> every fault reverted, every process stopped, journal written, exit.
EXIT_AFTER_SIGNAL_S = 30


@dataclass
class Sandbox:
    tmp: Path
    state: Path
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    # -- what the test starts ---------------------------------------------------------------
    def scenario(self, name: str, *, timeout_s: float = 150, failure: dict[str, float] | None = None,
                 targets: str = "", at_step: int = HANG_AT_STEP) -> Path:
        fail = f"    failure: {json.dumps(failure)}\n" if failure else ""
        path = self.tmp / f"{name}.yaml"
        path.write_text(SCENARIO.format(name=name, failure=fail, at_step=at_step, targets=targets,
                                        timeout_s=timeout_s))
        return path

    def start_run(self, scenario: Path) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{scenario.stem}.out", "wb")  # noqa: SIM115 (closed after Popen)
        # Its own session: a terminal's SIGINT to the test runner must not reach it, only ours.
        # A controller of its own agent zygote, not the session's (popen_trainchaos): these
        # tests signal and SIGKILL controllers mid-run and time their exits.
        proc = subprocess.Popen([*TRAINCHAOS, "run", str(scenario), "--out", str(self.out)], env=self.env,
                                cwd=self.tmp, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        log.close()
        self.procs.append(proc)
        return proc

    def cli(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return run_trainchaos(list(argv), env=self.env, cwd=self.tmp, timeout=timeout)

    @property
    def out(self) -> Path:
        return self.tmp / "out"

    def run_dir(self, scenario: Path) -> Path:
        return self.out / scenario.stem / "0"

    def output(self, scenario: Path) -> str:
        path = self.tmp / f"{scenario.stem}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- what is left -----------------------------------------------------------------------
    def processes(self) -> list[ProcInfo]:
        """Live (non-zombie) processes of any trainchaos run started from this sandbox."""
        needle = f"TRAINCHAOS_STATE_DIR={self.state}".encode()
        mine = []
        for info in find_run_processes():
            try:
                with open(f"/proc/{info.pid}/environ", "rb") as fh:
                    if needle in fh.read().split(b"\0"):
                        mine.append(info)
            except OSError:
                continue
        return mine

    def registered(self) -> list[dict[str, Any]]:
        active = self.state / "active"
        return [json.loads(p.read_text()) for p in sorted(active.glob("*.json"))] if active.exists() else []


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    state = tmp_path / "state"
    box = Sandbox(tmp=tmp_path, state=state, env=cli_env(state))
    yield box
    # The sweep: only after the test has asserted what it wanted, and only our processes.
    for proc in box.procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    kill_pids([p.pid for p in box.processes()])
    for run in box.registered():
        kill_pids([p.pid for p in find_run_processes(run["run_id"])])


# ----------------------------------------------------------------------------- helpers


def _injector_events(run_dir: Path) -> list[dict[str, Any]]:
    events = []
    for path in sorted((run_dir / "events").glob("injector*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line being written
    return events


def wait_for_fault(box: Sandbox, proc: subprocess.Popen[bytes], scenario: Path) -> dict[str, Any]:
    """Block until the injector reports the hang in effect; returns the fault journal's apply
    record merged with its details (``stopped_pids``)."""
    run_dir = box.run_dir(scenario)
    deadline = time.monotonic() + INJECT_WAIT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"trainchaos exited ({proc.returncode}) before the fault:\n{box.output(scenario)[-3000:]}")
        injected = [e for e in _injector_events(run_dir)
                    if e.get("kind") == "fault_injected" and e.get("src") == "injector"]
        if injected:
            pending = FaultJournal(str(run_dir / "fault_journal.jsonl")).pending()
            assert len(pending) == 1, f"the injected fault must be in the fault journal: {pending}"
            assert pending[0]["type"] == "hang_rank"
            assert pending[0]["details"].get("stopped_pids"), pending
            return pending[0]
        time.sleep(0.2)
    pytest.fail(f"no fault_injected within {INJECT_WAIT_S} s:\n{box.output(scenario)[-3000:]}")


def listening_addresses(pids: list[int]) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket the processes listen on, from /proc/net/tcp{,6}."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with open(table) as fh:
            for line in list(fh)[1:]:
                cols = line.split()
                local, state, inode = cols[1], cols[3], cols[9]
                if state != "0A" or inode not in inodes:  # 0A: LISTEN
                    continue
                hex_addr, hex_port = local.split(":")
                raw = bytes.fromhex(hex_addr)
                if width == 8:
                    addr = ".".join(str(b) for b in reversed(raw))
                else:  # four little-endian 32-bit words
                    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                    addr = socket.inet_ntop(socket.AF_INET6, words)
                found.add((addr, int(hex_port, 16)))
    return found


def _journal(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "journal.json"
    assert path.exists(), f"no journal.json in {run_dir}: {sorted(p.name for p in run_dir.iterdir())}"
    return json.loads(path.read_text())


def assert_nothing_left(box: Sandbox, run_id: str, fault: dict[str, Any]) -> None:
    """No process of the run (none stopped, in particular), no pending fault, no registration."""
    leftovers = find_run_processes(run_id) + box.processes()
    assert not leftovers, "processes left behind:\n" + "\n".join(f"{p.pid} {p.state} {p.cmdline[:100]}"
                                                                 for p in leftovers)
    for pid in fault["details"]["stopped_pids"]:
        assert process_state(pid) in (None, "Z"), f"the frozen rank (pid {pid}) is still there: {process_state(pid)}"
    assert not box.registered(), f"the active-run registry still lists {box.registered()}"


def assert_nothing_left_of(run_id: str, fault: dict[str, Any]) -> None:
    """No process of the run, and its frozen rank gone (other runs of the sandbox may live)."""
    assert not find_run_processes(run_id)
    for pid in fault["details"]["stopped_pids"]:
        assert process_state(pid) in (None, "Z"), f"the frozen rank (pid {pid}) is still there"


def assert_fault_reverted(run_dir: Path, fault_id: str) -> None:
    journal = FaultJournal(str(run_dir / "fault_journal.jsonl"))
    assert journal.pending() == [], f"faults never reverted: {journal.pending()}"
    ops = [r["op"] for r in journal.records() if r.get("fault_id") == fault_id]
    assert ops[:2] == ["apply", "applied"] and ops[-1] == "reverted", ops


def _wait_until(condition: Any, what: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _run_id(box: Sandbox, run_dir: Path) -> str:
    runs = [r for r in box.registered() if Path(r["run_dir"]) == run_dir.resolve()]
    assert len(runs) == 1, f"the running run must be registered as active: {box.registered()}"
    return runs[0]["run_id"]


# ----------------------------------------------------------------------------- tests


def assert_only_loopback_listeners(run_id: str, controller: subprocess.Popen[bytes]) -> None:
    """Nothing of the run listens beyond the node's own address (loopback on local): not
    the rank-0 store, not gloo, not the liveness sockets, not the controller's rendezvous."""
    listening = listening_addresses([p.pid for p in find_run_processes(run_id)] + [controller.pid])
    assert len(listening) >= 5, f"expected the stores, gloo and liveness listeners: {listening}"
    exposed = {(a, p) for a, p in listening if a not in ("127.0.0.1", "::ffff:127.0.0.1")}
    assert not exposed, f"listening beyond loopback: {exposed}"


def assert_interrupted_run_left_nothing(run_dir: Path, run_id: str, fault: dict[str, Any]) -> None:
    """What a signal mid-fault must leave: the fault reverted, no process, the run's journal."""
    assert_nothing_left_of(run_id, fault)
    assert_fault_reverted(run_dir, fault["fault_id"])
    journal = _journal(run_dir)
    assert journal["run_id"] == run_id
    assert journal["status"] == "interrupted"
    kinds = [e.get("kind") for e in _injector_events(run_dir)]
    assert "fault_reverted" in kinds and kinds[-1] == "job_end"


@pytest.mark.machine_cleanup
@pytest.mark.timeout(INJECT_WAIT_S + 90)
def test_controller_killed_mid_fault_then_cleanup_leaves_nothing(sandbox: Sandbox) -> None:
    # No watchdog and no collective timeout: the job stays stuck on the frozen rank until
    # cleanup acts. With them, its own restart (SIGTERM, then SIGKILL to the frozen rank) can
    # end every process while the test inspects the leftovers, and nothing is left to kill.
    scenario = sandbox.scenario("controller-killed", failure={"watchdog_s": 0, "collective_timeout_s": 0})
    proc = sandbox.start_run(scenario)
    fault = wait_for_fault(sandbox, proc, scenario)
    run_dir = sandbox.run_dir(scenario)
    run_id = _run_id(sandbox, run_dir)

    # The controller hosts the agents' rendezvous store. Once it is gone, torchrun's agents
    # notice and stop their workers (SIGTERM, then SIGKILL after a grace period, the frozen
    # rank included): on a busy host that can end every process before cleanup runs, and
    # there is nothing left for cleanup to kill. So the agents are frozen first, as a stuck
    # job's would be: the job waits for the test, and cleanup must end stopped processes.
    agents = [p for p in find_run_processes(run_id) if p.rank is None]
    assert agents, "expected the run's torchrun agents"
    for agent in agents:
        os.kill(agent.pid, signal.SIGSTOP)
    _wait_until(lambda: all(process_state(a.pid) == "T" for a in agents), "the agents to stop")

    proc.kill()  # no handler, no finally: what a crashed controller or an OOM kill leaves
    proc.wait(timeout=10)

    # The leak is real: without cleanup the job and its frozen rank stay (this is what the
    # test would see if cleanup did nothing).
    leftovers = find_run_processes(run_id)
    assert leftovers, "expected the run's processes to outlive a SIGKILLed controller"
    frozen = [p for p in leftovers if p.state == "T" and p.rank is not None]
    assert frozen, f"expected the frozen rank among the leftovers: {[(p.pid, p.state) for p in leftovers]}"
    assert {p.pid for p in frozen} <= set(fault["details"]["stopped_pids"])
    assert [r["run_id"] for r in sandbox.registered()] == [run_id]
    assert FaultJournal(str(run_dir / "fault_journal.jsonl")).pending(), "the fault journal must show it pending"
    # Run-scoped resources outlive it too: the nodes' local directories and temp dirs.
    scratch = sorted((sandbox.state / "scratch" / run_id).glob("node-*"))
    assert [p.name for p in scratch] == ["node-0", "node-1"], scratch
    scratch += [Path(tmp_dir_for(run_id, node)) for node in (0, 1)]
    pending = pending_resources(str(run_dir / "resources.jsonl"))
    assert sorted(r["spec"]["path"] for r in pending) == sorted(str(p) for p in scratch)

    check = sandbox.cli("cleanup", "--check")
    assert check.returncode == 1, check.stdout + check.stderr
    assert f"run {run_id}" in check.stdout and "1 fault(s) not reverted, 4 resource(s)" in check.stdout
    assert all(p.exists() for p in scratch) and find_run_processes(run_id), "--check must change nothing"

    result = sandbox.cli("cleanup")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{run_id}: reverted {fault['fault_id']} (hang_rank)" in result.stdout, result.stdout
    assert f"{run_id}: killed " in result.stdout, result.stdout
    assert f"{run_id}: released 4 resource(s)" in result.stdout, result.stdout

    assert_nothing_left(sandbox, run_id, fault)
    assert_fault_reverted(run_dir, fault["fault_id"])
    assert not any(p.exists() for p in scratch), "node-local directories must be removed"
    # The run can still be explained: cleanup wrote its journal from what is on disk.
    journal = _journal(run_dir)
    assert journal["status"] == "aborted" and journal["verdict"] is None and journal["run_id"] == run_id
    assert journal["faults"][0]["fault_id"] == fault["fault_id"]
    assert journal["metrics"]["final_step"] >= HANG_AT_STEP - 1, journal["metrics"]
    # The same record as a run's own: every key, the schema `trainchaos schema --journal` prints.
    assert not [e.message for e in Draft202012Validator(run_record_json_schema()).iter_errors(journal)]
    assert f"{run_id}: wrote " in result.stdout and "(status aborted)" in result.stdout
    assert not pending_resources(str(run_dir / "resources.jsonl"))

    again = sandbox.cli("cleanup")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "nothing to clean up"
    clean = sandbox.cli("cleanup", "--check")
    assert clean.returncode == 0, clean.stdout + clean.stderr


# ----------------------------------------------------------------------------- signals at awkward moments


def _events_of(run_dir: Path, kind: str, src_prefix: str = "") -> list[dict[str, Any]]:
    found = []
    for path in sorted((run_dir / "events").glob("*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("kind") == kind and str(event.get("src", "")).startswith(src_prefix):
                found.append(event)
    return found


def _wait_for_event(box: Sandbox, proc: subprocess.Popen[bytes], scenario: Path, run_dir: Path, kind: str,
                    src_prefix: str = "", timeout: float = INJECT_WAIT_S, poll_s: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"trainchaos exited ({proc.returncode}) before {kind}:\n{box.output(scenario)[-3000:]}")
        if (run_dir / "events").exists() and _events_of(run_dir, kind, src_prefix):
            return
        time.sleep(poll_s)
    pytest.fail(f"no {kind} within {timeout} s:\n{box.output(scenario)[-3000:]}")


@pytest.mark.timeout(INJECT_WAIT_S + EXIT_AFTER_SIGNAL_S + 60)
def test_sigint_during_baseline_stops_the_suite(sandbox: Sandbox) -> None:
    """Ctrl-C while the fault-free baseline runs must end trainchaos, not go on to the
    faulty run with the user's interrupt already spent."""
    scenario = sandbox.scenario("interrupt-baseline")
    scenario.write_text(scenario.read_text().replace("seed: 5\n", "seed: 5\nbaseline: true\n"))
    proc = sandbox.start_run(scenario)
    baseline_dir = sandbox.out / scenario.stem / "baseline"
    _wait_for_event(sandbox, proc, scenario, baseline_dir, "rank_start", "rank-", poll_s=0.2)

    proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + EXIT_AFTER_SIGNAL_S
    while proc.poll() is None and time.monotonic() < deadline:
        if sandbox.run_dir(scenario).exists():
            pytest.fail("the faulty run started after SIGINT interrupted the baseline")
        time.sleep(0.1)
    assert proc.returncode == 130, f"exit code {proc.returncode}:\n{sandbox.output(scenario)[-3000:]}"
    assert not sandbox.run_dir(scenario).exists()
    assert _journal(baseline_dir)["status"] == "interrupted"
    assert not sandbox.processes() and not sandbox.registered()


@pytest.mark.timeout(60 + 30 + INJECT_WAIT_S)
def test_hang_without_watchdog_ends_at_timeout_as_hung_and_a_signal_while_reverting_does_not_cut_it_short(
        sandbox: Sandbox) -> None:
    """Why the tool matters: with plain gloo defaults (30 min collective timeout, no
    heartbeat watchdog) a frozen rank blocks the job; trainchaos must still end the run at
    its timeout, call it hung, fail the verdict, and leave nothing behind. And the first
    signal may land while that run is already reverting (the user presses Ctrl-C while it
    winds down): the revert and stop must still finish, the journal must still be written
    with the run's own outcome, and the run must be unregistered. One run shows both."""
    # "hung" needs 20 s without progress before the timeout; on a busy machine the 4 ranks
    # can take 25 s to start, so the hang comes early (step 10) and the timeout leaves room.
    # The run's timeout starts with its controller, and the hang is in effect before it.
    timeout_s = 60
    scenario = sandbox.scenario(
        "hang-undetected", timeout_s=timeout_s, failure={"watchdog_s": 0, "collective_timeout_s": 0},
        targets="targets:\n  detection_s: {max: 10}\n  recovery_s: {max: 30}\n", at_step=10,
    )
    proc = sandbox.start_run(scenario)
    t0 = time.monotonic()
    fault = wait_for_fault(sandbox, proc, scenario)
    run_dir = sandbox.run_dir(scenario)
    run_id = _run_id(sandbox, run_dir)
    # fault_reverted is emitted from the finally, just before the cluster is stopped.
    _wait_for_event(sandbox, proc, scenario, run_dir, "fault_reverted", "injector", timeout=timeout_s + 30)
    proc.send_signal(signal.SIGINT)
    try:
        rc = proc.wait(timeout=max(EXIT_AFTER_SIGNAL_S, timeout_s + 30 - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        pytest.fail(f"trainchaos still running {EXIT_AFTER_SIGNAL_S} s after SIGINT:\n"
                    f"{sandbox.output(scenario)[-3000:]}")

    journal = _journal(run_dir)
    # The run's own outcome stands: a signal during its teardown stops the suite after it
    # (exit 130), one that came after the controller had left finds nothing (exit 1: failed).
    assert rc == (130 if journal["interrupted_after"] else 1), f"exit code {rc}:\n{sandbox.output(scenario)[-3000:]}"
    assert journal["status"] == "hung", journal["error"]
    verdict = journal["verdict"]
    assert verdict["passed"] is False
    reasons = [c["reason"] for c in verdict["checks"] if not c["ok"]]
    assert any("hung" in r or "undetected" in r for r in reasons), reasons
    # What the job reports while trainchaos stops it at the timeout is not a detection.
    metrics = journal["metrics"]
    assert metrics["undetected"] is True and metrics["detection_s"] is None, metrics["faults"]
    assert metrics["false_detections"] == 0, metrics["false_detection_events"]
    assert_nothing_left(sandbox, run_id, fault)
    assert_fault_reverted(run_dir, fault["fault_id"])


@pytest.mark.machine_cleanup
@pytest.mark.timeout(INJECT_WAIT_S + EXIT_AFTER_SIGNAL_S + 90)
def test_cleanup_spares_parallel_live_runs_and_sigint_or_sigterm_mid_fault_reverts_everything(sandbox: Sandbox) -> None:
    """Two suites run at once on one machine (a CI runner with two jobs); a `cleanup` in the
    middle must leave both alone: their controllers are alive. Each run keeps to its own
    processes, ports and files. Then one controller gets SIGINT and the other SIGTERM while
    the hang is in effect: each reverts its fault, stops every process (the frozen rank
    too), writes its journal and exits 130."""
    # Jobs stuck on their frozen ranks (no watchdog, no collective timeout): a job's own
    # restart would change its pids while cleanup runs and look like cleanup touched it,
    # and the hang stays in effect until the signal lands.
    stuck = {"watchdog_s": 0, "collective_timeout_s": 0}
    first = sandbox.scenario("parallel-a", failure=stuck)
    second = sandbox.scenario("parallel-b", failure=stuck)
    proc_a, proc_b = sandbox.start_run(first), sandbox.start_run(second)
    fault_a = wait_for_fault(sandbox, proc_a, first)
    fault_b = wait_for_fault(sandbox, proc_b, second)
    run_a = _run_id(sandbox, sandbox.run_dir(first))
    run_b = _run_id(sandbox, sandbox.run_dir(second))
    before = {run: {p.pid for p in find_run_processes(run)} for run in (run_a, run_b)}
    assert before[run_a] and before[run_b] and not before[run_a] & before[run_b]

    result = sandbox.cli("cleanup")
    assert result.returncode == 0, result.stdout + result.stderr
    for run in (run_a, run_b):
        assert f"{run}: its controller is still running; skipped" in result.stdout, result.stdout
        assert {p.pid for p in find_run_processes(run)} == before[run], "cleanup touched a live run"
    assert proc_a.poll() is None and proc_b.poll() is None
    check = sandbox.cli("cleanup", "--check")
    assert check.returncode == 0, "a live run's processes and resources are not leftovers:\n" + check.stdout

    runs = ((proc_a, fault_a, run_a, first, signal.SIGINT), (proc_b, fault_b, run_b, second, signal.SIGTERM))
    for proc, fault, run, _, _ in runs:
        assert all(process_state(p) == "T" for p in fault["details"]["stopped_pids"]), \
            "the hang must be in effect when the signal lands"
        assert_only_loopback_listeners(run, proc)
    for proc, _, _, _, sig in runs:
        proc.send_signal(sig)  # the controller only: the nodes run in their own sessions
    for proc, fault, run, scenario, sig in runs:
        try:
            rc = proc.wait(timeout=EXIT_AFTER_SIGNAL_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"trainchaos still running {EXIT_AFTER_SIGNAL_S} s after {sig.name}:\n"
                        f"{sandbox.output(scenario)[-3000:]}")
        assert rc == 130, f"{sig.name}: exit code {rc}:\n{sandbox.output(scenario)[-3000:]}"
        assert_interrupted_run_left_nothing(sandbox.run_dir(scenario), run, fault)
    assert not sandbox.processes(), "processes left behind"
    assert not sandbox.registered(), f"the active-run registry still lists {sandbox.registered()}"
