"""Noisy neighbours: real processes that compete with a node for CPU, memory bandwidth, page
cache or disk (``noisy_neighbor``); the victim's slowdown is measured by the ``neighbor``
metric family (chaos/faults/neighbor/metrics.py). Design: docs/neighbor.md.

The load is ``chaos.loadgen`` (stdlib only), started as a run-scoped resource so that the
run's teardown and ``trainchaos cleanup`` after a SIGKILLed controller stop it:

- on a backend whose nodes are processes of this machine (local, netns, slurm's testbed): a
  ``helper_process`` beside the node (``placement: sibling``), or one that first joins every
  cgroup of the node's first rank (``placement: same``: the node's CPU quota, memory limit
  and page-cache charge are shared with it);
- on a container engine (``ContainerHost``): a second container from the node's own image on
  the same engine, with its own ``cpus`` limit (``sibling``), or the load exec'd inside the
  node's container (``same``: under the container's limits).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from chaos import contract
from chaos.cluster.capabilities import ContainerHost, LocalDisk, has
from chaos.cluster.cgroups import cgroup_path
from chaos.errors import ToolError
from chaos.faults.base import FailureClass, FaultParams, FaultType, TargetKind, register
from chaos.model.types import MAX_SECONDS

if TYPE_CHECKING:
    from chaos.cluster.base import InjectionContext

__all__ = ["NoisyNeighbor", "NoisyNeighborParams"]


class NoisyNeighborParams(FaultParams):
    kind: Literal["cpu", "memory_bw", "page_cache", "io"] = "cpu"
    """What the neighbour competes for: busy loops (``cpu``), streaming copies of a buffer past
    the last-level cache (``memory_bw``), reads of a file over and over that evict others'
    cached pages (``page_cache``), writes fsynced to the node's own disk (``io``)."""
    placement: Literal["same", "sibling"] = "sibling"
    """``same``: inside the node's own cgroups (its container on docker), sharing its CPU
    quota, memory limit and page-cache charge; ``sibling``: beside the node (a second
    container on the same engine), under limits of its own."""
    workers: int = Field(2, ge=1, le=256)
    """Processes of load (each one busy loop, one copy stream, one reader, one writer)."""
    size_mb: int = Field(64, ge=1, le=1 << 20)
    """MiB per worker: the buffer of ``memory_bw``, the file of ``page_cache`` and ``io``."""
    cpus: float | None = Field(None, gt=0, le=1024)
    """CPU limit of the neighbour with ``placement: sibling``: its own container's on a
    container engine, else a CPU cgroup of its own with that CFS quota; null: none. With
    ``same`` the node's own limits apply instead."""
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    """Seconds the neighbour runs; null: until the run ends."""


def _load_argv(python: str, params: dict[str, Any], work_dir: str | None, join_pid: int | None) -> list[str]:
    argv = [python, "-m", "chaos.loadgen", params["kind"], "--workers", str(params["workers"]),
            "--size-mb", str(params["size_mb"])]
    if work_dir:
        argv += ["--dir", work_dir]
    if join_pid:
        argv += ["--join-cgroups-of", str(join_pid)]
    return argv


