"""Warm starts: a per-node zygote that has imported torch forks the ranks, torchrun still
supervises them.

Most of a rank's start here is Python importing torch (~1.7 s) and torch._dynamo (~2.4 s,
imported by DDP's constructor), four ranks at once on two cores. With
``harness.warm_start`` the torchrun agent of each node first imports torch,
torch.distributed, torch._dynamo and the harness, then forks the node's zygote
(``fork_from_agent``, the launcher's prelude in ``chaos.workload.torchrun``), and goes on
to torchrun with torch already imported; the zygote only forks ranks. A node imports torch
once: an agent that started a zygote of its own (``python -m harness.zygote serve``, still
there) imported it a second time, for torchrun (``trainchaos run``
tests/scenarios/report/tiny-kill.yaml, two nodes of one rank, twin and faulted run:
33.7 CPU-s with a zygote process, 27.5 with the fork; docs/engine.md). A restart pays
rendezvous, process-group set-up and the checkpoint load, not the imports; a
cold-starting stack pays them, so the run record says which was measured.

The design, and why (fault semantics stay honest):

- The agent is the parent, the zygote its child: the agent is what the backend started
  and waits on (its exit is the node's), what torchrun runs in (its own signal handling,
  its workers its children) and what a rank finds as its torchrun among its ancestors
  (``harness.quarantine.agent_pid``, ``harness.admission.agent_cmdline``). The agent forks
  before torchrun has started any thread (checked, as below) and with the stop signals
  blocked across the fork (the zygote keeps them blocked, the agent gets its mask back).
  The zygote drops everything of the agent's but stdout and stderr (stdin is
  ``/dev/null``, other descriptors closed, as when it was the agent's subprocess) and
  writes its own command line over the agent's (``harness.procenv.set_cmdline``:
  ``python -u -m harness.zygote serve <agent pid>``), so ``ps``, ``chaos.util.procs`` and a
  rank's search for its agent see the zygote, not a second torchrun. Its environment is
  the agent's, the run's id included, with room for the ranks' own
  (``TorchrunPerNode.node_env``), which the agent takes out of what its workers inherit.

- torchrun's worker is a thin client (``harness/zygote_client.py rank <harness args>``,
  started without ``site``: standard library only, ~28 ms of CPU) that hands its argv, environment, working directory and
  stdin/stdout/stderr (``SCM_RIGHTS``) to its node's zygote over an abstract unix socket.
  The zygote forks a child that becomes the rank: its own session (as torchrun's
  ``start_new_session``), those fds as 0/1/2 and nothing else open, that environment,
  ``harness.__main__`` as ``__main__``. The client then proxies: it forwards every
  signal torchrun sends (torchrun signals the worker's process group, so the client
  signals the child's) and leaves exactly as the child did: the same exit code, or killed
  by the same signal. torchrun sees a worker that fails, is stopped and restarted as a
  cold one is.
- The rank is the child: the process that trains is the one the probe announces
  (``rank_start``'s pid, the liveness peers' pid) and so the one every fault hits. A
  ``kill_rank`` SIGKILLs the training process itself, the zygote reaps it and the client
  dies of SIGKILL too, so torchrun logs the same ``failed (exitcode: -9)``. A hang
  (SIGSTOP) freezes the training process, not a proxy. Exec'ing the rank in the client
  would keep one pid but pay the imports again; a child that only reported its pid while
  the client trained would not be the process the fault hits.
- Processes found by their environment (``chaos.util.procs``: a rank that has not announced
  itself yet, a node's processes, cleanup; the storage fault layer's caller) see the truth:
  the child writes the rank's environment into its ``/proc/<pid>/environ``
  (``harness.procenv``) and the client removes ``RANK`` from its own, so the rank is the
  one process that carries it and whose parent does not.
- If the client dies (torchrun's SIGKILL after its stop grace period), the zygote kills
  the child's process group; if the zygote dies, each client kills its child. The zygote
  dies with its agent (``PR_SET_PDEATHSIG``, set in the fork), carries the run's id like
  every process of the run (found and killed by a node kill, ``stop``, ``trainchaos
  cleanup``), and its abstract socket (bound by the agent before the fork, closed there
  after it) leaves nothing on disk.
- A stop signal for the whole node (a ``kill_node`` with SIGTERM, a Slurm drain or
  preemption signalling every process of the step) reaches the zygote too. A cold node has
  no such process; were the zygote to die of it, every client would SIGKILL its rank before
  the rank's own handler (the emergency checkpoint, ``harness.preempt``) had done its work.
  So the zygote blocks the signals a worker is stopped with (``FORWARDED``: pending on the
  zygote, never acted on; it leaves with its agent) and each forked rank unblocks them at
  once: one that arrived between the fork and that moment is delivered then, as a cold
  rank would have got it.
- Fork safety: the agent forks the zygote, and the zygote its ranks, from a single thread
  (the agent checks that importing started no thread, so torch's intra-op pool does not
  exist yet; the backends export ``OMP_NUM_THREADS=1``, or numpy's OpenBLAS starts one),
  and neither runs a tensor op. ``gc.freeze`` before the fork: the imports' objects stay
  shared with the zygote and the ranks instead of being copied by a collection.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import resource
import selectors
import signal
import socket
import struct
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from chaos import contract
from harness.zygote_client import (
    FORWARDED,
    LOG_PREFIX,
    MAX_MESSAGE,
    kill_group,
    receive_message,
    run_rank,
    send_message,
    socket_address,
)
from harness.zygote_client import main as client_main

__all__ = ["PREIMPORTS", "Zygote", "die_with", "fork_from_agent", "fork_into", "imported_unthreaded", "listen",
           "live_threads", "main", "receive_message", "run_rank", "send_message", "serve", "socket_address",
           "take_over"]

PREIMPORTS = ("torch", "torch.distributed", "torch._dynamo", "torch.nn.parallel",
              "harness.procenv", "harness.train", "harness.config", "harness.config_load", "runpy")
"""What a rank imports on its way to its first step (``torch._dynamo``: DDP's constructor)."""



# -- the zygote -------------------------------------------------------------------------------
@dataclass
class _Rank:
    pid: int
    pidfd: int
    conn: socket.socket | None


class Zygote:
    """The fork server: one selector loop, one thread. Each request forks one rank."""

    programs: tuple[str, ...] = ("module", "script")
    """The request's fields that name what the child runs, one of them: ``python -m <module>``
    or ``python <script>`` (a stack's training script, ``chaos.workload.script``)."""

    def __init__(self, listener: socket.socket) -> None:
        # A node's stop signals are for its ranks, not for the server that forks them (see
        # the module's docstring); the mask is inherited by each fork, which lifts it.
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        self.listener = listener
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, self._accept)
        self.ranks: dict[int, _Rank] = {}

    def serve_forever(self) -> None:
        while True:
            self.serve_once(None)

    def serve_once(self, timeout: float | None) -> None:
        for key, _ in self.selector.select(timeout):
            key.data(key.fileobj)

    def _accept(self, listener: socket.socket) -> None:
        conn, _ = listener.accept()
        try:
            _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                  struct.calcsize("3i")))
            if uid != os.getuid():  # the abstract namespace has no file permissions
                conn.close()
                return
            data, fds, _flags, _addr = socket.recv_fds(conn, MAX_MESSAGE, 3)
        except OSError:
            conn.close()
            return
        try:
            request = json.loads(data)
            named = [field for field in self.programs if isinstance(request.get(field), str)]
            if len(fds) != 3 or not isinstance(request.get("argv"), list) \
                    or not isinstance(request.get("env"), dict) or not isinstance(request.get("cwd"), str) \
                    or len(named) != 1:
                raise ValueError(f"expected one of {', '.join(self.programs)}, argv, env, cwd and the "
                                 "three stdio descriptors")
            pid = self._fork(request, fds)
        except (ValueError, OSError) as exc:
            with contextlib.suppress(OSError):
                send_message(conn, {"error": f"{type(exc).__name__}: {exc}"})
            conn.close()
            return
        finally:
            for fd in fds:
                os.close(fd)
        rank = _Rank(pid, os.pidfd_open(pid), conn)
        self.ranks[pid] = rank
        self.selector.register(rank.pidfd, selectors.EVENT_READ, lambda _fd, r=rank: self._reap(r))
        self.selector.register(conn, selectors.EVENT_READ, lambda _c, r=rank: self._client_gone(r))
        with contextlib.suppress(OSError):
            send_message(conn, {"pid": pid})

    def _fork(self, request: dict, fds: list[int]) -> int:
        return fork_into(lambda: _become_rank(request, fds))

    def _reap(self, rank: _Rank) -> None:
        _, status = os.waitpid(rank.pid, 0)
        self.selector.unregister(rank.pidfd)
        os.close(rank.pidfd)
        del self.ranks[rank.pid]
        if rank.conn is not None:
            with contextlib.suppress(OSError):
                send_message(rank.conn, {"status": status})
            self._drop_conn(rank)

    def _client_gone(self, rank: _Rank) -> None:
        """The client said nothing more is expected of it: it is gone (torchrun SIGKILLed
        it after its grace period, or its node went). A worker torchrun gave up on must
        not train on: the rank's process group goes the same way."""
        assert rank.conn is not None
        with contextlib.suppress(OSError):
            if rank.conn.recv(1, socket.MSG_DONTWAIT):
                return  # clients send nothing after the request; ignore stray bytes
        self._drop_conn(rank)
        self._abandoned(rank.pid)

    def _abandoned(self, pid: int) -> None:
        """What becomes of a child whose client is gone: a rank goes with it."""
        kill_group(pid, signal.SIGKILL)

    def _drop_conn(self, rank: _Rank) -> None:
        assert rank.conn is not None
        self.selector.unregister(rank.conn)
        rank.conn.close()
        rank.conn = None


