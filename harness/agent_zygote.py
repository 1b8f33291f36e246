"""Warm agents: a warm node's torchrun agent forked from a process that has imported torch,
instead of a new interpreter that imports it.

Under ``harness.warm_start`` a node imports torch once (``harness.zygote``): its agent imports
what a rank needs, then forks the node's zygote, which forks the ranks. The agent itself still
paid that import, ~3.5 s of CPU here: on every node of every run, the fault-free twin's
included, and on every node a fault brings back. In a full ``make test`` 193 agents did, 40 %
of the suite's CPU (process accounting, 2026-12-03). So on the ``local`` backend a
controller starts one agent zygote (``python -m harness.agent_zygote serve <name>``, started
and asked by ``chaos.workload.agent_forks``): it imports what an agent and its ranks import,
once, and forks each warm node's agent.

The forked agent is the process the backend would have started, as ``harness.zygote`` makes a
forked rank the process torchrun would have started (``take_over``): a session of its own,
stdin ``/dev/null`` and the node log as stdout and stderr, nothing else open, the node's
environment (``/proc/<pid>/environ`` too: written into the room the server was started with,
``harness.procenv``), the run directory as its working directory; its command line is the
agent's (``python -c <agent program> <torchrun options>``, written over the room of the
server's argument area: ``ps``, ``chaos.util.procs`` and ``harness.quarantine.agent_pid`` see an
agent). Then the agent's program runs as ``python -c`` runs it (``__main__``, ``sys.argv``
``['-c', ...]``, ``sys.path[0]`` ``''``) and forks its node's zygote as before, with nothing
left to import.

What differs, and why it is sound:

- The server's environment is the agents', less what differs between nodes and runs (the
  ``TRAINCHAOS_*`` names and ``TMPDIR``): what torch reads as it is imported (``LOGLEVEL``,
  ``OMP_NUM_THREADS``, a scenario's own variables) is what a cold agent would have read. The
  controller keeps one server per such environment. ``tempfile``'s cached directory is
  dropped in the child, so the node's ``TMPDIR`` holds.
- The agent is the server's child, not the controller's: the server reaps it and sends its
  wait status to the controller on the connection the request came on
  (``chaos.workload.agent_forks.ForkedAgent``, which the backend holds as it holds a
  ``Popen``). A controller that goes away does not end its agents (a ``Popen``'d agent outlives
  its controller too, until ``trainchaos cleanup`` finds it by its run id); it ends the
  server, whose stdin is a pipe from the controller.
- The server carries no run id and is no node's process: a node kill, ``stop`` or
  ``trainchaos cleanup`` never hits it, and it blocks the stop signals as a node's zygote does.
- Fork safety as ``harness.zygote``: imports checked to leave one thread, ``gc.freeze``.
"""

from __future__ import annotations

import builtins
import gc
import os
import selectors
import sys
import time
import types

from harness import procenv
from harness.zygote import PREIMPORTS, Zygote, fork_into, imported_unthreaded, listen, take_over

__all__ = ["AGENT_PREIMPORTS", "AgentZygote", "main", "serve"]

AGENT_PREIMPORTS = (*PREIMPORTS, "torch.distributed.run", "torch.distributed.launcher.api",
                    "torch.distributed.elastic.agent.server.local_elastic_agent",
                    "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend",
                    "torch.distributed.elastic.rendezvous.dynamic_rendezvous")
"""What an agent imports on its way to its workers (torchrun, its elastic agent and c10d
rendezvous), and what the ranks its zygote forks import."""

_LOG = "[trainchaos-agent-zygote]"