@register
@dataclass
class NoisyNeighbor(FaultType):
    type_name: ClassVar[str] = "noisy_neighbor"
    family: ClassVar[str] = "neighbor"
    failure_class: ClassVar[FailureClass] = "slow"
    summary: ClassVar[str] = ("Start real competing processes on the target nodes: busy CPU, memory-bandwidth "
                              "copies, page-cache eviction or disk writes, in the node's cgroups or beside them.")
    mechanism: ClassVar[str] = ("chaos.loadgen as a run-scoped helper process (joining the node's cgroups for "
                                "placement: same); on docker a second container on the engine, or an exec in "
                                "the node's container")
    fidelity: ClassVar[str] = (
        "Stands for a co-tenant on a shared host: another job's data loader burning CPU, a "
        "memory-bandwidth hog, a backup reading through the page cache, a log writer on the same "
        "disk. The victim is not changed at all: only the kernel's scheduler, memory controller "
        "and block layer decide how much it loses, so the slowdown measured is what that "
        "isolation (none, a cgroup, a container's limits) really gives. Exercises straggler "
        "tolerance and that no detector blames a node for being slow. It does not model "
        "contention inside the GPU, NVLink or the NIC, nor a neighbour on another host.")
    params_model: ClassVar[type[FaultParams]] = NoisyNeighborParams
    target_kinds: ClassVar[tuple[TargetKind, ...]] = ("node",)

    def inject(self, ctx: InjectionContext) -> dict[str, Any]:
        if ctx.resources is None:
            raise ToolError("noisy_neighbor needs the run's resources (a helper process per node)")
        if has(type(ctx.cluster), ContainerHost):
            record = self._inject_containers(ctx)
        else:
            record = self._inject_processes(ctx)
        if self.params.get("duration_s") is not None:
            ctx.schedule_revert(self, float(self.params["duration_s"]))
        return record

    def _work_dir(self, ctx: InjectionContext, node: int) -> str | None:
        if self.params["kind"] not in ("page_cache", "io"):
            return None
        if has(type(ctx.cluster), LocalDisk):
            base = ctx.require(LocalDisk).node_local_dir(node)  # the node's own disk
        else:
            base = os.path.join(ctx.run_dir, f"neighbor-node-{node}")
        return os.path.join(base, f"neighbor-{self.fault_id}")

    def _inject_processes(self, ctx: InjectionContext) -> dict[str, Any]:
        assert ctx.resources is not None
        loads = []
        for node in self.target.nodes:
            join = self._node_pid(node) if self.params["placement"] == "same" else None
            if self.params["placement"] == "same" and join is None:
                raise ToolError(f"noisy_neighbor placement same: node {node} has no live rank to share cgroups with")
            name = f"neighbor-{self.fault_id}-n{node}"
            argv = _load_argv(sys.executable, self.params, self._work_dir(ctx, node), join)
            if self.params.get("cpus") is not None and join is None:
                # A sibling with a CPU limit of its own: a run-scoped CPU cgroup with a CFS quota.
                path = cgroup_path("cpu", f"{ctx.cluster.spec.run_id}-{name}")
                ctx.resources.acquire("cgroup", {"path": path, "settings": {
                    "cpu.cfs_period_us": 100_000, "cpu.cfs_quota_us": int(float(self.params["cpus"]) * 100_000)}})
                argv += ["--join-cgroup", path]
            details = ctx.resources.acquire("helper_process", {"name": name, "argv": argv})
            loads.append({"node": node, "spec": {"name": name, "argv": argv}, "details": details})
        return {"placement": self.params["placement"], "kind": self.params["kind"], "processes": loads}

    def _node_pid(self, node: int) -> int | None:
        """A live rank of ``node`` (its cgroups are the node's)."""
        for rank in sorted(self.target.pids):
            if rank in self.target.ranks:
                return self.target.pids[rank]
        return None

    def _inject_containers(self, ctx: InjectionContext) -> dict[str, Any]:
        host = ctx.require(ContainerHost)
        assert ctx.resources is not None
        run_id = ctx.cluster.spec.run_id
        record: dict[str, Any] = {"backend": ctx.cluster.name, "run_id": run_id, "kind": self.params["kind"],
                                  "placement": self.params["placement"], "containers": [], "execs": []}
        for node in self.target.nodes:
            cont = host.container(node)
            cont.reload()
            config = cont.attrs.get("Config", {})
            python = (config.get("Cmd") or ["python"])[0]
            tag = f"neighbor-{self.fault_id}-n{node}"
            work_dir = None
            if self.params["kind"] in ("page_cache", "io"):
                # The container's own /tmp (its image's filesystem), not the machine's.
                work_dir = f"/tmp/{tag}"  # nosec B108
            argv = _load_argv(python, self.params, work_dir, None)
            env = {contract.RUN_ID_ENV: run_id, contract.RESOURCE_ENV: tag}
            if self.params["placement"] == "same":
                record["execs"].append([host.host_of(node), cont.name, tag])
                cont.exec_run(argv, detach=True, environment=env)
                continue
            hc = cont.attrs.get("HostConfig", {})
            create: dict[str, Any] = {
                "image": config.get("Image"), "command": argv, "environment": env,
                "mounts": [{"Type": m.get("Type"), "Source": m.get("Source"), "Target": m.get("Target"),
                            "ReadOnly": bool(m.get("ReadOnly"))} for m in hc.get("Mounts") or []],
                "working_dir": config.get("WorkingDir") or "/", "init": True, "network_mode": "none",
                "labels": {"trainchaos.neighbor": tag},
            }
            if self.params.get("cpus") is not None:
                create["nano_cpus"] = int(float(self.params["cpus"]) * 1e9)
            name = f"{run_id}-{tag}"
            spec = {"host": host.host_of(node), "name": name, "run_id": run_id, "create": create}
            ctx.resources.acquire("docker_container", spec)
            record["containers"].append(spec)
        return record

    def revert(self, ctx: InjectionContext, record: dict[str, Any]) -> None:
        self.revert_record(record)

    @classmethod
    def revert_record(cls, record: dict[str, Any]) -> None:
        """Stop every load the record names (each also a run-scoped resource: whichever of
        the two undoes it first, the other finds nothing)."""
        from chaos.runfiles.resources import RESOURCE_KINDS

        RESOURCE_KINDS.load()
        for load in record.get("processes", []):
            RESOURCE_KINDS.items["helper_process"].destroy(load["spec"], load["details"])
        for spec in record.get("containers", []):
            RESOURCE_KINDS.items["docker_container"].destroy(spec, {})
        if record.get("execs"):
            _stop_execs(record)


def _stop_execs(record: dict[str, Any]) -> None:
    """Kill the loads exec'd inside node containers, found by their tag (the container
    itself goes with the run: a load inside it cannot outlive it)."""
    from chaos.cluster import backend_of

    engine = backend_of(record, ContainerHost)
    for host, name, tag in record["execs"]:
        try:
            cont = engine.find_container(host, name, record["run_id"])
        except ToolError:
            continue
        if cont.status == "running":
            python = (cont.attrs.get("Config", {}).get("Cmd") or ["python"])[0]
            cont.exec_run([python, "-m", "chaos.loadgen", "stop", "--tag", tag])