def fork_into(child: Callable[[], int]) -> int:
    """Fork; the child runs ``child`` and exits with its code (never returning into the
    parent's code: the zygote's loop, the agent's program); the parent gets the pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = child()
        except SystemExit as exc:
            code = _exit_code(exc)
        except BaseException:  # noqa: BLE001 (whatever it was, the child exits with 1)
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    return pid


def take_over(request: dict, fds: list[int], what: str) -> None:
    """In a child forked by a zygote: become the process a launcher would have started --
    a session of its own, the three stdio descriptors handed over and nothing else open, the
    request's environment (``/proc/<pid>/environ`` included) and working directory."""
    os.setsid()  # torchrun starts each worker in its own session and signals that group
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    # The zygote's mask (Zygote.__init__): a stop sent since the fork is delivered now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])  # a cold start has 0-2 only
    from harness import procenv

    complete = procenv.set_environ({str(k): str(v) for k, v in request["env"].items()})
    os.chdir(request["cwd"])
    if not complete:
        print(f"{LOG_PREFIX} {what} environment larger than the zygote's room: /proc/{os.getpid()}/environ "
              "shows RANK and the trainchaos names first, not every variable", file=sys.stderr)


def _become_rank(request: dict, fds: list[int]) -> int:
    """In the forked child: look like the process torchrun would have started
    (``python -m <module> <argv>`` or ``python <script> <argv>``), then run that module or
    script as ``__main__``."""
    take_over(request, fds, "rank")
    import runpy

    if os.environ.get("PYTHONUNBUFFERED"):  # as an interpreter started with it would write
        for stream in (sys.stdout, sys.stderr):
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(write_through=True)
    if "script" in request:
        # As ``python <script>``: its directory first on the path (its sibling modules import),
        # argv[0] the script; run_path makes it __main__ while it runs, with its __file__ (a
        # DataLoader worker the rank spawns finds the same __main__ a cold rank has).
        script = os.path.abspath(request["script"])
        sys.argv = [script, *map(str, request["argv"])]
        sys.path[0:1] = [os.path.dirname(script)]
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit:
            raise
        except BaseException:  # noqa: BLE001 (any uncaught exception ends a script so)
            # As the interpreter reports it: through sys.excepthook, which torch.distributed
            # prefixes with the rank ([rank0]: ...), as a cold rank's log shows it.
            sys.excepthook(*sys.exc_info())
            return 1
        finally:
            # What a script registered runs at its end, as it would in an interpreter of its own.
            import atexit

            atexit._run_exitfuncs()
        return 0
    # As ``python -m``: the module runs as __main__ with its spec (a DataLoader worker the
    # rank spawns looks up the same __main__ a cold rank has), argv[0] its file.
    sys.argv = [request["module"], *map(str, request["argv"])]
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    return 0


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def die_with(parent: int) -> None:
    """SIGKILL when the agent that started us exits (set, then checked: it may be gone)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def live_threads() -> int:
    """Threads of this process, as the kernel counts them (native ones too: an OpenMP pool)."""
    return len(os.listdir("/proc/self/task"))


def imported_unthreaded(modules: tuple[str, ...]) -> bool:
    """Import what a rank imports; False (the reason on stderr) if that started a thread:
    forking from this process would be unsafe then."""
    for module in modules:
        __import__(module)
    threads = live_threads()
    if threads != 1:
        print(f"{LOG_PREFIX} importing {', '.join(modules)} started {threads - 1} thread(s): forking "
              "now is unsafe; no warm start (set harness.warm_start: false)", file=sys.stderr, flush=True)
        return False
    return True


def listen(name: str) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(socket_address(name))
    listener.listen(256)
    return listener


def _forking(name: str, modules: tuple[str, ...], started: float) -> None:
    print(f"{LOG_PREFIX} {name}: imported {', '.join(modules)} in {time.perf_counter() - started:.1f} s; "
          "forking ranks", file=sys.stderr, flush=True)


def fork_from_agent(argv: tuple[str, ...], modules: tuple[str, ...] = PREIMPORTS) -> int:
    """Under ``harness.warm_start``, in the node's torchrun agent before torchrun (the
    launcher's prelude, ``chaos.workload.torchrun``): import what a rank needs, fork the
    node's zygote, return its pid. The agent goes on to torchrun with those imports done:
    the node imports torch once. ``argv``: the zygote's command line as ``ps`` shows it
    (``-m harness.zygote serve``, after the interpreter; the agent's pid follows)."""
    agent = os.getpid()
    name = os.environ[contract.ZYGOTE_SOCKET_ENV]
    # The ranks' room (TorchrunPerNode.node_env) stays in this process's environment block,
    # which the zygote and each rank inherit; torchrun's workers must not carry it on.
    os.environ.pop(contract.ZYGOTE_ENV_ROOM_ENV, None)
    started = time.perf_counter()
    if not imported_unthreaded(modules):  # before torchrun has started a thread, too
        raise SystemExit(1)
    listener = listen(name)  # before the fork: no client can come too early
    gc.freeze()  # the imports' objects stay shared with the zygote and the ranks, not copied by a GC
    # Blocked across the fork: the zygote keeps them blocked (Zygote.__init__), the agent
    # gets its mask back, and with it any signal sent in between.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    title = (sys.executable, "-u", *argv, str(agent))
    pid = fork_into(lambda: _serve_forked(agent, listener, title, modules, started))
    listener.close()
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return pid


def _serve_forked(agent: int, listener: socket.socket, title: tuple[str, ...], modules: tuple[str, ...],
                  started: float) -> int:
    die_with(agent)
    # Nothing of the agent's but its stdout and stderr, as when it was a subprocess of it.
    with open(os.devnull, "rb") as null:
        os.dup2(null.fileno(), 0)
    keep = listener.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    # Not the agent's command line: harness.quarantine.agent_pid looks for torchrun's among
    # a rank's ancestors, and the zygote is one of them.
    from harness import procenv

    procenv.set_cmdline(list(title))
    zygote = Zygote(listener)
    _forking(os.environ[contract.ZYGOTE_SOCKET_ENV], modules, started)
    zygote.serve_forever()
    return 0


def serve(parent: int) -> int:
    """``python -m harness.zygote serve <agent pid>``: the zygote as a process of its own
    (the launcher forks it from the agent instead, ``fork_from_agent``): bind, import, then
    fork ranks forever."""
    if contract.ZYGOTE_ENV_ROOM_ENV not in os.environ:
        # Room in the environment block for the ranks' own (harness.procenv); before any import.
        from harness.procenv import ENV_ROOM_BYTES

        env = dict(os.environ, **{contract.ZYGOTE_ENV_ROOM_ENV: " " * ENV_ROOM_BYTES})
        # The zygote starts itself again (same interpreter and arguments), with room in its
        # environment: no other program.
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)  # nosec B606
    die_with(parent)
    name = os.environ[contract.ZYGOTE_SOCKET_ENV]
    listener = listen(name)  # bound before the imports: clients queue instead of failing
    zygote = Zygote(listener)  # before the imports: a node's stop during them is not ours either
    started = time.perf_counter()
    if not imported_unthreaded(PREIMPORTS):
        return 1
    gc.freeze()  # the imports' objects stay shared with the ranks instead of copied by their GC
    _forking(name, PREIMPORTS, started)
    zygote.serve_forever()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["serve"] and len(args) == 2 and args[1].isdigit():
        return serve(int(args[1]))
    return client_main(args)  # rank, run, script: the client (harness.zygote_client)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # a proxy has nothing to tear down
