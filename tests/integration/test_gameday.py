"""``trainchaos gameday`` against a live run on a real dockerd, driven through a
pseudo-terminal (pexpect) as an operator would: a dry run that changes nothing, a plan aimed
at an unlabelled container refused with exit 2 (that container untouched), a confirmed
freeze whose stop condition trips and reverts everything, the report; then the job's
controller is SIGKILLed and ``trainchaos cleanup`` leaves no container or network of it.
Last, the shipped plans in sequence against the staging job on two routed engines (issues 26
and 45): the power-domain outage (all of the second engine) detected and counted, then the
freeze of a node the outage took stopped before it reaches the engine.

One job serves the tests up to the SIGKILL (a module's slot, tests in file order; a test run
again after the SIGKILL gets a new job), the staging job the last one: starting containers
is the slow part.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from chaos.cluster.docker_engine import DOCKER_HOSTS_ENV
from chaos.net.fabric import short_id
from tests.integration._dockerd import routed_dockerds, routed_unavailable
from tests.integration._support import REPO, TRAINCHAOS, run_trainchaos

pexpect = pytest.importorskip("pexpect")

pytestmark = [pytest.mark.integration, pytest.mark.docker]

JOB = """\
name: gd-job
workload:
  harness: {model: {name: mlp}, steps: 20000, step_delay_s: 0.05, checkpoint: {every_steps: 20},
            failure: {watchdog_s: 3}}
