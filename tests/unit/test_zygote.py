"""harness.zygote: the warm-start fork server and its client, without torch.

A zygote here serves from a bare interpreter (the fork protocol is the same; what it has
imported is not its business), and the "rank" is a small module that reports what it sees.
The client is run as torchrun runs a worker: its own session, signalled by process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from chaos import contract
from harness import procenv
from harness.procenv import ENV_ROOM_BYTES, environ_block
from harness.zygote import FORWARDED
from harness.zygote_client import light_worker_argv

REPO = Path(__file__).resolve().parents[2]

REPO = Path(__file__).resolve().parents[2]

# A stand-in torchrun agent (its command line carries torch.distributed.run, as the real one's
# does): it forks the node's zygote as the launcher's prelude does, then waits as torchrun
# would, with what it kept of the fork on stdout.
_AGENT = textwrap.dedent("""
    # trainchaos test: stand-in for the torch.distributed.run agent
    import json, os, sys
    from chaos import contract
    from harness.zygote import fork_from_agent
    zygote = fork_from_agent(("-m", "harness.zygote", "serve"), modules=("json",))
    blocked = next(int(line.split()[1], 16) for line in open("/proc/self/status") if line.startswith("SigBlk:"))
    print(json.dumps({"zygote": zygote, "blocked": blocked, "fds": sorted(os.listdir("/proc/self/fd")),
                      "room": contract.ZYGOTE_ENV_ROOM_ENV in os.environ}), flush=True)
    sys.stdin.read()
""")

_TARGET = textwrap.dedent("""
    import json, os, sys, time
    blocked = next(int(line.split()[1], 16) for line in open("/proc/self/status") if line.startswith("SigBlk:"))
    print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0), "blocked": blocked,
                      "argv": sys.argv[1:], "cwd": os.getcwd(), "fds": sorted(os.listdir("/proc/self/fd")),
                      "rank": os.environ.get("RANK"), "main": sys.modules["__main__"].__spec__.name}),
          flush=True)
    if sys.argv[1] == "exit":
        sys.exit(int(sys.argv[2]))
    open("started", "w").close()
    time.sleep(60)
