"""The launcher of today's workload kinds: one elastic torchrun agent per node.

The torchrun command line lives here, and only here: a backend says where things are (the
interpreter, the node's address, the rendezvous endpoint it hosts) and places the command
on its node (a process, a namespace, a container, a Slurm task).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, ClassVar

from chaos import contract
from harness.procenv import ENV_ROOM_BYTES

if TYPE_CHECKING:
    from chaos.model import scenario as records
    from chaos.workload.agent_forks import ForkedAgent

__all__ = ["AGENT_MAIN", "JOIN_TIMEOUT_S", "SCRIPT_PREIMPORTS", "warm_start_from_env", "KEEP_ALIVE_INTERVAL_S", "KEEP_ALIVE_MAX_ATTEMPTS", "TorchrunPerNode", "agent_main"]

JOIN_TIMEOUT_S = 60
"""How long the agents wait in the rendezvous for enough nodes (c10d ``join_timeout``):
nodes a fault takes down that come back within it (power that returns, a container
unpaused) let a job with too few nodes go on; validation counts on it
(``chaos.schema.checks``)."""

SCRIPT_PREIMPORTS = ("torch", "torch.distributed", "torch._dynamo", "torch.nn.parallel", "runpy",
                     "chaos.probe")
"""What any torch script's rank imports on its way to its first step (``torch._dynamo``:
DDP's constructor), which a warm script's zygote imports once for the node's ranks; a
stack adds its own packages (``ScriptWorkload.preimports``)."""

_WARM_START_VALUES = {"1": True, "0": False}


def warm_start_from_env() -> bool | None:
    """``TRAINCHAOS_WARM_START`` (``contract.WARM_START_ENV``): the warm start of a workload
    whose scenario does not say; None where it is unset. ValueError for another value."""
    value = os.environ.get(contract.WARM_START_ENV, "")
    if not value:
        return None
    if value not in _WARM_START_VALUES:
        raise ValueError(f"{contract.WARM_START_ENV}={value!r} in the environment; allowed: "
                         f"{', '.join(sorted(_WARM_START_VALUES))} (or unset)")
    return _WARM_START_VALUES[value]


KEEP_ALIVE_INTERVAL_S = 1
KEEP_ALIVE_MAX_ATTEMPTS = 5
"""The rendezvous declares a node dead once its keep-alives (every KEEP_ALIVE_INTERVAL_S)
have been missing KEEP_ALIVE_INTERVAL_S x KEEP_ALIVE_MAX_ATTEMPTS seconds (c10d
``keep_alive_*``): how long a lost node holds up the group that re-forms without it."""

# ``python -m torch.distributed.run``, except for how the agent process ends: once torchrun's
# main has returned (or raised: same output, same exit status), the exit handlers run and
# the process leaves without Python's interpreter teardown. Tearing down the module graph of
# torch took an agent 0.6-1.8 s of CPU here after its workers had exited (4 s with two
# agents on two busy cores), and the controller counts a job as ended when its agents have.
# Inline, not a module of ours: a node's interpreter may be a user's image without trainchaos.
AGENT_MAIN = """\
# trainchaos: the torchrun agent (torch.distributed.run) without interpreter teardown
import atexit, logging, os, runpy, sys, traceback
# The rendezvous's own INFO lines (joining, joined round N as rank R), which torch leaves at
# WARNING: a slow restart's node log then says where in the rendezvous its time went.
logging.getLogger("torch.distributed.elastic.rendezvous.dynamic_rendezvous").setLevel(
    os.environ.get("LOGLEVEL", "WARNING"))
code = 0
try:
    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    if not isinstance(exc.code, (int, type(None))):
        print(exc.code, file=sys.stderr)
except KeyboardInterrupt:
    raise
except BaseException:
    traceback.print_exc()
    code = 1
atexit._run_exitfuncs()
# A warm node's zygote would die with this agent all the same (PR_SET_PDEATHSIG), but then
# init reaps it, and the CPU of the zygote and of every rank it reaped is nobody's: killed
# and reaped here it is this agent's, and its parent's (the controller's, a test's).
zygote = globals().get("_trainchaos_zygote")
if zygote:
    import signal, time
    try:
        os.kill(zygote, signal.SIGKILL)
        for _ in range(100):  # at most 1 s: an exit never waits on a zygote stuck in the kernel
            if os.waitpid(zygote, os.WNOHANG)[0]:
                break
            time.sleep(0.01)
    except OSError:
        pass
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
"""

# Warm start (harness/zygote.py): this agent imports what a rank needs and forks the node's
# zygote before torchrun, which then starts with torch imported: one import of torch per
# node, not one in the agent and another in a zygote of its own. The zygote learns its
# socket from the environment the agent's workers inherit too, and dies with this agent
# (PR_SET_PDEATHSIG). Its rendezvous names the events it records without inspect.stack()
# (harness/rdzv_records.py: most of a warm agent's CPU).
ZYGOTE_PRELUDE = """\
# trainchaos: warm start: this agent forks the node's zygote, which forks the ranks torchrun asks for
import os
os.environ[{socket_env!r}] = "trainchaos-zygote-%s-%s-%d" % (
    os.environ.get({run_env!r}, ""), os.environ.get({node_env!r}, ""), os.getpid())