topology: {nodes: 2, ranks_per_node: 1, max_restarts: 20}
backend: docker
timeout_s: 600
"""
# max_restarts (the most allowed): every freeze trips the job's watchdog and costs a restart;
# the default 3 ended the shared job (status failed, containers gone) when `make test-stress`
# ran each test twice.


def _docker():  # noqa: ANN202
    import docker

    return docker.DockerClient(base_url=os.environ["DOCKER_HOST"])


class Job:
    def __init__(self, work: Path, scenario: str = JOB, ranks: int = 2, hosts: list[str] | None = None) -> None:
        self.work = work
        self.ranks = ranks
        self.hosts = hosts or [os.environ["DOCKER_HOST"]]
        # cleanup scans every engine of the job for leftovers, not only the default one
        self.env = {**os.environ, "TRAINCHAOS_STATE_DIR": str(work / "state"), "COLUMNS": "200",
                    DOCKER_HOSTS_ENV: ",".join(self.hosts)}
        (work / "job.yaml").write_text(scenario)
        self.controller = subprocess.Popen([*TRAINCHAOS, "run", "job.yaml", "--out", "reports"], env=self.env,
                                           cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                           stdin=subprocess.DEVNULL)
        self.run_dir = work / "reports" / yaml.safe_load(scenario)["name"] / "0"
        self.run_id: str | None = None

    def wait_for_steps(self, timeout: float = 150) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ranks = list((self.run_dir / "events").glob("rank-*.jsonl")) if self.run_dir.exists() else []
            if len(ranks) >= self.ranks and all('"step_end"' in p.read_text() for p in ranks):
                self.run_id = json.loads((self.run_dir / "run.json").read_text())["run_id"]
                return
            assert self.controller.poll() is None, "the job's controller died"
            time.sleep(0.5)
        pytest.fail("the job never made a step")

    def stepping(self, timeout: float = 120) -> bool:
        """Whether every rank steps again within ``timeout`` s of this call. A test before may
        have left the job restarting (a freeze trips its watchdog): a game day started then
        would find it dead and stop at once, racing the job's own recovery."""
        since = time.time()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.controller.poll() is None:
            if all(self._last_step_t(rank) >= since for rank in range(self.ranks)):
                return True
            time.sleep(0.5)
        return False

    def _last_step_t(self, rank: int) -> float:
        latest = 0.0
        for path in (self.run_dir / "events").glob(f"rank-{rank}.*jsonl"):
            with open(path, "rb") as fh:
                fh.seek(max(0, fh.seek(0, os.SEEK_END) - 8192))  # the newest events only
                for line in fh.read().splitlines():
                    if b'"step_end"' in line:
                        with contextlib.suppress(ValueError):
                            latest = max(latest, float(json.loads(line).get("t") or 0.0))
        return latest

    def cli(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return run_trainchaos(list(argv), env=self.env, cwd=self.work, timeout=timeout)

    def spawn(self, *argv: str):  # noqa: ANN201
        return pexpect.spawn(TRAINCHAOS[0], [*TRAINCHAOS[1:], *argv], env=self.env, cwd=str(self.work),
                             encoding="utf-8", timeout=60, dimensions=(50, 200))

    def states(self) -> dict[str, tuple[str, str]]:
        """Container name -> (status, StartedAt) of the run's containers, on every engine."""
        return {name: state for name, (_, state) in self._containers().items()}

    def placement(self) -> dict[str, str]:
        """Container name -> the engine it runs on."""
        return {name: host for name, (host, _) in self._containers().items()}

    def _containers(self) -> dict[str, tuple[str, tuple[str, str]]]:
        import docker

        found = {}
        for host in self.hosts:
            client = docker.DockerClient(base_url=host)
            try:
                found.update({c.name: (host, (c.status, c.attrs["State"]["StartedAt"])) for c in client.containers.list(
                    all=True, filters={"label": f"trainchaos.run={self.run_id}"})})
            finally:
                client.close()
        return found


@contextlib.contextmanager
def _running(job: Job) -> Iterator[Job]:
    try:
        job.wait_for_steps()
        yield job
    finally:
        if job.controller.poll() is None:
            job.controller.send_signal(signal.SIGTERM)
            try:
                job.controller.wait(timeout=60)
            except subprocess.TimeoutExpired:
                job.controller.kill()
        if job.run_id:
            job.cli("cleanup", "--run-dir", str(job.run_dir))


class JobSlot:
    """The job the tests share. A test that ends it (the SIGKILL) leaves the slot empty, and
    the next test that asks gets a new one: in `make test-stress` that is the same test run
    again, which must find a live job as the first run did."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self._jobs = contextlib.ExitStack()
        self._current: Job | None = None

    def get(self) -> Job:
        """A job whose every rank steps: the current one, else a new one (a test before may
        have ended it, or used up its restarts)."""
        if self._current is not None and not self._current.stepping():
            if self._current.controller.poll() is None:
                self._current.controller.send_signal(signal.SIGTERM)  # its teardown stops its containers
                self._current.controller.wait(timeout=120)
            self._current = None
        if self._current is None:
            self._current = self._jobs.enter_context(_running(Job(self._tmp.mktemp("gameday"))))
        return self._current

    def live(self) -> Job:
        """A job whose controller runs, its ranks stepping or not: for a test of the run's
        containers, not of its training."""
        if self._current is not None and self._current.controller.poll() is None:
            return self._current
        self._current = None
        return self.get()

    def close(self) -> None:
        self._jobs.close()


@pytest.fixture(scope="module")
def job_slot(docker_host: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobSlot]:
    slot = JobSlot(tmp_path_factory)
    try:
        yield slot
    finally:
        slot.close()


@pytest.fixture
def job(job_slot: JobSlot) -> Job:
    return job_slot.get()


@pytest.fixture
def live_job(job_slot: JobSlot) -> Job:
    return job_slot.live()


@pytest.fixture
def staging(tmp_path: Path) -> Iterator[Job]:
    """scenarios/gameday/staging-job.yaml (three nodes, pd-a: [0], pd-b: [1, 2], down to one
    node), long enough to outlast the test whatever the host's pace, and without the hang
    watchdog: a crash is still seen (the peer monitor always runs), and no restart of its
    own races the steps the test reads. Across two engines as two routed hosts (issue 45):
    node 0 on the first, pd-b (nodes 1 and 2) all of the second, so the game day's outage is
    a host going dark and the exercise attaches to a job on both."""
    if lacks := routed_unavailable():
        pytest.skip(lacks)
    scenario = yaml.safe_load((REPO / "scenarios" / "gameday" / "staging-job.yaml").read_text())
    harness = scenario["workload"]["harness"]
    harness["steps"] = 20000
    harness["failure"] = {"watchdog_s": 0}
    # Cold, as shipped: started warm under make test's load (3 elastic nodes, each agent
    # importing torch before it joins the rendezvous), its ranks had not all stepped after
    # 150 s once (2026-12-02; cause not found yet), where cold it starts in well under that.
    harness["warm_start"] = False
    with routed_dockerds(2) as routed:
        a, b = routed.hosts
        scenario["backend"] = routed.backend([a, b, b])
        with _running(Job(tmp_path, yaml.safe_dump(scenario), ranks=3, hosts=routed.hosts)) as job:
            yield job


def _plan(job: Job, name: str, body: str) -> str:
    path = job.work / f"{name}.yaml"
    path.write_text(f"name: {name}\nrun: {job.run_id}\n{body}")
    return path.name


@pytest.fixture
def bystander(job: Job) -> Iterator[str]:
    """A running container that is not the run's: its own image, no trainchaos label."""
    client = _docker()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w"):
        pass
    client.api.import_image_from_data(buf.getvalue(), repository="tc-bystander", tag="latest")
    binds = {p: {"bind": p, "mode": "ro"} for p in ("/usr", "/lib", "/lib64", "/bin") if os.path.exists(p)}
    cont = client.containers.run("tc-bystander:latest", ["/bin/sleep", "600"], name=f"tc-bystander-{os.getpid()}",
                                 detach=True, volumes=binds, network_mode="none")
    try:
        yield cont.name
    finally:
        cont.remove(force=True)
        client.images.remove("tc-bystander:latest", force=True)
        client.close()


@pytest.mark.timeout(300)
def test_plan_aimed_at_an_unlabelled_container_is_refused_and_it_is_untouched(job: Job, bystander: str) -> None:
    client = _docker()
    before = client.containers.get(bystander).attrs["State"]
    plan = _plan(job, "stray", "steps:\n  - observe: {seconds: 1}\n"
                 f"  - inject: {{type: container_pause, target: {{container: {bystander}}}}}\n")
    for extra in (["--dry-run"], ["--yes"]):
        res = job.cli("gameday", plan, *extra, "--out", "gd-stray")
        assert res.returncode == 2, res.stdout + res.stderr
        assert "refusing to touch container" in res.stderr and bystander in res.stderr
    after = client.containers.get(bystander).attrs["State"]
    assert after["Status"] == "running" and not after["Paused"]
    assert after["StartedAt"] == before["StartedAt"] and after["Pid"] == before["Pid"]
    assert not (job.work / "gd-stray").exists(), "nothing may be started or written for a refused plan"
    client.close()


@pytest.mark.timeout(300)
def test_operator_dry_run_confirm_stop_condition_revert_and_report(job: Job) -> None:
    plan = _plan(job, "freeze", "window_s: 4\nstop_when: [\"dead_s > 4\"]\nsteps:\n"
                 "  - observe: {seconds: 3}\n"
                 "  - name: freeze\n    inject: {type: container_pause, target: {node: 1}}\n"
                 "  - wait: {seconds: 120}\n")
    node1 = f"{job.run_id}-n1"
    states = job.states()
    reports = set(job.work.glob("gd-*"))

    dry = job.spawn("gameday", plan, "--dry-run")
    dry.expect(f"container_pause -> node 1 = container {node1} \\(running\\)")
    dry.expect("nothing was touched")
    dry.expect(pexpect.EOF)
    dry.close()
    assert dry.exitstatus == 0
    assert job.states() == states, "a dry run changed a container"
    assert set(job.work.glob("gd-*")) == reports, "a dry run wrote a report"

    gd = job.spawn("gameday", plan, "--out", "gd-freeze")
    gd.expect("steps_per_s=")  # the observe step's snapshot
    gd.expect(r"proceed\? \[y\]es")
    gd.sendline("freezing node 1 during the on-call drill")
    gd.expect("noted")
    gd.expect(r"proceed\? \[y\]es")
    assert job.states()[node1][0] == "running", "injected before the operator said yes"
    gd.sendline("y")
    gd.expect("injected container_pause")
    gd.expect("STOP: dead_s > 4", timeout=90)
    gd.expect("reverted freeze")
    gd.expect("report: ")
    gd.expect(pexpect.EOF)
    gd.close()
    assert gd.exitstatus == 1, gd.before

    assert job.states()[node1][0] == "running", "the frozen container was not thawed"
    report = json.loads((job.work / "gd-freeze" / "report.json").read_text())
    assert report["status"] == "stopped" and "dead_s > 4" in report["reason"]
    assert [d["decision"] for d in report["decisions"]] == ["yes"]
    assert report["notes"][0]["text"] == "freezing node 1 during the on-call drill"
    actions = [e["action"] for e in report["timeline"]]
    assert actions.index("inject") < actions.index("reverted") < actions.index("end")
    fault = report["faults"][0]
    assert fault["type"] == "container_pause" and fault["target"]["nodes"] == [1]
    assert fault["t_revert"] is not None and fault["revert_error"] is None
    assert report["reference_pace"] and report["reference_pace"] > 0
    assert (job.work / "gd-freeze" / "report.md").read_text().startswith("# Game day: freeze")
    # The game day's own journal: applied and reverted, nothing for cleanup to do.
    records = [json.loads(x) for x in (job.work / "gd-freeze" / "fault_journal.jsonl").read_text().splitlines()]
    assert [r["op"] for r in records][-1] == "reverted"


@pytest.mark.timeout(300)
def test_ctrl_c_reverts_everything_and_exits_130(job: Job) -> None:
    plan = _plan(job, "interrupted", "steps:\n"
                 "  - name: freeze\n    inject: {type: container_pause, target: {node: 1}}\n"
                 "  - wait: {seconds: 300}\n")
    node1 = f"{job.run_id}-n1"
    gd = job.spawn("gameday", plan, "--yes", "--out", "gd-interrupted")
    gd.expect("injected container_pause")
    assert job.states()[node1][0] == "paused"
    gd.sendintr()
    gd.expect("reverted freeze")
    gd.expect(pexpect.EOF)
    gd.close()
    assert gd.exitstatus == 130, gd.before
    assert job.states()[node1][0] == "running"
    assert json.loads((job.work / "gd-interrupted" / "report.json").read_text())["status"] == "interrupted"


@pytest.mark.machine_cleanup
@pytest.mark.timeout(300)
def test_sigkilled_game_day_is_reverted_by_cleanup(job: Job) -> None:
    plan = _plan(job, "abandoned", "steps:\n"
                 "  - name: freeze\n    inject: {type: container_pause, target: {node: 1}}\n"
                 "  - wait: {seconds: 300}\n")
    node1 = f"{job.run_id}-n1"
    gd = job.spawn("gameday", plan, "--yes", "--out", "gd-abandoned")
    gd.expect("injected container_pause")
    assert job.states()[node1][0] == "paused"
    gd.kill(signal.SIGKILL)
    gd.close(force=True)
    assert job.states()[node1][0] == "paused", "nothing should have reverted it yet"
    check = job.cli("cleanup", "--check")
    assert "container_pause" in check.stdout, check.stdout
    res = job.cli("cleanup", "--run-dir", str(job.work / "gd-abandoned"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "reverted" in res.stdout and job.states()[node1][0] == "running"


@pytest.mark.timeout(300)
def test_live_limits_disconnect_and_loss_take_effect_and_are_restored(job: Job) -> None:
    # Last of the tests that need the job to train (only the SIGKILL test, which needs its
    # containers and not its steps, comes after): its ranks restart after the cut.
    plan = _plan(job, "squeeze", "steps:\n"
                 "  - name: squeeze\n    inject: {type: container_limits, target: {node: 0},"
                 " params: {cpus: 0.25, memory_mb: 2048}}\n"
                 "  - ask: limits in effect?\n"
                 "  - name: cut\n    inject: {type: container_disconnect, target: {node: 1}}\n"
                 "  - ask: node 1 cut off?\n"
                 "  - name: lossy\n    inject: {type: container_packet_loss, target: {node: 0}, params: {percent: 100}}\n"
                 "  - ask: node 0 deaf?\n"
                 "  - revert: all\n")
    client = _docker()
    n0, n1 = client.containers.get(f"{job.run_id}-n0"), client.containers.get(f"{job.run_id}-n1")
    net = f"{job.run_id}-net"
    address = n1.attrs["NetworkSettings"]["Networks"][net]["IPAddress"]

    def host_config(cont):  # noqa: ANN001, ANN202
        cont.reload()
        return cont.attrs["HostConfig"]

    gd = job.spawn("gameday", plan, "--yes", "--out", "gd-squeeze")
    gd.expect("limits in effect\\?")
    hc = host_config(n0)
    assert (hc["CpuQuota"], hc["CpuPeriod"], hc["Memory"]) == (25_000, 100_000, 2048 * 2**20)
    gd.sendline("yes, steps slowed")
    gd.expect("node 1 cut off\\?")
    n1.reload()
    assert net not in n1.attrs["NetworkSettings"]["Networks"]
    gd.sendline("yes")
    gd.expect("node 0 deaf\\?")
    n0_address = n0.attrs["NetworkSettings"]["Networks"][net]["IPAddress"]
    # Every packet node 0 receives is dropped: a SYN to a closed port gets no RST back.
    assert _connect(n0_address) == "timeout"
    gd.sendline("yes")
    gd.expect(pexpect.EOF)
    gd.close()
    assert gd.exitstatus == 0, gd.before
    hc = host_config(n0)
    assert hc["CpuQuota"] in (0, -1) and hc["Memory"] >= 8 * 2**30  # no CPU limit; memory: the host's
    n1.reload()
    assert n1.attrs["NetworkSettings"]["Networks"][net]["IPAddress"] == address
    assert _connect(n0_address) == "refused"  # answered again
    attached = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    assert not [n for n in attached if n == f"tc-{short_id(job.run_id)}-c0"], attached
    client.close()
    # Reconnected, node 1 is a node the job can use again: its ranks, restarted since the cut
    # (the reconnected interface is eth1), rejoin and every rank steps.
    assert job.stepping(timeout=180), "after the revert the job's ranks never all stepped again"


def _connect(address: str) -> str:
    import socket

    try:
        socket.create_connection((address, 9), timeout=2).close()
        return "connected"
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "timeout"


@pytest.mark.machine_cleanup
@pytest.mark.timeout(300)
def test_sigkilled_controller_then_cleanup_leaves_no_container_or_network(live_job: Job) -> None:
    job = live_job
    client = _docker()
    label = {"label": f"trainchaos.run={job.run_id}"}

    def left() -> list[str]:
        return ([c.name for c in client.containers.list(all=True, filters=label)]
                + [n.name for n in client.networks.list(filters=label)]
                + [v.name for v in client.volumes.list(filters=label)])

    os.kill(job.controller.pid, signal.SIGKILL)
    job.controller.wait(timeout=10)
    assert any(name.endswith("-net") for name in left()) and any(name.endswith("-n0") for name in left())
    check = job.cli("cleanup", "--check")
    assert check.returncode == 1 and job.run_id in check.stdout, check.stdout
    res = job.cli("cleanup", "--run-dir", str(job.run_dir), timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert left() == []
    assert client.images.list(filters=label) == []
    check = job.cli("cleanup", "--check")
    ours = [line for line in check.stdout.splitlines() if job.run_id in line or "docker_" in line]
    assert ours == [], check.stdout
    client.close()


def _loosened(plan: Path, work: Path) -> str:
    """The shipped plan with its stop conditions and its wait for progress given minutes: the
    staging job restarts cold, and under make test's load its survivor stepped again only
    after the plan's 30 s of dead_s (a fresh clone, 2026-12-06: stopped at dead_s 30.26, the
    round re-formed 8 s after the outage and the cold rank not up 22 s later). What this test
    judges is the detection and the report; how soon a job recovers is a benchmark's."""
    doc = yaml.safe_load(plan.read_text())
    doc["stop_when"] = ["dead_s > 240"]
    for step in doc["steps"]:
        if "wait" in step:
            step["wait"]["within_s"] = 240
    path = work / plan.name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


@pytest.mark.timeout(600)
def test_power_domain_then_freeze_a_node_against_the_staging_job(staging: Job) -> None:
    """Issue 26, as an operator plays it: the outage of pd-b is detected and the check sees
    it, the report's metrics and Faults table tell the same count; then the freeze of node 2
    (down since the outage) stops before the step with one line, exit 2, nothing touched."""
    power = _loosened(REPO / "gamedays" / "power-domain.yaml", staging.work)
    freeze = str(REPO / "gamedays" / "freeze-a-node.yaml")
    a, b = staging.hosts
    assert staging.placement() == {f"{staging.run_id}-n0": a, f"{staging.run_id}-n1": b, f"{staging.run_id}-n2": b}
    gd = staging.spawn("gameday", power, "--out", "gd-power")
    gd.expect("stop when")  # the live panel (a terminal): stop conditions against their values
    gd.expect(r"proceed\? \[y\]es", timeout=90)
    gd.sendline("y")
    gd.expect("injected power_outage")
    gd.expect(r"check detections >= 1: (passed|FAILED)", timeout=60)
    assert gd.match.group(1) == "passed", gd.before
    gd.expect("report: ", timeout=300)
    gd.expect(pexpect.EOF)
    gd.close()
    report = json.loads((staging.work / "gd-power" / "report.json").read_text())
    assert gd.exitstatus == 0, (report["status"], report["reason"])
    [fault] = report["faults"]
    assert fault["type"] == "power_outage" and fault["target"]["nodes"] == [1, 2]
    assert fault["detections"] >= 1 and 0 <= fault["detection_s"] < 10
    # One source: the metric at the end is the Faults table's total, event for event.
    final = report["metrics"][-1]
    assert final["label"] == "final"
    assert final["detections"] == len(report["detections"]) == fault["detections"] + report["detections_before_faults"]
    check = next(e for e in report["timeline"] if e["action"] == "check")
    assert check["outcome"] == "passed" and check["metrics"]["detections"] >= 1
    states = staging.states()
    node2 = f"{staging.run_id}-n2"
    assert states[node2][0] == "exited"

    dry = staging.cli("gameday", freeze, "--dry-run")
    assert dry.returncode == 2, dry.stdout + dry.stderr
    assert f"node 2 is down: its container {node2} is exited, not running" in dry.stdout

    gd = staging.spawn("gameday", freeze, "--yes", "--out", "gd-freeze")
    # pexpect matches with DOTALL: a greedy (.*) would swallow the next line too whenever it
    # arrives in the same read, which is the terminal's timing, not the game day's output.
    gd.expect("game day precondition_failed: ([^\r\n]*)\r\n", timeout=60)
    line = gd.match.group(1)
    gd.expect(pexpect.EOF)
    gd.close()
    assert gd.exitstatus == 2
    assert line == (f"{freeze}: steps[1].inject.target: node 2 is down: its container {node2} is exited, not "
                    "running; container_pause (freeze) was not started, nothing touched"), line
    report = json.loads((staging.work / "gd-freeze" / "report.json").read_text())
    assert report["status"] == "precondition_failed" and report["faults"] == []
    journal = staging.work / "gd-freeze" / "fault_journal.jsonl"
    assert not journal.exists() or journal.read_text() == "", "the fault reached the journal (and the engine)"
    assert staging.states() == states, "a container changed"