""")


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


@dataclass
class Node:
    agent: subprocess.Popen
    zygote: int
    env: dict[str, str]
    kept: dict  # what the agent reported after the fork


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    """A node under warm start: its agent, and the zygote the agent forked."""
    name = f"trainchaos-zygote-test-{uuid.uuid4().hex[:8]}"
    env = _env(**{contract.ZYGOTE_SOCKET_ENV: name})
    agent = subprocess.Popen([sys.executable, "-c", _AGENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env={**env, contract.ZYGOTE_ENV_ROOM_ENV: " " * ENV_ROOM_BYTES})
    assert agent.stdout is not None
    kept = json.loads(agent.stdout.readline())
    (tmp_path / "zt_target.py").write_text(_TARGET)
    yield Node(agent, kept["zygote"], env, kept)
    agent.kill()  # the zygote goes with it (PR_SET_PDEATHSIG)
    agent.wait()
    with contextlib.suppress(ProcessLookupError):
        os.kill(kept["zygote"], signal.SIGKILL)


def _client(env: dict[str, str], cwd: Path, *args: str, rank: str = "3") -> subprocess.Popen:
    # The command the warm agent gives torchrun (its --no-python, then what torchrun runs).
    argv = light_worker_argv(["-m", "harness.zygote", "run", "zt_target", *args])
    assert argv[0] == "--no-python"
    return subprocess.Popen(argv[1:], cwd=cwd, env={**env, "RANK": rank}, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)  # as torchrun starts a worker


def test_the_warm_agent_starts_its_workers_as_the_client_file_without_site() -> None:
    agent = ["-c", "AGENT", "--nnodes", "2", "--tee", "3", "-m", "harness.zygote", "rank", "--steps", "5"]
    argv = light_worker_argv(agent, python="/py")
    client = str(REPO / "harness" / "zygote_client.py")
    assert argv == ["-c", "AGENT", "--nnodes", "2", "--tee", "3", "--no-python", "/py", "-S", "-u", client,
                    "rank", "--steps", "5"]
    # Cold workers, a user's own module, or no worker at all: left as they are.
    for other in (["-m", "harness", "--steps", "5"], ["-m", "harness.zygote", "serve", "1"], ["-m", "harness.zygote"]):
        assert light_worker_argv(other) == other
    # Started that way it runs with the standard library alone: no site, so no torch on its path.
    probe = subprocess.run([sys.executable, "-S", "-u", client, "nope"], capture_output=True, text=True, timeout=30,
                           cwd="/", env={"PATH": "/usr/bin:/bin"})
    assert probe.returncode == 2 and "usage: " in probe.stderr, probe.stderr


def _started(client: subprocess.Popen, cwd: Path) -> dict:
    assert client.stdout is not None
    info = json.loads(client.stdout.readline())
    deadline = time.monotonic() + 10
    while not (cwd / "started").exists():
        assert time.monotonic() < deadline, "the rank never started"
        time.sleep(0.01)
    return info


def _gone(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.01)
    return False


def test_the_rank_is_forked_as_torchrun_would_have_started_it(node, tmp_path):
    client = _client(node.env, tmp_path, "exit", "7")
    out, _ = client.communicate(timeout=20)
    info = json.loads(out)  # the rank wrote to the client's stdout: its fds were handed over
    assert client.returncode == 7  # the rank's exit code, through the proxy
    assert info["ppid"] == node.zygote and info["pid"] != client.pid
    assert info["sid"] == info["pid"]  # a session of its own, as torchrun's workers
    assert info["argv"] == ["exit", "7"] and info["cwd"] == str(tmp_path)
    assert info["fds"] == ["0", "1", "2", "3"]  # 3: its own listdir; nothing of the zygote's
    assert info["rank"] == "3" and info["main"] == "zt_target"


def test_a_script_is_run_as_python_would_run_it(node, tmp_path):
    """A stack's script (``script <path> <args>``): __main__ is the file, argv[0] the file, its
    directory first on the path (a sibling module imports), the rank's own working directory."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "zt_sibling.py").write_text("VALUE = 'sibling'\n")
    (src / "train.py").write_text(textwrap.dedent("""
        import json, os, sys
        import zt_sibling
        main = sys.modules["__main__"]
        print(json.dumps({"argv": sys.argv, "file": main.__file__, "name": __name__, "cwd": os.getcwd(),
                          "sibling": zt_sibling.VALUE, "ppid": os.getppid()}), flush=True)
        sys.exit(int(sys.argv[1]))
    """))
    work = tmp_path / "run"
    work.mkdir()
    client = subprocess.Popen([sys.executable, "-m", "harness.zygote", "script", str(src / "train.py"), "5", "x"],
                              cwd=work, env={**node.env, "RANK": "0"}, stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    out, _ = client.communicate(timeout=20)
    info = json.loads(out)
    assert client.returncode == 5 and info["ppid"] == node.zygote
    assert info["argv"] == [str(src / "train.py"), "5", "x"] and info["file"] == str(src / "train.py")
    assert info["name"] == "__main__" and info["sibling"] == "sibling" and info["cwd"] == str(work)


def test_the_rank_not_its_proxy_carries_rank_where_trainchaos_looks(node, tmp_path):
    """chaos.util.procs and the storage layer read /proc/<pid>/environ: the forked rank must show
    its own environment there, and the proxy must not look like the rank."""
    from chaos.util.procs import find_run_processes

    env = node.env
    run_id = f"test-{uuid.uuid4().hex[:8]}"
    client = _client({**env, contract.RUN_ID_ENV: run_id}, tmp_path, "wait", rank="5")
    try:
        info = _started(client, tmp_path)
        rank_env = procenv.proc_environ(info["pid"])
        assert rank_env["RANK"] == "5" and rank_env["PYTHONPATH"] == env["PYTHONPATH"]
        assert contract.ZYGOTE_ENV_ROOM_ENV not in rank_env
        found = {p.pid: p.rank for p in find_run_processes(run_id)}
        assert found == {info["pid"]: 5, client.pid: None}  # the run's two processes; one rank
    finally:
        os.killpg(client.pid, signal.SIGKILL)
        client.wait()


def test_a_kill_of_the_rank_is_a_kill_of_the_worker_torchrun_sees(node, tmp_path):
    client = _client(node.env, tmp_path, "wait")
    info = _started(client, tmp_path)
    os.kill(info["pid"], signal.SIGKILL)  # kill_rank hits the announced pid: the rank
    assert client.wait(timeout=10) == -signal.SIGKILL


def test_torchrun_stopping_the_worker_stops_the_rank(node, tmp_path):
    client = _client(node.env, tmp_path, "wait")
    info = _started(client, tmp_path)
    os.killpg(client.pid, signal.SIGTERM)  # SubprocessHandler.close: killpg(worker, SIGTERM)
    assert client.wait(timeout=10) == -signal.SIGTERM
    assert _gone(info["pid"])


def test_a_worker_torchrun_sigkills_takes_its_rank_along(node, tmp_path):
    client = _client(node.env, tmp_path, "wait")
    info = _started(client, tmp_path)
    os.killpg(client.pid, signal.SIGKILL)  # after torchrun's stop grace period
    client.wait()
    assert _gone(info["pid"]), "the rank trained on after its worker was killed"


def test_when_the_zygote_dies_each_client_ends_its_rank(node, tmp_path):
    client = _client(node.env, tmp_path, "wait")
    info = _started(client, tmp_path)
    os.kill(node.zygote, signal.SIGKILL)
    assert client.wait(timeout=10) == 1
    assert _gone(info["pid"])


def test_the_zygote_dies_with_its_agent_and_takes_no_rank_of_a_live_worker_along(node, tmp_path):
    client = _client(node.env, tmp_path, "wait")
    info = _started(client, tmp_path)
    node.agent.kill()  # a node's agent gone (torchrun's workers then go too: their client ends them)
    assert _gone(node.zygote), "the zygote outlived its agent"
    assert client.wait(timeout=10) == 1
    assert _gone(info["pid"])


def test_the_forked_zygote_is_the_agents_child_with_its_own_command_line(node, tmp_path):
    """One import per node: the agent forked its zygote. What ps and chaos.util.procs show of it
    is the zygote's own command line, not torchrun's: a rank that looks for its agent among
    its ancestors (harness.quarantine.agent_pid: a stop request, the grow-back check) must
    find the agent, never the zygote."""
    from harness.quarantine import agent_pid

    served = _client(node.env, tmp_path, "exit", "0")  # the zygote is up once it has served one
    served.communicate(timeout=20)
    assert served.returncode == 0
    zygote, agent = node.zygote, node.agent.pid
    cmdline = [a.decode() for a in Path(f"/proc/{zygote}/cmdline").read_bytes().split(b"\0") if a]
    assert cmdline == [sys.executable, "-u", "-m", "harness.zygote", "serve", str(agent)]
    assert int(Path(f"/proc/{zygote}/stat").read_text().rsplit(")", 1)[1].split()[1]) == agent
    assert agent_pid(start=zygote) == agent
    # Nothing of the agent's but its stdout and stderr: stdin /dev/null, the listener, the selector.
    deadline = time.monotonic() + 5
    while True:  # the served rank's connection is closed just after its status went out
        fds = {fd: os.readlink(f"/proc/{zygote}/fd/{fd}") for fd in os.listdir(f"/proc/{zygote}/fd")}
        if len(fds) <= 5 or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert fds["0"] == "/dev/null" and len(fds) == 5
    assert sorted(target.split(":")[0] for fd, target in fds.items() if int(fd) > 2) == ["anon_inode", "socket"]
    # The agent goes on to torchrun without the listener, with its signal mask back, and
    # without the ranks' room in the environment its workers inherit.
    assert node.kept["fds"] == ["0", "1", "2", "3"]  # 3: its own listdir
    assert node.kept["blocked"] == 0 and node.kept["room"] is False
    # The zygote blocks the stop signals (a node's stop is for its ranks).
    blocked = next(int(line.split()[1], 16) for line in Path(f"/proc/{zygote}/status").read_text().splitlines()
                   if line.startswith("SigBlk:"))
    assert blocked & sum(1 << (sig - 1) for sig in FORWARDED) == sum(1 << (sig - 1) for sig in FORWARDED)


def test_an_agent_whose_imports_started_a_thread_forks_no_zygote(tmp_path):
    code = textwrap.dedent("""
        import threading, time
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        from harness.zygote import fork_from_agent
        fork_from_agent(("-m", "harness.zygote", "serve"), modules=("json",))
        print("torchrun would start now")
    """)
    name = f"trainchaos-zygote-test-{uuid.uuid4().hex[:8]}"
    res = subprocess.run([sys.executable, "-c", code], env=_env(**{contract.ZYGOTE_SOCKET_ENV: name}),
                         capture_output=True, text=True, timeout=20)
    assert res.returncode == 1 and "forking now is unsafe" in res.stderr and not res.stdout


def test_a_stop_for_the_whole_node_is_for_the_ranks_not_the_zygote(node, tmp_path):
    """A kill_node with SIGTERM, a Slurm drain or preemption signals every process of the
    node, the zygote too. Were it to die of that, each client would SIGKILL its rank before
    the rank's own handler (the emergency checkpoint) had done its work."""
    first = _client(node.env, tmp_path, "wait")
    rank = _started(first, tmp_path)
    for sig in FORWARDED:
        os.kill(node.zygote, sig)
    later = _client(node.env, tmp_path, "exit", "0")  # the zygote still forks, after the signals
    out, _ = later.communicate(timeout=20)
    assert later.returncode == 0 and not _gone(node.zygote, timeout_s=0.2)
    forwarded = sum(1 << (sig - 1) for sig in FORWARDED)
    assert json.loads(out)["blocked"] & forwarded == 0, "a forked rank must get the signals the zygote holds"
    assert first.poll() is None, "the rank forked before the signals was taken down with the zygote"
    os.kill(rank["pid"], signal.SIGTERM)  # the rank's own stop: its default action, as cold
    assert first.wait(timeout=10) == -signal.SIGTERM


def test_a_bad_request_gets_a_reason_not_a_fork(node):
    import socket

    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.connect("\0" + node.env[contract.ZYGOTE_SOCKET_ENV])
    socket.send_fds(conn, [json.dumps({"argv": []}).encode()], [0, 1, 2])
    reply = json.loads(conn.recv(1 << 16))
    conn.close()
    assert "expected one of module, script, argv, env, cwd" in reply["error"]


def test_without_a_zygote_the_client_says_so(tmp_path):
    res = subprocess.run([sys.executable, "-m", "harness.zygote", "rank", "--steps", "1"], cwd=tmp_path,
                         env={k: v for k, v in _env().items() if k != contract.ZYGOTE_SOCKET_ENV},
                         capture_output=True, text=True, timeout=20)
    assert res.returncode == 1 and contract.ZYGOTE_SOCKET_ENV in res.stderr


def test_forwarded_signals_include_what_torchrun_sends() -> None:
    assert signal.SIGTERM in FORWARDED and signal.SIGINT in FORWARDED


# -- harness.procenv ---------------------------------------------------------------------------
def test_environ_block_puts_what_trainchaos_reads_first_and_keeps_entries_whole() -> None:
    env = {"AAA": "x" * 40, "RANK": "2", contract.RUN_ID_ENV: "r1", "PATH": "/bin"}
    block, complete = environ_block(env, 64)
    entries = [e for e in block.split(b"\0") if e]
    assert not complete and len(block) == 64
    assert entries[:2] == [b"RANK=2", f"{contract.RUN_ID_ENV}=r1".encode()]
    assert b"PATH=/bin" in entries and all(b"=" in e for e in entries)  # AAA left out, whole
    block, complete = environ_block(env, 4096)
    assert complete and {e.split(b"=", 1)[0] for e in block.split(b"\0") if e} == {k.encode() for k in env}


def test_set_environ_is_what_others_read_and_what_libc_reads(tmp_path):
    code = textwrap.dedent("""
        import ctypes, os, sys, json
        from harness import procenv
        ok = procenv.set_environ({"RANK": "9", "ONLY": "this"})
        libc = ctypes.CDLL(None)
        libc.getenv.restype = ctypes.c_char_p
        print(json.dumps([ok, libc.getenv(b"RANK").decode(), dict(os.environ)]), flush=True)
        sys.stdin.readline()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], env=_env(PAD="x" * 4096), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    ok, from_libc, own = json.loads(proc.stdout.readline())
    seen = procenv.proc_environ(proc.pid)
    proc.stdin.write("\n")
    proc.stdin.close()
    proc.wait()
    assert ok and from_libc == "9" and own == {"RANK": "9", "ONLY": "this"}
    assert seen == {"RANK": "9", "ONLY": "this"}


# -- the launch ------------------------------------------------------------------------------
@pytest.mark.parametrize("warm", [False, True])
def test_the_harness_launch_starts_a_zygote_only_when_warm(tmp_path, warm: bool) -> None:
    from chaos.model import scenario as records
    from chaos.workload.harness import HarnessWorkload
    from chaos.workload.torchrun import AGENT_MAIN

    launch = HarnessWorkload(records.Workload(harness={"steps": 5, "warm_start": warm})).launch(str(tmp_path), 1)
    argv = launch.worker_argv
    agent = launch.launcher.agent_command(records.Topology(nodes=2, ranks_per_node=2), run_id="r",
                                          rdzv_endpoint="127.0.0.1:1", local_addr="127.0.0.1")
    program = agent[2]
    compile(program, "<agent>", "exec")
    assert launch.launcher.warm_start is warm and program.endswith(AGENT_MAIN)
    env = launch.launcher.node_env(0, records.Topology(nodes=2, ranks_per_node=2), "127.0.0.1:1")
    if warm:
        assert argv[:3] == ["-m", "harness.zygote", "rank"] and "--warm-start" in argv
        assert contract.ZYGOTE_SOCKET_ENV in program and "fork_from_agent(('-m', 'harness.zygote', 'serve'))" in program
        assert "name_records_by_frame()" in program  # harness.rdzv_records: warm only
        # The agent's environment block, which the zygote and its ranks inherit, has their room.
        assert env == {contract.ZYGOTE_ENV_ROOM_ENV: " " * ENV_ROOM_BYTES}
    else:
        assert argv[:2] == ["-m", "harness"] and program == AGENT_MAIN and env == {}


_SUBREAPER = textwrap.dedent("""
    import ctypes, os, subprocess, sys, time
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come here
    agent = subprocess.Popen([sys.executable, "-c", sys.argv[1], "--help"], stdout=subprocess.DEVNULL)
    agent.wait()
    orphans = []
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break  # no child left at all: none was handed to us
        if pid:
            orphans.append(pid)
        time.sleep(0.01)
    print(agent.returncode, orphans)
""")


def test_a_warm_agent_reaps_its_zygote_so_their_cpu_is_counted_by_whoever_waits_for_the_agent() -> None:
    """The zygote dies with its agent anyway (PR_SET_PDEATHSIG); an agent that left it to
    init left the CPU of the zygote and every rank it reaped uncounted: a test's or a
    controller's CPU accounting (the suite's timeline) missed the training of warm runs."""
    from chaos.workload.torchrun import agent_main

    program = agent_main(("-m", "harness.zygote", "serve"))
    # OMP_NUM_THREADS=1 as a node has it (chaos.cluster.local): else importing torch starts
    # a thread and the agent forks no zygote
    res = subprocess.run([sys.executable, "-c", _SUBREAPER, program], env=_env(OMP_NUM_THREADS="1"), capture_output=True,
                         text=True, timeout=120)
    assert res.stdout.split() == ["0", "[]"], (res.stdout, res.stderr[-2000:])


@pytest.mark.parametrize(("env", "scenario", "warm"), [
    ("1", None, True), ("0", None, False), ("", None, False),
    ("1", False, False), ("0", True, True),  # the scenario's own value wins
])
def test_trainchaos_warm_start_sets_the_harness_default_only(monkeypatch, tmp_path, env: str,
                                                               scenario: bool | None, warm: bool) -> None:
    from chaos.model import scenario as records
    from chaos.workload.harness import HarnessWorkload

    monkeypatch.setenv(contract.WARM_START_ENV, env)
    harness = {"steps": 5} if scenario is None else {"steps": 5, "warm_start": scenario}
    workload = HarnessWorkload(records.Workload(harness=harness))
    assert workload.config.warm_start is warm
    assert workload.launch(str(tmp_path), 1).launcher.warm_start is warm


def test_a_bad_trainchaos_warm_start_is_bad_input_that_names_the_variable(monkeypatch, tmp_path) -> None:
    from chaos.errors import EXIT_BAD_INPUT
    from chaos.scenario.load import ScenarioError, load_scenario

    path = tmp_path / "s.yaml"
    path.write_text("name: s\nworkload: {harness: {steps: 5}}\ntopology: {nodes: 1, ranks_per_node: 1}\n")
    monkeypatch.setenv(contract.WARM_START_ENV, "yes")
    with pytest.raises(ScenarioError) as err:
        load_scenario(str(path))
    text = str(err.value)
    assert err.value.exit_code == EXIT_BAD_INPUT and "s.yaml" in text
    assert "TRAINCHAOS_WARM_START='yes'" in text and "allowed: 0, 1" in text


def test_the_record_and_summary_say_how_the_ranks_were_started() -> None:
    from chaos.report.summary import render_summary
    from chaos.runfiles.record import RunRecord

    old = {"schema_version": 2, "scenario": {"name": "s"}, "status": "completed"}  # without the field
    assert RunRecord.model_validate(old).rank_launch == "cold"
    assert "| Rank start | cold: each rank a new interpreter" in render_summary(RunRecord.from_dict(old))
    warm = render_summary(RunRecord.from_dict({**old, "rank_launch": "warm"}))
    assert "| Rank start | warm: forked by a per-node zygote" in warm and "leave out the imports" in warm
