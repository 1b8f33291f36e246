"""torchrun's worker under a warm start: the thin client that has the node's zygote
(``harness.zygote``) fork the rank, then stands for it towards torchrun.

torchrun starts one per rank, every start and every restart: at 64 ranks on 2 cores, 64
interpreters at once. So the client is its own small module of the standard library (and
``chaos.contract`` and ``harness.procenv``, which import nothing else), started as a file
without ``site`` (``python -S -u <harness>/zygote_client.py rank ...``, the warm agent's
``light_worker_argv``): no site-packages ``.pth`` hooks, no editable-install finder, no
``harness`` package on the way. ~35 ms of CPU instead of ~100 ms for ``python -u -m
harness.zygote rank`` (which still works: ``harness.zygote.main`` hands these modes here).
The client's contract is ``harness.zygote``'s docstring: it forwards every signal to the
rank's process group and leaves exactly as the rank did.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import sys
import time

if not __package__:
    # Run as a file (-S: no site, so no editable finder): the repository, not this
    # directory, is what imports resolve against (a module here must not shadow the
    # standard library's).
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from chaos import contract  # noqa: E402  (after the path above)

__all__ = ["CLIENT_MODES", "FORWARDED", "LOG_PREFIX", "MAX_MESSAGE", "kill_group", "light_worker_argv", "main", "receive_message", "run_rank",
           "send_message", "socket_address"]

# Signals torchrun (or anyone signalling the worker) may send that the rank must get.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)
CLIENT_MODES = ("rank", "run", "script")
MAX_MESSAGE = 1 << 20
_CONNECT_WAIT_S = 60.0
LOG_PREFIX = "[trainchaos-zygote]"


def socket_address(name: str) -> str:
    return "\0" + name  # the abstract namespace: nothing on disk to leave behind


def send_message(conn: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(conn, [data], fds)
    else:
        conn.send(data)


def kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:  # not its own group leader yet (or gone)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def light_worker_argv(argv: list[str], python: str = sys.executable) -> list[str]:
    """The agent's command line with its worker, ``-m harness.zygote <mode> ...``, started as
    this file without ``site`` instead (torchrun's ``--no-python``: it runs ``python`` with
    these options rather than adding its own ``-u``). Paths are this node's: the agent
    rewrites its own argv where it runs (a container's interpreter and checkout). Anything
    else is left as it is."""
    for i in range(len(argv) - 2):
        if argv[i:i + 2] == ["-m", "harness.zygote"] and argv[i + 2] in CLIENT_MODES:
            return [*argv[:i], "--no-python", python, "-S", "-u", os.path.abspath(__file__), *argv[i + 2:]]
    return list(argv)


# -- the client: torchrun's worker ----------------------------------------------------------
def run_rank(module: str, argv: list[str], *, program: str = "module") -> int:
    """``zygote_client.py rank <harness options>`` (``run <module> <args>`` for
    another module, ``script <path> <args>`` for a script): have the node's zygote fork
    ``python -m <module> <args>`` (``python <path> <args>``), then be its proxy towards
    torchrun until it exits."""
    name = os.environ.get(contract.ZYGOTE_SOCKET_ENV)
    if not name:
        print(f"{LOG_PREFIX} no zygote on this node ({contract.ZYGOTE_SOCKET_ENV} is not set)", file=sys.stderr)
        return 1
    # Held until the rank's pid is known, then forwarded: a stop must reach the rank.
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    conn = _connect(name)
    env = dict(os.environ)
    send_message(conn, {program: module, "argv": argv, "env": env, "cwd": os.getcwd()}, [0, 1, 2])
    reply = receive_message(conn)
    if reply is None or "pid" not in reply:
        why = reply.get("error") if reply else "the zygote closed the connection"
        print(f"{LOG_PREFIX} the zygote did not start the rank: {why}", file=sys.stderr)
        return 1
    pid = int(reply["pid"])
    # The rank carries RANK; its proxy must not look like it (chaos.util.procs finds ranks by it).
    from harness import procenv

    procenv.set_environ({k: v for k, v in env.items() if k != "RANK"})
    for sig in FORWARDED:
        signal.signal(sig, lambda signum, _frame: kill_group(pid, signum))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    done = receive_message(conn)
    if done is None or "status" not in done:
        print(f"{LOG_PREFIX} the zygote went away; ending rank pid {pid}", file=sys.stderr)
        kill_group(pid, signal.SIGKILL)
        return 1
    return _leave_as(int(done["status"]))


def _connect(name: str) -> socket.socket:
    deadline = time.monotonic() + _CONNECT_WAIT_S
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.connect(socket_address(name))
            return conn
        except (ConnectionRefusedError, FileNotFoundError):
            conn.close()
            if time.monotonic() > deadline:
                raise SystemExit(f"{LOG_PREFIX} no zygote answers at {name} after {_CONNECT_WAIT_S:g} s") from None
            time.sleep(0.02)  # the agent started it a moment ago: it binds before importing


def receive_message(conn: socket.socket) -> dict | None:
    data = conn.recv(MAX_MESSAGE)
    return json.loads(data) if data else None


def _leave_as(status: int) -> int:
    """Exit as the rank did: the same code, or the same signal (torchrun reads -9 as -9)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the rank's core, if any, is its own
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), sig)
        return 128 + sig  # a signal whose default is not to end the process
    return os.waitstatus_to_exitcode(status)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["rank"]:
        return run_rank("harness", args[1:])
    if args[:1] == ["run"] and len(args) >= 2:
        return run_rank(args[1], args[2:])
    if args[:1] == ["script"] and len(args) >= 2:
        return run_rank(args[1], args[2:], program="script")
    print("usage: python -m harness.zygote serve <agent pid> | rank <harness options> | "
          "run <module> <args> | script <path> <args>", file=sys.stderr)
    return 2


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # a proxy has nothing to tear down
