"""Warm start (harness.warm_start): a rank killed under it is the training process, torchrun
sees it fail, the group recovers, and the model ends bitwise where a cold run's does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from chaos.contract import AGENT_ZYGOTE_KEEPER_ENV
from chaos.runfiles.events import read_events
from chaos.runner.run import run_scenario_once
from chaos.scenario.load import parse_scenario
from chaos.util.procs import find_run_processes, kill_pids, process_state
from tests.integration._support import REPO


def _scenario(warm: bool, faults: list[dict]) -> object:
    return parse_scenario({
        "name": f"warm-start-{'warm' if warm else 'cold'}",
        "seed": 11,
        "workload": {"harness": {"steps": 40, "warm_start": warm, "checkpoint": {"every_steps": 10}}},
        "topology": {"nodes": 2, "ranks_per_node": 2},
        "faults": faults,
        "timeout_s": 240,
    }, "<test_warm_start>")


def _digest(run_dir: str) -> str:
    with open(os.path.join(run_dir, "final.json"), encoding="utf-8") as fh:
        return json.load(fh)["digest"]


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_a_rank_killed_under_warm_start_is_the_trainer_and_the_model_ends_as_cold(tmp_path, state_dir):
    cold = run_scenario_once(_scenario(False, []), str(tmp_path / "cold"), 11, with_faults=False).to_dict()
    assert cold["status"] == "completed", cold["error"]
    assert cold["rank_launch"] == "cold"

    kill = {"type": "kill_rank", "target": {"rank": 3}, "trigger": {"at_step": 25}}
    warm = run_scenario_once(_scenario(True, [kill]), str(tmp_path / "warm"), 11).to_dict()
    run_dir = warm["run_dir"]
    assert warm["status"] == "completed", warm["error"]
    assert warm["rank_launch"] == "warm"
    assert not find_run_processes(warm["run_id"]), "processes of the run left behind (a zygote?)"

    events = read_events(os.path.join(run_dir, "events"))
    (fault,) = warm["faults"]
    starts = [e for e in events if e["kind"] == "rank_start" and e["rank"] == 3]
    before = [e for e in starts if e["t"] < fault["t_inject"]]
    # The pid the fault killed is the one rank 3 announced: the forked training process.
    assert fault["details"]["pids"] == [before[-1]["pid"]]
    detected = [e for e in events if e["kind"] == "detected" and e["t"] >= fault["t_inject"]]
    assert detected and detected[0]["suspect"] == "rank-3"
    # torchrun saw a worker of that node fail and restarted the group (which failure it
    # reports first, the killed rank's -9 or a peer's exit on detecting it, is a race of its
    # monitor; that the proxy dies of the rank's SIGKILL is tests/unit/test_zygote.py's).
    logs = {name: open(os.path.join(run_dir, "logs", name), encoding="utf-8", errors="replace").read()
            for name in sorted(os.listdir(os.path.join(run_dir, "logs")))}
    node = before[-1]["node"]
    assert "failed (exitcode: " in logs[f"node-{node}.log"]
    after = [e for e in events if e["kind"] == "rank_start" and e["t"] > fault["t_inject"]]
    assert sorted(e["rank"] for e in after) == [0, 1, 2, 3] and {e["restart_count"] for e in after} == {1}
    assert next(e for e in after if e["rank"] == 3)["pid"] != before[-1]["pid"]
    # Each node's zygote was up, single-threaded, before forking (harness.zygote.serve).
    assert all(text.count("forking ranks") == 1 for text in logs.values())
    (metrics,) = warm["metrics"]["faults"]
    assert metrics["resumed_from"] == 20 and metrics["lost_steps"] == fault["step_at_inject"] - 20
    # Seeded, same world size: warm and cold training end bitwise equal.
    assert _digest(run_dir) == _digest(cold["run_dir"])


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_sixteen_ranks_start_warm_by_default_and_a_kill_is_blamed_with_ring_heartbeats(tmp_path, state_dir,
                                                                                       monkeypatch):
    """Issue 45: a job of 16 ranks (4 x 4) that says nothing of warm_start starts warm
    (harness.WARM_BY_DEFAULT_FROM_RANKS), and above 9 ranks each rank watches only its
    node-mates and the next 8 ranks (harness.health.watched_ranks): the killed rank's
    watchers still see it die first, and the group recovers at full size."""
    monkeypatch.delenv("TRAINCHAOS_WARM_START", raising=False)  # the default itself, not the suite's switch
    scenario = parse_scenario({
        "name": "sixteen-ranks", "seed": 5,
        "workload": {"harness": {"steps": 12, "global_batch": 16, "model": {"name": "mlp"},
                                 "checkpoint": {"every_steps": 5}}},
        "topology": {"nodes": 4, "ranks_per_node": 4},
        "faults": [{"type": "kill_rank", "target": {"rank": 13}, "trigger": {"at_step": 7}}],
        "timeout_s": 240,
    }, "<test_warm_start>")
    assert scenario.workload.harness == {"steps": 12, "global_batch": 16, "model": {"name": "mlp"},
                                         "checkpoint": {"every_steps": 5}, "warm_start": True}
    record = run_scenario_once(scenario, str(tmp_path / "run"), 5).to_dict()
    assert record["status"] == "completed", record["error"]
    assert record["rank_launch"] == "warm"
    events = read_events(os.path.join(record["run_dir"], "events"))
    (fault,) = record["faults"]
    detected = sorted((e for e in events if e["kind"] == "detected" and e["t"] >= fault["t_inject"]),
                      key=lambda e: e["t"])
    assert detected and detected[0]["suspect"] == "rank-13", detected[:3]
    after = {e["rank"] for e in events if e["kind"] == "rank_start" and e["t"] > fault["t_inject"]}
    assert after == set(range(16))
    assert not find_run_processes(record["run_id"])


_REPORT = """\
import json, os, sys
fds = sorted(os.listdir("/proc/self/fd"))[:-1]  # the last: the listing's own
with open(os.environ["TRAINCHAOS_TEST_REPORT"], "w") as fh:
    json.dump({"argv": sys.argv, "path0": sys.path[0], "pid": os.getpid(), "ppid": os.getppid(),
               "sid": os.getsid(0), "cwd": os.getcwd(), "fds": fds,
               "cmdline": [a for a in open("/proc/self/cmdline", "rb").read().decode().split("\\0") if a],
               "environ": open("/proc/self/environ", "rb").read().decode(errors="replace"),
               "tmpdir": __import__("tempfile").gettempdir(), "torch": "torch" in sys.modules}, fh)
