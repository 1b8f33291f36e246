"""The live run a game day exercises: found by its id (or the newest live docker run), its
node containers found by the run's labels, and every plan target resolved to them.

``AttachedRun`` is the docker backend bound to containers it did not start: the fault types
see the same backend interface as in a scenario (``container``, ``signal_node``,
``power_off``, ``live_ranks`` from the run's ``rank_start`` events...). Resolution is the
blast-radius guard of the exercise: a target naming a container, node or rank that is not
one of the run's labelled containers is refused (``BlastRadiusError``, exit 2) before any
step runs, and that container is never touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chaos.cluster.base import ResolvedTarget, RunSpec, node_group, target_ranks
from chaos.cluster.docker import DockerCluster
from chaos.cluster.docker_engine import (
    LABEL_NODE,
    LABEL_RUN,
    BlastRadiusError,
    client,
    default_host,
    owned,
)
from chaos.errors import ScenarioError, ToolError, ValidationIssue
from chaos.model import Topology
from chaos.record import RunRecordError, load_run_start
from chaos.rollback import active_runs, run_is_live
from chaos.rundir import RunDir
from chaos.telemetry import EventTailer

__all__ = ["AttachedRun", "Resolution", "find_run"]


def find_run(which: str, plan_path: str) -> dict[str, Any]:
    """The registry entry of the live run ``which`` (``latest``: the newest on docker)."""
    live = []
    for entry in active_runs():
        if not run_is_live(entry):
            continue
        try:
            start = load_run_start(entry["run_dir"])
        except RunRecordError:
            continue
        if start.backend.name == "docker":
            live.append({**entry, "record": start.model_dump(exclude_unset=True)})
    if which != "latest":
        live = [e for e in live if e["run_id"] == which]
    if not live:
        known = ", ".join(e["run_id"] for e in active_runs() if run_is_live(e)) or "none"
        raise ScenarioError([ValidationIssue(plan_path, "run", f"no live docker run {which!r} (live runs: "
                                             f"{known}); start one with `trainchaos run` first")])
    return max(live, key=lambda e: e.get("started", 0))


@dataclass(frozen=True)
class Resolution:
    """What one inject step would touch, now."""

    target: ResolvedTarget
    containers: list[tuple[int, str, str]]
    """(node, container name, status) per node hit."""

    def describe(self) -> str:
        parts = [f"node {n} = container {name} ({status})" for n, name, status in self.containers]
        if self.target.ranks:
            parts.append(f"ranks {', '.join(map(str, self.target.ranks))}")
        return "; ".join(parts)


class AttachedRun(DockerCluster):
    """The docker backend attached to a live run's containers (started by another controller)."""

    def __init__(self, entry: dict[str, Any], hosts: list[str]) -> None:
        record = entry["record"]
        scenario = record["scenario"]
        topo = dict(scenario["topology"])
        for key in ("racks", "power_domains"):
            topo[key] = {k: tuple(v) for k, v in (topo.get(key) or {}).items()}
        options = dict((scenario.get("backend") or {}).get("options") or {})
        if hosts:
            options["hosts"] = list(hosts)
        spec = RunSpec(run_id=record["run_id"], run_dir=entry["run_dir"], topology=Topology(**topo),
                       worker_argv=[], options=options)
        # No resources: an attached game day creates nothing of the run's (its faults are
        # journaled by the session), and a dry run writes nothing at all.
        super().__init__(spec, None)  # type: ignore[arg-type]
        self.hosts = list(self.options.hosts) or [default_host()]
        self._tailer = EventTailer(RunDir(entry["run_dir"]).events)
        self.backlog = self.refresh()
        """The run's events up to the attach (the observer starts from them)."""

    def refresh(self) -> list[dict[str, Any]]:
        """Containers from the engines (by the run's label), ranks from the run's events;
        returns the new events."""
        self._containers = {}
        self._addresses: dict[int, str] = {}
        for host in self.hosts:
            for cont in client(host).containers.list(all=True, filters={"label": f"{LABEL_RUN}={self.spec.run_id}"}):
                node = int(cont.labels.get(LABEL_NODE, -1))
                if node < 0:
                    continue
                self._containers[node] = cont.name
                nets = cont.attrs.get("NetworkSettings", {}).get("Networks", {})
                addr = (nets.get(self.network_name()) or {}).get("IPAddress")
                if addr:
                    self._addresses[node] = addr
        events = self._tailer.poll()
        for ev in events:
            self.note_event(ev)
        return events

    def note_event(self, event: dict) -> None:
        # Not the backend's: spares are started by the run's own controller, never here.
        from chaos.cluster.base import ClusterBackend
        from chaos.cluster.docker import PID_STRIDE, handle

        if event.get("kind") == "rank_start" and isinstance(event.get("pid"), int) \
                and isinstance(event.get("node"), int) and event["pid"] < PID_STRIDE:
            event = {**event, "pid": handle(event["node"], event["pid"])}
        ClusterBackend.note_event(self, event)

    def host_of(self, node: int) -> str:
        for host in self.hosts:
            try:
                client(host).containers.get(self.container_name(node))
                return host
            except Exception:
                continue
        return self.hosts[node % len(self.hosts)]

    def node_address(self, node: int) -> str:
        if node not in self._addresses:
            raise ToolError(f"node {node}'s container has no address on {self.network_name()}")
        return self._addresses[node]

    def mark_lost(self, node: int) -> None:
        """The run's own controller decides what its nodes' exits mean."""

    def status_of(self, node: int) -> str:
        try:
            return self.container(node).status
        except ToolError:
            return "gone"

    def poll(self):  # noqa: ANN201 (ClusterBackend.poll)
        from chaos.cluster.base import NodeStatus

        return {n: NodeStatus(None if self.status_of(n) in ("running", "paused") else -1)
                for n in self._containers}

    # -- targets ----------------------------------------------------------------------------
    def resolve_step(self, target: dict[str, Any], live: bool = True) -> Resolution:
        """A plan target -> the run's containers (and ranks) it means now; anything outside
        the run's labels is refused before it is touched."""
        if "container" in target:
            name = str(target["container"])
            found = None
            for host in self.hosts:
                try:
                    found = client(host).containers.get(name)
                    break
                except Exception:
                    continue
            if found is None:
                raise BlastRadiusError(f"container {name!r} does not exist on {', '.join(self.hosts)}")
            owned(found, self.spec.run_id, "container")
            target = {"node": int(found.labels.get(LABEL_NODE, -1))}
        nodes = node_group(target, self.topology)
        ranks = target_ranks(target)
        if ranks is not None:
            live_ranks = self.live_ranks() if live else {}
            missing = [r for r in ranks if r not in live_ranks]
            if live and missing:
                raise BlastRadiusError(f"rank {', '.join(map(str, missing))} has no live process in the run's "
                                       f"containers (live ranks: {sorted(live_ranks) or 'none'})")
            nodes = tuple(sorted({live_ranks[r].node for r in ranks})) if live else ()
            resolved = ResolvedTarget(ranks=ranks, pids={r: live_ranks[r].pid for r in ranks} if live else {})
        else:
            if nodes is None:
                raise ToolError(f"cannot resolve target {target!r}")
            unknown = [n for n in nodes if n not in self._containers]
            if unknown:
                raise BlastRadiusError(f"node {', '.join(map(str, unknown))} has no container labelled "
                                       f"{LABEL_RUN}={self.spec.run_id} (the run's nodes: "
                                       f"{sorted(self._containers)})")
            on = {r: lr for r, lr in (self.live_ranks() if live else {}).items() if lr.node in nodes}
            resolved = ResolvedTarget(ranks=tuple(sorted(on)), nodes=tuple(nodes),
                                      pids={r: lr.pid for r, lr in sorted(on.items())})
        containers = []
        for node in nodes:
            cont = self.container(node)  # raises BlastRadiusError for a container not of the run
            containers.append((node, cont.name, cont.status))
        return Resolution(resolved, containers)
