"""The controller's side of warm agents (``harness.agent_zygote``): start the agent zygote,
ask it to fork a node's agent, and hold that agent as a backend holds a ``Popen``.

A backend that places its agents as plain processes of this machine (``local``) asks the
workload's launcher to start each (``TorchrunPerNode.start_agent``), which calls
``start_agent`` here when the workload starts warm (``TorchrunPerNode.warm_start``). One server per interpreter and per environment the agents
share (a node's environment less the ``TRAINCHAOS_*`` names and ``TMPDIR``): every run of
this controller, the fault-free twin's and every node a fault brings back included, forks
its agents from the same imports. When the server cannot fork (it did not come up, or its
imports started a thread), the agent is started as before, as a new interpreter, and the
reason is said once.

A process that starts many controllers in turn (a test suite, a CI job) can let them share
their servers: it holds a pipe open and passes its read end to each controller, named by
``TRAINCHAOS_AGENT_ZYGOTE_KEEPER_FD`` (``contract.AGENT_ZYGOTE_KEEPER_ENV``). A server is
then named after that pipe and the environment it serves, the first controller that needs
it starts it with the pipe as its stdin, and every later one forks its agents from it: it
lives until the keeper closes the pipe, not until its first controller ends. Each
controller pays its imports once instead of once per controller (about 3 CPU-s here).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import itertools
import json
import os
import select
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from chaos import contract
from harness.procenv import ENV_ROOM_BYTES
from harness.zygote import receive_message, send_message, socket_address

__all__ = ["ForkedAgent", "keeper_server_prefix", "start_agent"]

ARGV_ROOM_BYTES = 32 << 10
"""Room in the server's argument area for a forked agent's command line (the agent's
program, ~2 KiB, and torchrun's options with the workload's after them)."""
ENV_ROOM_FACTOR = 3
"""The server's environment room, in ``ENV_ROOM_BYTES``: a node's agent writes its
environment there (the server's plus the node's names and the room its zygote and ranks
write theirs into), then each of them writes its own."""
MAX_SERVERS = 3
"""Agent zygotes one controller keeps (each holds torch's imports, ~0.3 GiB): beyond it, an
idle one is closed for a new one."""
_NODE_VARYING = ("TMPDIR", "PYTEST_CURRENT_TEST")
"""Names besides ``TRAINCHAOS_*`` whose value differs between nodes and runs (pytest names the
test running in ``PYTEST_CURRENT_TEST``, which a controller started by a test inherits), and
which nothing reads as it imports."""
KEEPER_IDLE_EXIT_S = 120.0
"""A server shared by a keeper's controllers that has had no agent and no request for this
long exits: a controller whose environment no later one shares leaves no server behind
holding its imports' memory (about 0.3 GiB) until the keeper ends."""
_CONNECT_TIMEOUT_S = 120.0
"""How long a request may wait for the server's imports (seconds on a busy machine)."""
_LOG = "trainchaos: warm agents:"


class ForkedAgent:
    """A node's agent forked by the agent zygote, held as a ``subprocess.Popen`` is: ``pid``,
    ``poll``, ``wait`` and ``returncode`` (negative: killed by that signal). The exit status
    comes from the server, whose child it is; were the server to go first, the agent's
    end is still seen (a pidfd), its status then unknown (255)."""

    def __init__(self, pid: int, conn: socket.socket, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._conn: socket.socket | None = conn
        self._pidfd: int | None = None
        with contextlib.suppress(OSError):
            self._pidfd = os.pidfd_open(pid)  # still there: the server reaps only after telling us

    def poll(self) -> int | None:
        if self.returncode is None:
            self._settle(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._settle(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode

    def _settle(self, timeout: float | None) -> None:
        # The server's word while it is there (it reaps the agent, then tells); the agent's
        # own end once it is not.
        if self._conn is not None:
            if not select.select([self._conn], [], [], timeout)[0]:
                return
            message = _receive_nowait(self._conn)
            if message is not None and "status" in message:
                self._ended(os.waitstatus_to_exitcode(int(message["status"])))
                return
            self._conn.close()
            self._conn = None
            timeout = 0
        if self._pidfd is not None and select.select([self._pidfd], [], [], timeout)[0]:
            print(f"{_LOG} the agent zygote went before agent pid {self.pid}; its exit status is "
                  "unknown", file=sys.stderr)
            self._ended(255)

    def _ended(self, code: int) -> None:
        self.returncode = code
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


def _receive_nowait(conn: socket.socket) -> dict | None:
    """The message a select said is there (None: the server closed the connection)."""
    try:
        data = conn.recv(1 << 16, socket.MSG_DONTWAIT)
    except (BlockingIOError, ConnectionResetError):
        return None
    return json.loads(data) if data else None


class _Server:
    """One agent zygote: the name it listens on, and its process once this controller started
    it. What ends it: EOF on its stdin, a pipe from this controller, or the keeper's pipe
    (shared by the keeper's controllers: the first that finds nobody serving the name starts
    it, the others fork from it)."""

    _names = itertools.count()

    def __init__(self, python: str, env: Mapping[str, str], keeper: _Keeper | None = None) -> None:
        self.python = python
        self.env = dict(env)
        self.keeper = keeper
        self.name = (keeper_server_prefix(keeper.ino) + _digest(python, env) if keeper is not None
                     else f"trainchaos-agents-{os.getpid()}-{next(self._names)}")
        self.broken: str | None = None
        self.agents: list[ForkedAgent] = []
        self.proc: subprocess.Popen | None = None
        self.errors: IO[bytes] | None = None

    def _start(self) -> None:
        server_env = dict(self.env)
        server_env[contract.ZYGOTE_ENV_ROOM_ENV] = " " * (ENV_ROOM_BYTES * ENV_ROOM_FACTOR)
        # What it says (torch's import warnings, why it could not fork) goes to a file that
        # is gone from disk already: read when it fails, nothing left behind.
        self.errors = tempfile.TemporaryFile()  # noqa: SIM115 (kept for the server's life)
        # stdin: a pipe nobody writes to, whose EOF tells the server its controller (or the
        # keeper) is gone
        idle = [] if self.keeper is None else ["--idle-exit-s", str(KEEPER_IDLE_EXIT_S)]
        self.proc = subprocess.Popen(
            [self.python, "-m", "harness.agent_zygote", "serve", self.name, *idle, " " * ARGV_ROOM_BYTES],
            stdin=subprocess.PIPE if self.keeper is None else self.keeper.fd, stdout=subprocess.DEVNULL,
            stderr=self.errors, env=server_env, start_new_session=True, close_fds=True)

    def fork(self, command: Sequence[str], env: Mapping[str, str], cwd: str, stdout: int,
             cgroup: str | None = None) -> ForkedAgent:
        """The agent of ``command`` (``python -c <code> <args>``) forked, in ``cgroup`` from its
        first instruction on; raises OSError when the server does not answer or says no."""
        conn = self._connect()
        try:
            with open(os.devnull, "rb") as null:
                send_message(conn, {"code": command[2], "argv": list(command[3:]), "env": dict(env), "cwd": cwd,
                                    "cgroup": cgroup}, [null.fileno(), stdout, stdout])
            reply = receive_message(conn)
        except BaseException:
            conn.close()
            raise
        if reply is None or "pid" not in reply:
            conn.close()
            raise OSError(reply.get("error") if reply else self._gone())
        conn.settimeout(None)
        agent = ForkedAgent(int(reply["pid"]), conn, list(command))
        self.agents.append(agent)
        return agent

    def idle(self) -> bool:
        """None of its agents runs (closing it then leaves none without its exit status)."""
        self.agents = [a for a in self.agents if a.poll() is None]
        return not self.agents

    def _connect(self) -> socket.socket:
        """Connected to the server, started first when nobody serves its name. It binds the
        name a moment after it starts (before its imports: a request then waits for them).
        Two controllers of one keeper may start it at once: the one whose server could not
        bind the name forks from the other's."""
        deadline = time.monotonic() + _CONNECT_TIMEOUT_S
        restarted = False
        while True:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            conn.settimeout(_CONNECT_TIMEOUT_S)
            try:
                conn.connect(socket_address(self.name))
                return conn
            except (ConnectionRefusedError, FileNotFoundError):
                conn.close()
                if self.proc is None:
                    self._start()
                elif self.proc.poll() is not None:
                    if self.keeper is not None and self._answers():
                        continue  # another controller's server has the name
                    if self.keeper is None or restarted:
                        raise OSError(self._gone()) from None
                    restarted = True  # ours was idle too long (KEEPER_IDLE_EXIT_S): a new one
                    if self.errors is not None:
                        self.errors.close()
                    self._start()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _answers(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe:
            try:
                probe.connect(socket_address(self.name))
            except OSError:
                return False
        return True

    def _gone(self) -> str:
        """Why the server is not there: its exit and the end of what it wrote."""
        if self.proc is None or self.errors is None:
            return f"the shared agent zygote {self.name} is gone"
        code = self.proc.wait()
        self.errors.seek(0)
        said = self.errors.read().decode(errors="replace").strip().splitlines()
        return f"the agent zygote exited with {code}" + (f": {said[-1]}" if said else "")

    def close(self) -> None:
        """Ends a server of this controller's own; a keeper's lives on for its other controllers."""
        if self.proc is not None and self.keeper is None:
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        if self.errors is not None:
            self.errors.close()


@dataclass(frozen=True)
class _Keeper:
    """The keeper's pipe (``contract.AGENT_ZYGOTE_KEEPER_ENV``): its descriptor here, and its
    inode, which names the servers it keeps (the same for every controller given it)."""

    fd: int
    ino: int


_keeper_said: list[str] = []


def _keeper() -> _Keeper | None:
    value = os.environ.get(contract.AGENT_ZYGOTE_KEEPER_ENV)
    if not value:
        return None
    try:
        fd = int(value)
        info = os.fstat(fd)
        if not stat.S_ISFIFO(info.st_mode):
            raise OSError("not a pipe")
    except (ValueError, OSError) as exc:
        if not _keeper_said:
            _keeper_said.append(value)
            print(f"{_LOG} {contract.AGENT_ZYGOTE_KEEPER_ENV}={value!r} is not an open pipe ({exc}); this "
                  "controller keeps agent zygotes of its own", file=sys.stderr)
        return None
    return _Keeper(fd, info.st_ino)


def keeper_server_prefix(ino: int) -> str:
    """How the name of every server kept by the pipe of inode ``ino`` begins (a keeper finds
    its servers by it)."""
    return f"trainchaos-agents-k{ino}-"


def _digest(python: str, env: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps([python, sorted(env.items())]).encode()).hexdigest()[:16]


_servers: dict[tuple, _Server] = {}
_lock = threading.Lock()


def _shared_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith(contract.ENV_PREFIX) and k not in _NODE_VARYING}


def start_agent(command: Sequence[str], env: Mapping[str, str], cwd: str, log: IO[bytes],
                cgroup: str | None = None) -> ForkedAgent | subprocess.Popen:
    """A node's agent, ``[python, "-c", code, *args]``, forked by this controller's agent
    zygote for that interpreter and environment (started on first use); a new process of
    its own when the server cannot fork it (the reason on stderr, once). ``cgroup``: the
    directory of the node's cgroup, which a forked agent joins before it runs anything (the
    caller moves a new process there itself)."""
    shared = _shared_env(env)
    key = (command[0], tuple(sorted(shared.items())))
    with _lock:
        server = _servers.get(key)
        if server is None:
            # A controller whose environment keeps changing (a test suite's in-process runs)
            # keeps the servers it still needs, not one per environment it ever had.
            for stale in [k for k, s in _servers.items() if s.idle()][:max(0, len(_servers) + 1 - MAX_SERVERS)]:
                _servers.pop(stale).close()
            server = _servers[key] = _Server(command[0], shared, _keeper())
    if server.broken is None:
        try:
            return server.fork(command, env, cwd, log.fileno(), cgroup)
        except OSError as exc:
            server.broken = str(exc) or type(exc).__name__
            print(f"{_LOG} forking agents failed ({server.broken}); agents start as new interpreters",
                  file=sys.stderr)
    return subprocess.Popen(list(command), env=dict(env), stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, cwd=cwd)


@atexit.register
def _close_servers() -> None:
    with _lock:
        for server in _servers.values():
            server.close()
        _servers.clear()