if sys.argv[1] == "wait":
    os.kill(os.getpid(), 19)  # SIGSTOP: held until the test has looked
print("agent says hello", flush=True)
sys.exit(int(sys.argv[2]))
"""


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_warm_nodes_agent_is_forked_from_imports_done_once_and_looks_started(tmp_path):
    """``chaos.workload.agent_forks``: the agent the backend gets is a real process of its own
    session, with the node's environment, command line and working directory, the server's
    child, and its exit (a code, or a signal) reaches the controller as a Popen's would."""
    from chaos.workload.agent_forks import ForkedAgent, start_agent

    python = sys.executable
    run_id = f"trainchaos-agentfork-{os.getpid()}"
    env = dict(os.environ, TRAINCHAOS_RUN_ID=run_id, TRAINCHAOS_NODE="1", TMPDIR=str(tmp_path),
               OMP_NUM_THREADS="1")
    try:
        started = []
        for name, argv in (("first", ["done", "3"]), ("second", ["wait", "0"])):
            with open(tmp_path / f"{name}.log", "ab") as log:
                agent_env = dict(env, TRAINCHAOS_TEST_REPORT=str(tmp_path / f"{name}.json"))
                agent = start_agent([python, "-c", _REPORT, *argv], agent_env, str(tmp_path), log)
            assert isinstance(agent, ForkedAgent), "the agent was started as a new interpreter"
            started.append(agent)
        first, second = started
        assert first.wait(timeout=120) == 3
        assert "agent says hello" in (tmp_path / "first.log").read_text()
        seen = json.loads((tmp_path / "first.json").read_text())
        # Forked from a process that had imported torch: the server, not this controller, is its parent.
        assert seen["torch"] and seen["ppid"] != os.getpid()
        assert seen["argv"] == ["-c", "done", "3"] and seen["path0"] == ""
        assert seen["cmdline"] == [python, "-c", _REPORT, "done", "3"]
        assert seen["sid"] == seen["pid"] and seen["cwd"] == str(tmp_path) and seen["fds"] == ["0", "1", "2"]
        assert f"TRAINCHAOS_RUN_ID={run_id}" in seen["environ"].split("\0")
        assert seen["tmpdir"] == str(tmp_path)
        # The same server forked the second: one import for every agent of this controller.
        deadline = time.monotonic() + 60
        while process_state(second.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.05)  # it stops itself once its report is written and closed
        assert json.loads((tmp_path / "second.json").read_text())["ppid"] == seen["ppid"]
        (found,) = find_run_processes(run_id)
        assert found.pid == second.pid and found.node == 1
        with pytest.raises(subprocess.TimeoutExpired):
            second.wait(timeout=0.2)
        assert second.poll() is None
        os.kill(second.pid, signal.SIGKILL)
        assert second.wait(timeout=30) == -signal.SIGKILL
    finally:  # a stopped agent outlives this test otherwise
        kill_pids([p.pid for p in find_run_processes(run_id)])


