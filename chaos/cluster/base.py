"""The cluster backend interface: everything the runner, faults, metrics and cleanup may ask
of the nodes of a run, whatever they are (local processes, namespaces, containers, Slurm).

A backend starts one torchrun agent per node (spares included), reports per-node exits,
maps live ranks to nodes and processes (a rank moves when a spare joins or the group
shrinks, so this is asked at injection time, never fixed at plan time), signals a rank or a
node, and stops everything. Infrastructure it needs for the run (directories, namespaces,
helper processes...) is acquired through ``RunResources``: journaled before it exists, torn
down in reverse order, removable by ``trainchaos cleanup`` from the journal alone.

``InjectionContext`` is what a fault sees while it is injected: the backend, the run's
resources, the injector's event stream and a timer for scheduled reverts.
"""

from __future__ import annotations

import signal as _signal
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, cast

from pydantic import BaseModel

from chaos.cluster.capabilities import describe, has, missing
from chaos.errors import ToolError
from chaos.model.scenario import Topology
from chaos.model.targets import ResolvedTarget, parse_target
from chaos.model.types import StrictModel

if TYPE_CHECKING:
    from typing_extensions import TypeForm

    from chaos.model.scenario import Scenario
    from chaos.probe import Probe
    from chaos.runfiles.resources import RunResources

C = TypeVar("C")

__all__ = [
    "ClusterBackend",
    "AgentProcess",
    "InjectionContext",
    "Launcher",
    "LiveRank",
    "NoOptions",
    "NodeStatus",
    "Revertible",
    "RunSpec",
    "StorageMount",
]

class NoOptions(StrictModel):
    """A backend that takes no options: ``backend: local`` or ``backend: {local: {}}``."""


@dataclass(frozen=True)
class StorageMount:
    """One tier the storage fault layer is mounted over, as the runner planned it."""

    tier: str
    """``shared``, ``local`` (every node's own) or ``data``."""
    track_unfsynced: bool
    """Keep an undo log of unfsynced writes (a crash or power cut can then drop them)."""
    path: str | None
    """The directory mounted over; None for ``local``: each node's local tier."""


class AgentProcess(Protocol):
    """A node's agent as a backend holds it: a ``subprocess.Popen``, or a process a launcher
    started its own way (a warm agent forked from imports done once)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class Launcher(Protocol):
    """How the workload's job is started on a node (``chaos.workload.base.Launch.launcher``):
    the launcher writes each node's command line and environment; a backend only says where
    things are (interpreter, node address, rendezvous endpoint) and places the command on its
    node. Declared here so that no backend imports the workload that made it."""

    @property
    def tee_output(self) -> bool:
        """Worker lines reach the node log prefixed ``[default<local_rank>]:`` (``--tee 3``)."""

    @property
    def warm_start(self) -> bool:
        """Ranks are forked from imports done once on their node (``rank_launch: warm``)."""

    def agent_command(self, topology: Topology, *, run_id: str, rdzv_endpoint: str,
                      local_addr: str, python: str = ..., node: int = 0) -> list[str]:
        """Node ``node``'s agent process, as argv."""

    def node_env(self, node: int, topology: Topology, rdzv_endpoint: str) -> dict[str, str]:
        """Environment of the node's agent beyond what the backend exports."""

    def global_rank(self, node: int, agent_rank: int, topology: Topology) -> int:
        """The job's rank of the worker node ``node``'s agent numbers ``agent_rank``."""

    def start_agent(self, command: list[str], env: dict[str, str], *, cwd: str, log: Any,
                    cgroup: str | None = None) -> AgentProcess | None:
        """The node's agent started the launcher's own way, for a backend whose agents are
        plain processes of this machine (``LocalCluster.forks_agents``); None: the backend
        starts ``command`` as a new process."""