class AgentZygote(Zygote):
    """The fork server of warm agents: a request carries the agent's program (``code``, run as
    ``python -c`` runs it), its arguments, environment, working directory and stdio."""

    programs = ("code",)

    def __init__(self, listener, controller_fd: int = 0, idle_exit_s: float | None = None) -> None:  # noqa: ANN001
        super().__init__(listener)
        # EOF on the pipe from the controller: it is gone, and so is the reason to be here.
        self.selector.register(controller_fd, selectors.EVENT_READ, self._controller_gone)
        self.idle_exit_s = idle_exit_s
        self.last_request = time.monotonic()

    def serve_forever(self) -> None:
        """Until the controller's pipe closes, or (``idle_exit_s``, a server shared by a
        keeper's controllers) until it has had no agent and no request for that long: one
        that no later controller asks for holds its imports' memory for nothing."""
        while True:
            self.serve_once(self.idle_exit_s)
            if self.idle_exit_s is not None and not self.ranks \
                    and time.monotonic() - self.last_request > self.idle_exit_s:
                os._exit(0)

    def _accept(self, listener) -> None:  # noqa: ANN001 (socket)
        self.last_request = time.monotonic()
        super()._accept(listener)

    def _fork(self, request: dict, fds: list[int]) -> int:
        return fork_into(lambda: _become_agent(request, fds))

    def _abandoned(self, pid: int) -> None:
        """The controller closed its end: the agent goes on (see the module's docstring)."""

    @staticmethod
    def _controller_gone(fd: int) -> None:
        if not os.read(fd, 4096):
            os._exit(0)


def _become_agent(request: dict, fds: list[int]) -> int:
    """In the forked child: join the node's cgroup if it has one, look like ``python -c <code>
    <argv>`` started by the backend, then run the code as that would."""
    if request.get("cgroup"):
        _join_cgroup(request["cgroup"])
    take_over(request, fds, "agent")
    import tempfile

    tempfile.tempdir = None  # worked out from the server's TMPDIR if at all; the node has its own
    argv = [str(a) for a in request["argv"]]
    if not procenv.set_cmdline([sys.executable, "-c", request["code"], *argv]):
        print(f"{_LOG} the agent's command line is longer than the server's room: "
              f"/proc/{os.getpid()}/cmdline is cut short", file=sys.stderr)
    sys.argv = ["-c", *argv]
    sys.path[0] = ""  # python -c: the working directory, as it is when asked
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    # The agent's program, from a peer of this user only (harness.zygote checks SO_PEERCRED).
    program = compile(request["code"], "<string>", "exec")
    exec(program, main.__dict__)  # noqa: S102  # nosec B102
    return 0


def _join_cgroup(path: str) -> None:
    """Into the node's cgroup (the local backend's ``memory_mb``) before anything else: the
    agent forks the node's zygote, and the zygote the ranks, within milliseconds of its start,
    and what they fork inherits the cgroup only if the agent is in it by then. (A cold agent
    spends a second importing first, so the backend's move after the start is in time.)"""
    try:
        with open(os.path.join(path, "cgroup.procs"), "w", encoding="utf-8") as fh:
            fh.write(str(os.getpid()))
    except OSError as exc:
        print(f"{_LOG} the agent could not join its node's cgroup {path}: {exc}", file=sys.stderr)


def serve(name: str, idle_exit_s: float | None = None) -> int:
    """``python -m harness.agent_zygote serve <name> [--idle-exit-s S] <room>``: bind ``name``
    (abstract), import, then fork agents until the controller's pipe on stdin closes (or it
    has been idle for S seconds)."""
    procenv.set_cmdline([sys.executable, "-m", "harness.agent_zygote", "serve", name])
    listener = listen(name)  # bound before the imports: a request waits instead of failing
    zygote = AgentZygote(listener, idle_exit_s=idle_exit_s)
    if not imported_unthreaded(AGENT_PREIMPORTS):
        return 1
    gc.freeze()  # the imports' objects stay shared with the agents, not copied by a collection
    zygote.serve_forever()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) >= 2 and args[0] == "serve":
        idle = float(args[3]) if len(args) >= 4 and args[2] == "--idle-exit-s" else None
        return serve(args[1], idle)
    print("usage: python -m harness.agent_zygote serve <name> [--idle-exit-s S] [<room>]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # nothing to tear down: the agents are on their own