from harness.zygote import fork_from_agent
_trainchaos_zygote = fork_from_agent({argv!r}{modules})
from harness.rdzv_records import name_records_by_frame
name_records_by_frame()
# Each worker a client started without site (harness/zygote_client.py): 64 of them at once
# on 2 cores are a launch's and every restart's.
import sys
from harness.zygote_client import light_worker_argv
sys.argv = light_worker_argv(sys.argv)
"""


def agent_main(zygote_argv: tuple[str, ...] = (), zygote_modules: tuple[str, ...] = ()) -> str:
    """The agent's program: AGENT_MAIN, after forking the node's zygote when there is one
    (importing ``zygote_modules`` first; none named: the harness's, ``harness.zygote.PREIMPORTS``)."""
    if not zygote_argv:
        return AGENT_MAIN
    modules = f", modules={tuple(zygote_modules)!r}" if zygote_modules else ""
    return ZYGOTE_PRELUDE.format(socket_env=contract.ZYGOTE_SOCKET_ENV, run_env=contract.RUN_ID_ENV,
                                 node_env=contract.NODE_ENV, argv=tuple(zygote_argv), modules=modules) + AGENT_MAIN


@dataclass(frozen=True)
class TorchrunPerNode:
    """The launcher of today's kinds: one elastic torchrun agent per node (spares included),
    its c10d rendezvous hosted by the controller, ``max_restarts`` restarts of the whole
    worker group. A backend supplies where things are (interpreter, addresses, rendezvous
    endpoint); the command line is the launcher's.

    A kind with another shape (one torchrun per replica group and a lighthouse, issue 21)
    declares another launcher; the backends place whatever command it builds on a node."""

    name: ClassVar[str] = "torchrun-per-node"

    worker_argv: tuple[str, ...]
    """What each agent runs per rank, after torchrun's own options (``-m harness ...``)."""
    tee_output: bool = False
    """``--tee 3``: every worker line reaches the node log as ``[default<local_rank>]:...``
    (progress read from log lines needs it)."""
    zygote_argv: tuple[str, ...] = ()
    """Warm start: the node's zygote, the fork server its workers hand their launch to, as
    its command line shows it (``-m harness.zygote serve``, the agent's pid after it); the
    agent forks it before torchrun (``harness.zygote.fork_from_agent``). Empty: cold, every
    worker starts its own interpreter."""
    zygote_modules: tuple[str, ...] = ()
    """Warm start: what the agent imports before it forks the zygote (what a rank imports on
    its way to its first step: torch and the stack's own packages); empty: the harness's
    (``harness.zygote.PREIMPORTS``)."""

    @property
    def warm_start(self) -> bool:
        return bool(self.zygote_argv)

    def agent_command(self, topology: records.Topology, *, run_id: str, rdzv_endpoint: str,
                      local_addr: str, python: str = sys.executable, node: int = 0) -> list[str]:
        """The agent of one node: ``python -c AGENT_MAIN ... <worker_argv>``, which is
        ``python -m torch.distributed.run ... <worker_argv>`` with a quicker exit (the same on
        every node: the rendezvous numbers them)."""
        nnodes = (f"{topology.min_nodes}:{topology.nodes}"
                  if topology.min_nodes and topology.min_nodes < topology.nodes else str(topology.nodes))
        return [
            python, "-c", agent_main(self.zygote_argv, self.zygote_modules),
            "--nnodes", nnodes,
            "--nproc-per-node", str(topology.ranks_per_node),
            "--rdzv-backend", "c10d",
            "--rdzv-endpoint", rdzv_endpoint,
            "--rdzv-id", run_id,
            # is_host=false: the controller hosts the store. last_call_timeout: how long a
            # shrunken group waits for stragglers before going on with fewer nodes.
            "--rdzv-conf", f"is_host=false,join_timeout={JOIN_TIMEOUT_S},last_call_timeout=2,read_timeout=30,"
            # A dead node leaves the rendezvous when its keep-alives stop: 5 x 1 s here
            # instead of torch's 3 x 5 s, so a shrunken group re-forms within seconds. Not
            # 3 x 1 s: a node's heartbeats are ~2 s apart as a round completes (its join
            # loop's last one, a 1 s poll that sees the round complete, then its timer's
            # first tick 1 s later), so a 3 s expiry declared a live node dead after 1 s
            # of starvation on a busy host, and a spare joining then saw a free place and
            # restarted the healthy group (a fresh-clone make test: false detection).
            f"keep_alive_interval={KEEP_ALIVE_INTERVAL_S},keep_alive_max_attempt={KEEP_ALIVE_MAX_ATTEMPTS}",
            "--max-restarts", str(topology.max_restarts),
            "--monitor-interval", "0.1",
            "--local-addr", local_addr,
            *(["--tee", "3"] if self.tee_output else []),
            *self.worker_argv,
        ]

    def node_env(self, node: int, topology: records.Topology, rdzv_endpoint: str) -> dict[str, str]:
        """Environment of one node's agent beyond what the backend exports: none cold; warm,
        the room in the agent's environment block that the zygote it forks, and each rank
        forked from that, write their own environment into (``harness.procenv``)."""
        if not self.warm_start:
            return {}
        return {contract.ZYGOTE_ENV_ROOM_ENV: " " * ENV_ROOM_BYTES}

    def global_rank(self, node: int, agent_rank: int, topology: records.Topology) -> int:
        """The job's rank of a worker its node's agent calls ``agent_rank``: the same here
        (one rendezvous numbers every node's workers)."""
        return agent_rank

    def start_agent(self, command: list[str], env: dict[str, str], *, cwd: str, log: IO[bytes],
                    cgroup: str | None = None) -> ForkedAgent | subprocess.Popen | None:
        """Warm: the node's agent forked by this controller's agent zygote
        (``chaos.workload.agent_forks``), for a backend whose agents are plain processes of
        this machine; cold: None, the backend starts it as a new interpreter."""
        if not self.warm_start:
            return None
        from chaos.workload.agent_forks import start_agent

        return start_agent(command, env, cwd, log, cgroup=cgroup)
