"""What a backend can do beyond the one interface every backend has (``ClusterBackend``).

Toxiproxy's toxics are the model: one small required interface, and optional abilities as
small interfaces of their own, checked once. A fault type lists the capabilities it needs
(``FaultType.requires``); validation refuses a scenario whose backend lacks one (a located
error, exit 2, before anything starts), and at injection the fault asks for the ability with
``ctx.require(Fabric)``, which hands back the backend typed as that capability. No fault
ever probes a backend with ``hasattr`` or imports a concrete one.

A backend *declares* what it provides (``ClusterBackend.capabilities``) rather than having it
found by inheritance or by the names of its methods: the netns backend is a local backend
underneath but has no storage fault layer, a stand-in cluster in a test declares what it
stands in for. ``ClusterBackend.__init_subclass__`` checks that every declared capability
is implemented (each is a ``Protocol`` of methods only, so that check is structural).

Abilities a fault needs to undo itself from the journal alone (``trainchaos cleanup``, no
backend running) are classmethods: the fault records which backend made the change and
finds its class again with ``chaos.cluster.backend_of(record, Capability)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["CAPABILITIES", "Attachable", "ContainerHost", "Fabric", "LocalDisk", "NodeHandle", "PacketFilter",
           "PowerControl", "PowerCut", "PowerReturn", "Scheduler", "ServiceProxies", "StorageLayer", "describe", "has", "missing", "providers"]


class Fabric(Protocol):
    """network namespaces and links between the nodes (nftables, tc, a link emulator)"""

    def namespace(self, node: int) -> str:
        """The node's network namespace (under /run/netns)."""

    def node_interface(self, node: int) -> str:
        """The node's end of its link, inside its namespace."""

    def host_interface(self, node: int) -> str:
        """The bridge's end of the node's link, in the root namespace."""

    def gateway_address(self) -> str:
        """The fabric's own address (the bridge's, where the rendezvous store listens)."""

    def emulator_interface(self, node: int) -> str:
        """The link emulator's device in the node's namespace."""

    def link_emulator(self) -> Any:
        """The run's link emulator, started on first use."""

    def running_link_emulator(self) -> Any | None:
        """The link emulator if one was started (a revert never starts one)."""

    def mark_lost(self, node: int) -> None:
        """The node is cut off for the rest of the run: its exit is not the job's outcome."""


class PacketFilter(Protocol):
    """each node's network namespace open to nftables drops from the controller (partitions)"""

    # Apart from Fabric: cutting nodes from each other needs only drop rules where their
    # packets arrive, which any node with a network namespace of its own on this machine has
    # (a netns node, a local engine's container); shaping a link (latency, bandwidth, loss on
    # a veth) needs the fabric's links, which a container network does not hand out.
    def node_netns(self, node: int) -> str | int:
        """The node's network namespace: its name under /run/netns, or the pid of a process
        in it (a container's init), which the fault names while its rules are in place."""

    def rendezvous_address(self) -> str:
        """The rendezvous store's address as the nodes reach it (a partition decides which
        side keeps it)."""

    def mark_lost(self, node: int) -> None:
        """The node is cut off for the rest of the run: its exit is not the job's outcome."""


class ServiceProxies(Protocol):
    """TCP services of the run (the rendezvous store) behind a Toxiproxy proxy"""

    def service_proxy(self, service: str) -> tuple[str, str] | None:
        """(Toxiproxy API URL, proxy name) of ``service``; None when it is not proxied."""


class ContainerHost(Protocol):
    """each node a container of a container engine (docker)"""

    def container(self, node: int) -> Any:
        """The node's container (a docker SDK ``Container``)."""

    def host_of(self, node: int) -> str:
        """The engine the node's container runs on."""

    def container_name(self, node: int) -> str: ...

    def network_name(self) -> str:
        """The run's own container network."""

    def mark_lost(self, node: int) -> None:
        """The node is frozen or cut off for the rest of the run."""

    # From the journal alone (no backend running): classmethods.
    @classmethod
    def find_container(cls, host: str, name: str, run_id: str) -> Any:
        """The run's container ``name`` on ``host``; ToolError when it is gone."""

    @classmethod
    def run_network(cls, host: str, name: str, run_id: str) -> Any:
        """The run's network ``name`` on ``host`` (never one the run does not own)."""

    @classmethod
    def engine_memory(cls, host: str) -> int:
        """Bytes of memory of the engine's host."""

    @classmethod
    def shares_this_machine(cls, host: str) -> bool:
        """Whether the engine runs on this machine (its containers' /proc is ours)."""