@dataclass(frozen=True)
class RunSpec:
    """What a backend needs to start one run."""

    run_id: str
    run_dir: str
    topology: Topology
    worker_argv: list[str]
    """What each agent runs per rank (after torchrun's own options), e.g. ``-m harness ...``."""
    probe_faults_file: str | None = None
    tee_worker_output: bool = False
    """Prefix each worker line with ``[default<local_rank>]:`` in the node log (for progress
    read from a user command's log lines)."""
    options: dict[str, Any] = field(default_factory=dict)
    """The backend's own options from the scenario (validated by its ``options_model``)."""
    extra_env: dict[str, str] = field(default_factory=dict)
    mounts: tuple[StorageMount, ...] = ()
    """The storage fault layer's mounts the run's faults need (a backend with the
    ``StorageLayer`` capability acquires them before any node starts)."""
    launcher: Launcher | None = None
    """The workload's launcher (``chaos.workload.base.Launch.launcher``): each node's command
    line and environment. A backend that starts nodes needs it (None: a spec that starts
    nothing, a game day's attached run)."""


@dataclass(frozen=True)
class NodeStatus:
    returncode: int | None
    """The agent's exit code; None while it runs."""
    lost: bool = False
    """Taken down by a fault (killed, powered off): its exit is not the job's outcome."""


@dataclass(frozen=True)
class LiveRank:
    rank: int
    node: int
    pid: int


class ClusterBackend(ABC):
    """One run's nodes. Subclasses register with ``chaos.cluster.register_backend``."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    options_model: ClassVar[type[BaseModel]] = NoOptions
    capabilities: ClassVar[tuple[type, ...]] = ()
    """What the backend can do beyond this interface (``chaos.cluster.capabilities``): a
    fault that needs one is refused at validation on a backend that does not declare it.
    Every backend declares its own (the netns backend runs local agents but has no storage
    fault layer)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for capability in cls.capabilities:
            absent = missing(cls, capability)
            if absent:
                raise TypeError(f"{cls.__name__} declares {capability.__name__} but does not "
                                f"implement {', '.join(absent)}")

    def __init__(self, spec: RunSpec, resources: RunResources) -> None:
        self.spec = spec
        self.resources = resources
        self.topology = spec.topology
        self._live: dict[int, LiveRank] = {}

    # -- before anything starts -----------------------------------------------------------
    @classmethod
    def preflight(cls, scenario: Scenario) -> list[str]:
        """What this machine lacks to run ``scenario`` on this backend (a capability, a
        command, a daemon); each line says what is missing. Empty: good to go."""
        return []

    # -- lifecycle ------------------------------------------------------------------------
    @abstractmethod
    def start(self) -> None:
        """Acquire the run's resources and start every node (``topology.total_nodes``)."""

    @abstractmethod
    def poll(self) -> dict[int, NodeStatus]:
        """Per node: its agent's exit code (None while running) and whether a fault took it."""

    @abstractmethod
    def stop(self, grace_s: float = 3.0) -> list[int]:
        """Stop every process of the run (stopped ones included); returns pids that needed
        SIGKILL. Resources are released by the runner afterwards, in reverse order."""

    # -- nodes ----------------------------------------------------------------------------
    def failure_domain(self, node: int) -> str:
        """The node's power domain, else its rack, else empty (each node on its own)."""
        for groups in (self.topology.power_domains, self.topology.racks):
            for name, members in groups.items():
                if node in members:
                    return name
        return ""

    @abstractmethod
    def node_address(self, node: int) -> str:
        """The address the node's processes use (and listen on)."""

    @abstractmethod
    def node_logs(self) -> dict[int, str]:
        """Node -> path of its agent's log (stdout and stderr) on the controller."""

    # -- live ranks -----------------------------------------------------------------------
    def note_event(self, event: dict[str, Any]) -> None:
        """Learn where ranks live from their ``rank_start`` events (rank, node, pid)."""
        if event.get("kind") != "rank_start":
            return
        try:
            rank, node, pid = int(event["rank"]), int(event["node"]), int(event["pid"])
        except (KeyError, TypeError, ValueError):
            return
        self._live[rank] = LiveRank(rank, node, pid)

    def live_ranks(self) -> dict[int, LiveRank]:
        """Rank -> its live worker now; ranks whose process is gone are left out."""
        return {r: lr for r, lr in self._live.items() if self.process_alive(lr.pid)}

    @abstractmethod
    def process_alive(self, pid: int) -> bool:
        """Whether the run's process ``pid`` exists and is not a zombie."""

    @abstractmethod
    def find_rank(self, rank: int) -> LiveRank | None:
        """A rank not announced by the probe (a user command): found by the backend's own
        means (the process environment, the container...)."""

    def rank_process(self, rank: int) -> LiveRank | None:
        return self.live_ranks().get(rank) or self.find_rank(rank)

    def node_alive(self, node: int) -> bool:
        status = self.poll().get(node)
        return status is not None and status.returncode is None

    # -- signals --------------------------------------------------------------------------
    @abstractmethod
    def signal_pid(self, pid: int, sig: int) -> bool:
        """Signal one process of the run; False when it is gone."""

    @abstractmethod
    def signal_node(self, node: int, sig: int) -> list[int]:
        """Signal the node's agent and every process of it at once; a fatal signal marks the
        node lost. Returns the pids signalled."""

    def signal_rank(self, rank: int, sig: int) -> list[int]:
        live = self.rank_process(rank)
        if live is None:
            return []
        return [live.pid] if self.signal_pid(live.pid, sig) else []

    # -- targets --------------------------------------------------------------------------
    def resolve(self, target: dict[str, Any]) -> ResolvedTarget:
        """A planned target (``{rank: 3}``, ``{nodes: [0, 1]}``, ``{rack: r1}``...) resolved
        against the live rank -> node map (its form's ``resolve``, ``chaos.model.targets``);
        raises TargetUnavailable when nothing of it lives."""
        return parse_target(target).resolve(self)