_CONTROLLER = """\
import os, sys
from chaos.workload.agent_forks import start_agent
with open(sys.argv[1] + ".log", "ab") as log:
    agent = start_agent([sys.executable, "-c", sys.argv[2], "done", "0"],
                        dict(os.environ, TRAINCHAOS_TEST_REPORT=sys.argv[1] + ".json"), os.getcwd(), log)
sys.exit(agent.wait(timeout=120))
"""


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_controllers_given_a_keeper_fork_from_one_agent_zygote_that_ends_with_the_keeper(tmp_path):
    """contract.AGENT_ZYGOTE_KEEPER_ENV: two controllers, one after the other, fork their
    agents from the one server the first started, which outlives it and ends when the
    keeper closes its pipe."""
    read_end, write_end = os.pipe()
    env = dict(os.environ, **{AGENT_ZYGOTE_KEEPER_ENV: str(read_end)}, TMPDIR=str(tmp_path),
               OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    server = None
    try:
        for name in ("first", "second"):
            done = subprocess.run([sys.executable, "-c", _CONTROLLER, str(tmp_path / name), _REPORT], env=env,
                                  cwd=tmp_path, pass_fds=(read_end,), capture_output=True, text=True, timeout=200)
            assert done.returncode == 0, done.stderr[-3000:]
            assert "agent zygotes of its own" not in done.stderr and "failed" not in done.stderr, done.stderr
        first, second = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("first", "second"))
        server = first["ppid"]
        assert first["torch"] and second["ppid"] == server, "the second controller started a server of its own"
        assert process_state(server) is not None, "the server ended with the controller that started it"
    finally:
        os.close(write_end)
        os.close(read_end)
    assert server is not None
    deadline = time.monotonic() + 30
    while process_state(server) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_state(server) in (None, "Z"), "the server outlived its keeper's pipe"


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_keepers_server_exits_when_idle_and_its_controller_starts_another(tmp_path, monkeypatch):
    """agent_forks.KEEPER_IDLE_EXIT_S: a shared server outlives its controller, so one that
    no controller asks for any more must go by itself, never while an agent of it runs."""
    from chaos.workload import agent_forks
    from chaos.workload.agent_forks import start_agent

    read_end, write_end = os.pipe()
    monkeypatch.setenv(AGENT_ZYGOTE_KEEPER_ENV, str(read_end))
    monkeypatch.setattr(agent_forks, "KEEPER_IDLE_EXIT_S", 1.0)
    monkeypatch.setattr(agent_forks, "_servers", {})
    env = dict(os.environ, TMPDIR=str(tmp_path), OMP_NUM_THREADS="1")
    # The agent runs until the test lets it go: however late the test's own wait returns
    # on a busy host, the agent is still running when the server is looked at.
    release = tmp_path / "release"
    waiter = f"import os, time\nwhile not os.path.exists({str(release)!r}):\n    time.sleep(0.05)"
    try:
        with open(tmp_path / "agent.log", "ab") as log:
            agent = start_agent([sys.executable, "-c", waiter], env, str(tmp_path), log)
            assert isinstance(agent, agent_forks.ForkedAgent)
            (server,) = agent_forks._servers.values()
            first = server.proc.pid
            time.sleep(2)  # twice the idle time: had it counted its agent as idle, it would be gone
            assert server.proc.poll() is None, "the server left while its agent ran"
            release.touch()
            assert agent.wait(timeout=60) == 0
            server.proc.wait(timeout=30)  # idle for a second once its agent is done
            again = start_agent([sys.executable, "-c", "pass"], env, str(tmp_path), log)
        assert isinstance(again, agent_forks.ForkedAgent), "no new server: the agent started cold"
        assert server.proc.pid != first and again.wait(timeout=120) == 0
    finally:
        for each in agent_forks._servers.values():
            each.close()
        os.close(write_end)
        os.close(read_end)