class Scheduler(Protocol):
    """a batch scheduler that owns the nodes and the job (Slurm)"""

    def take_node_out(self, node: int, state: str, why: str) -> dict[str, Any]:
        """The node out of service (``DOWN``, ``DRAIN``); returns what ``return_node`` needs."""

    def requeue_job(self, why: str) -> dict[str, Any]:
        """The job preempted and put back in the queue."""

    def mark_lost(self, node: int) -> None:
        """The node is gone for the rest of the run (its exit is not the job's outcome)."""

    @classmethod
    def return_node(cls, change: dict[str, Any]) -> None:
        """Undo one ``take_node_out`` from its record alone."""

    @classmethod
    def requeue_refusal(cls, options: dict[str, Any]) -> str | None:
        """Why a job run with these backend options cannot be requeued, as the rest of a
        sentence after "... requeues the job" (``": submit it requeueable"``); None: it can."""


@dataclass(frozen=True)
class PowerCut:
    """What a power cut of a set of nodes killed, and how far apart the kills were."""

    pids: list[int]
    spread_s: float
    """From the first kill to the last: a real outage hits every node at the same instant."""


class PowerControl(Protocol):
    """power to whole nodes cut: every process of the nodes killed at once"""

    def power_off(self, nodes: tuple[int, ...]) -> PowerCut: ...


class PowerReturn(Protocol):
    """power back on a node after an outage: a fresh agent that rejoins the job"""

    # Apart from PowerControl: cutting a node is killing what runs there, which any backend
    # that can signal the node's processes can do; bringing it back means starting a node
    # agent into the live job, which a backend can do only where it starts nodes itself
    # (Slurm: a new job step for the node, which an attached game day may not create).
    def power_on(self, node: int) -> None: ...


class LocalDisk(Protocol):
    """a disk of each node's own, lost or rolled back with the node"""

    def node_local_dir(self, node: int) -> str: ...

    def drop_unfsynced(self, node: int) -> int | None: ...

    def wipe_local_data(self, node: int) -> int: ...


class StorageLayer(Protocol):
    """the storage fault layer (FUSE) mounted over the run's checkpoint and data tiers"""

    def storage_control_dir(self, label: str) -> str:
        """Where the injector talks to the mount of ``label`` (``shared``, ``local-node-1``)."""


@dataclass(frozen=True)
class NodeHandle:
    """A node of an attached run as the operator knows it on its infrastructure: what a game
    day's dry run, preconditions and live panel name (``container trainchaos-x-n1``,
    ``Slurm task of job 17 on n2``)."""

    kind: str
    """What a node is there, in a word or two (``container``, ``Slurm task``)."""
    name: str
    """Which one (``trainchaos-x-n1``, ``of job 17 on n2``): ``f"{kind} {name}"`` reads."""
    absent: str
    """Why a node without one counts as down, as the rest of "node 1 is down: ..." (``it has
    no container (no trainchaos-x-n1 on unix:///var/run/docker.sock)``)."""

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


class Attachable(Protocol):
    """attach to a live run another controller started (a game day's faults act on it)"""

    @classmethod
    def attach(cls, spec: Any) -> Any:
        """The backend of the live run ``spec`` (a ``RunSpec`` rebuilt from its ``run.json``)
        names, bound to the nodes it runs now; nothing of the run's is created, started or
        removed."""

    def rescan(self) -> dict[int, str]:
        """Node -> its state as the infrastructure says now: ``running`` (a fault may act on
        it), ``paused`` (frozen), ``exited`` (ended, or taken ``down`` by the scheduler)...; a
        node with nothing left: absent."""

    def node_handle(self, node: int) -> NodeHandle:
        """The node as the infrastructure calls it (for the operator's lines)."""



CAPABILITIES: tuple[type, ...] = (Fabric, PacketFilter, ServiceProxies, ContainerHost, Scheduler, PowerControl,
                                  PowerReturn, LocalDisk, StorageLayer, Attachable)


def describe(capability: type) -> str:
    """``Fabric (network namespaces and links between the nodes ...)``: for error messages."""
    doc = (capability.__doc__ or "").strip().splitlines()
    return f"{capability.__name__} ({doc[0]})" if doc else capability.__name__


def has(backend: type, capability: type) -> bool:
    """Whether ``backend`` (a class) declares ``capability``."""
    return capability in getattr(backend, "capabilities", ())


def missing(backend: type, capability: type) -> list[str]:
    """The members of ``capability`` that ``backend`` does not implement."""
    members = [name for name in vars(capability) if not name.startswith("_")]
    return [name for name in members if not callable(getattr(backend, name, None))]


def providers(capabilities: tuple[type, ...], backends: dict[str, type]) -> list[str]:
    """Names of the ``backends`` that declare every one of ``capabilities``."""
    return [name for name, cls in backends.items() if all(has(cls, c) for c in capabilities)]