FATAL_SIGNALS = frozenset({_signal.SIGKILL, _signal.SIGTERM, _signal.SIGINT, _signal.SIGABRT,
                           _signal.SIGSEGV, _signal.SIGBUS})


class Revertible(Protocol):
    """What the run loop reverts on time (a fault: ``chaos.faults.base.FaultType``)."""

    fault_id: str


@dataclass
class InjectionContext:
    """What a fault sees while it is injected."""

    run_dir: str
    cluster: ClusterBackend
    injector: Probe
    resources: RunResources | None = None
    scheduled_reverts: list[tuple[float, Any]] = field(default_factory=list)
    """(monotonic time due, fault): faults scheduled by ``schedule_revert``."""
    stopping: bool = False
    """Set once the run is being torn down: a revert then undoes what the fault changed but
    starts nothing (a node whose power was due back later stays off)."""

    def emit(self, kind: str, **fields: Any) -> None:
        self.injector.emit(kind, **fields)

    def require(self, capability: TypeForm[C]) -> C:
        """The run's backend as ``capability`` (``ctx.require(Fabric).namespace(n)``).
        Validation already refused a fault type whose backend lacks what it ``requires``:
        failing here means the type forgot to list it."""
        # A TypeForm, not a type[C]: a capability is a Protocol, and mypy accepts only a
        # concrete class where type[C] is expected. Its value is still the protocol class.
        protocol = cast(type, capability)
        if not has(type(self.cluster), protocol):
            raise ToolError(f"backend {self.cluster.name} has no {describe(protocol)}; the fault "
                            "type must list it in `requires` so that validation refuses it")
        return cast(C, self.cluster)

    def schedule_revert(self, fault: Revertible, after_s: float) -> None:
        """Revert ``fault`` after ``after_s`` seconds (the run loop does it on time)."""
        self.scheduled_reverts.append((time.monotonic() + after_s, fault))

    def due_reverts(self) -> list[Any]:
        now = time.monotonic()
        due = [f for t, f in self.scheduled_reverts if t <= now]
        self.scheduled_reverts = [(t, f) for t, f in self.scheduled_reverts if t > now]
        return due
