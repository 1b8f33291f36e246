"""The live run a game day exercises: found by its id (or the newest live run of a backend
that can be attached to), its nodes found as its backend knows them (the docker run's
containers by the run's labels, the Slurm run's tasks of its job), and every plan target
resolved to them.

``AttachedRun`` holds the backend the run's record names, attached to nodes it did not start
through its ``Attachable`` capability (``chaos.cluster.capabilities``: the docker and slurm
backends have it; nothing here names a concrete backend): the fault types see the same
backend as in a scenario (``container``, ``signal_node``, ``take_node_out``, ``live_ranks``
from the run's ``rank_start`` events...). What a node is there (a container, a Slurm task)
and its state (``running``, ``paused``, ``suspended``, ``exited``, ``down``...) are the
backend's words (``Attachable.node_handle``, ``Attachable.rescan``).

Two checks, two moments:

- the blast-radius guard, on the whole plan before any step runs: a target naming a
  container, node, domain or rank that is not the run's is refused (``TargetRefused``,
  exit 2) and never touched;
- preconditions, just before each inject (and in ``--dry-run``): the target's nodes exist
  and run (not paused, suspended, exited, down or gone), its ranks have live processes. An
  unmet one stops the exercise with one located line (exit 2) or, with ``skip_if_absent``,
  skips the step; either way the fault is never handed to the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chaos.cluster import backend_as, known_backends, lookup_backend
from chaos.cluster.base import RunSpec
from chaos.cluster.capabilities import (
    Attachable,
    ContainerHost,
    NodeHandle,
    describe,
    has,
    providers,
)
from chaos.errors import EXIT_BAD_INPUT, ChaosError, ScenarioError, ToolError, ValidationIssue
from chaos.metrics.records import DetectionSources
from chaos.model.scenario import Topology
from chaos.model.targets import ResolvedTarget, parse_target
from chaos.runfiles.record import RunRecordError, load_run_start
from chaos.runfiles.rollback import active_runs, run_is_live
from chaos.runfiles.rundir import RunDir
from chaos.runfiles.telemetry import EventTailer

__all__ = ["AttachedRun", "Resolution", "TargetRefused", "find_run"]

APPLIES_TO = "running"
"""The node state every fault applies to: a paused container or suspended task cannot be
frozen again or given packet loss through its frozen processes, an exited one has nothing to
act on, a node the scheduler took down or drained is out of the job's service."""
DOWN_STATES = ("exited", "dead", "created", "removing", "down")
"""States in which a node is down (its processes gone or about to be)."""


class TargetRefused(ChaosError):
    """A plan target outside the run (the blast-radius guard), or one whose nodes or
    processes are not there now (a precondition): nothing is touched."""

    exit_code = EXIT_BAD_INPUT


def attachable_backends() -> list[str]:
    """The backends a game day can attach to (those declaring ``Attachable``)."""
    return providers((Attachable,), known_backends())


def find_run(which: str, plan_path: str) -> dict[str, Any]:
    """The registry entry of the live run ``which`` (``latest``: the newest of a backend that
    can be attached to)."""
    attachable = attachable_backends()
    live = []
    for entry in active_runs():
        if not run_is_live(entry):
            continue
        try:
            start = load_run_start(entry["run_dir"])
        except RunRecordError:
            continue
        if which != "latest" and entry["run_id"] == which and start.backend.name not in attachable:
            raise ScenarioError([ValidationIssue(plan_path, "run", _not_attachable(which, start.backend.name))])
        if start.backend.name in attachable:
            live.append({**entry, "record": start.model_dump(exclude_unset=True)})
    if which != "latest":
        live = [e for e in live if e["run_id"] == which]
    if not live:
        known = ", ".join(e["run_id"] for e in active_runs() if run_is_live(e)) or "none"
        raise ScenarioError([ValidationIssue(
            plan_path, "run", f"no live {' or '.join(attachable) or 'attachable'} run {which!r} (live runs: "
                              f"{known}); start one with `trainchaos run` first")])
    return max(live, key=lambda e: e.get("started", 0))


def _not_attachable(run_id: str, backend: str) -> str:
    have = ", ".join(attachable_backends()) or "none registered"
    return (f"run {run_id} runs on the {backend} backend, which a game day cannot attach to: "
            f"{backend} has no {describe(Attachable)}; backends that have it: {have}")


@dataclass(frozen=True)
class Resolution:
    """What one inject step would touch, now, and what keeps it from applying."""

    target: ResolvedTarget
    nodes: list[tuple[int, NodeHandle, str]]
    """(node, what it is on the infrastructure, state) per node hit."""
    unmet: list[str] = field(default_factory=list)
    """Preconditions that do not hold now (empty: the step may run)."""

    def describe(self) -> str:
        parts = [f"node {n} = {handle} ({state})" for n, handle, state in self.nodes]
        if self.target.ranks:
            parts.append(f"ranks {', '.join(map(str, self.target.ranks))}")
        return "; ".join(parts)

    def precondition(self) -> str:
        """The preconditions in words, with whether they hold now (the dry run's line)."""
        what = []
        if self.nodes:
            what.append(f"{self.nodes[0][1].kind}{'s' if len(self.nodes) > 1 else ''} {APPLIES_TO}")
        if self.target.ranks:
            what.append("ranks live")
        state = "met" if not self.unmet else "NOT MET: " + "; ".join(self.unmet)
        return f"precondition: {' and '.join(what) or 'none'} ({state})"


class AttachedRun:
    """A live run as a game day sees it: its backend (attached), its nodes' states and its
    events since the last refresh."""

    detection: DetectionSources | None = None
    """Where the run's detections can come from (its workload's), to tell a fault the job did
    not detect from one no source could have reported; None: the run's record does not say."""

    def __init__(self, entry: dict[str, Any], hosts: list[str]) -> None:
        record = entry["record"]
        scenario = record["scenario"]
        self.detection = detection_sources_of(scenario.get("workload"))
        topo = dict(scenario["topology"])
        for key in ("racks", "power_domains"):
            topo[key] = {k: tuple(v) for k, v in (topo.get(key) or {}).items()}
        options = dict((scenario.get("backend") or {}).get("options") or {})
        backend = str(record["backend"]["name"])
        if hosts:
            if "hosts" not in lookup_backend(backend).options_model.model_fields:
                raise ToolError(f"the plan's hosts ({', '.join(hosts)}) name engines of a run's containers; "
                                f"run {record['run_id']} runs on the {backend} backend, which takes no hosts")
            options["hosts"] = list(hosts)
        self.spec = RunSpec(run_id=record["run_id"], run_dir=entry["run_dir"], topology=Topology(**topo),
                            worker_argv=[], options=options)
        self.topology = self.spec.topology
        # No resources: an attached game day creates nothing of the run's (its faults are
        # journaled by the session), and a dry run writes nothing at all.
        attachable = backend_as(backend, Attachable)
        if attachable is None:
            raise ToolError(_not_attachable(self.spec.run_id, backend))
        self.backend = attachable.attach(self.spec)
        self.states: dict[int, str] = {}
        """Node -> its state at the last refresh (a node with nothing left: absent)."""
        self._tailer = EventTailer(RunDir(entry["run_dir"]).events)
        self.backlog = self.refresh()
        """The run's events up to the attach (the observer starts from them)."""

    def refresh(self) -> list[dict[str, Any]]:
        """Node states from the infrastructure, ranks from the run's events; returns the new
        events."""
        self.states = self.backend.rescan()
        return self.poll_events()

    def poll_events(self) -> list[dict[str, Any]]:
        """The run's events written since the last poll (files only: cheap to call often)."""
        events = self._tailer.poll()
        for ev in events:
            self.backend.note_event(ev)
        return events

    def status_of(self, node: int) -> str:
        return self.states.get(node, "gone")

    def nodes_running(self) -> int:
        return sum(1 for s in self.states.values() if s == APPLIES_TO)

    @property
    def node_kind(self) -> str:
        """What the run's nodes are on its infrastructure (``container``, ``Slurm task``)."""
        return self.backend.node_handle(0).kind

    # -- targets ----------------------------------------------------------------------------
    def resolve_step(self, target: dict[str, Any], live: bool = True) -> Resolution:
        """A plan target -> the run's nodes (and ranks) it means now. Anything outside the run
        is refused (TargetRefused) before it is touched; what is the run's but not there or
        not running now is listed in ``unmet``. ``live``: ask the backend which ranks live
        (on docker an exec per node); else only the recorded states are used."""
        if "container" in target:
            target = {"node": self._node_of_container(str(target["container"]))}
        try:
            form = parse_target(target)
        except ToolError:
            raise TargetRefused(f"cannot resolve target {target!r}") from None
        ranks = form.ranks()
        if ranks is not None:
            return self._resolve_ranks(ranks, live)
        try:
            nodes = form.nodes(self.topology)
        except KeyError as exc:
            # Only a group form (rack, power domain) raises KeyError here, and each names its groups.
            known = sorted(getattr(self.topology, form.groups))  # type: ignore[attr-defined]
            raise TargetRefused(f"{form.key} {exc.args[0]!r} is not one of the run's (known: "
                                f"{', '.join(known) or 'none'})") from None
        if nodes is None:
            raise TargetRefused(f"cannot resolve target {target!r}")
        outside = [n for n in nodes if not 0 <= n < self.topology.total_nodes]
        if outside:
            raise TargetRefused(f"node {', '.join(map(str, outside))} is not one of the run's nodes "
                                f"(0..{self.topology.total_nodes - 1})")
        hit, unmet = self._node_states(nodes)
        on = {r: lr for r, lr in (self.backend.live_ranks() if live else {}).items() if lr.node in nodes}
        resolved = ResolvedTarget(ranks=tuple(sorted(on)), nodes=tuple(nodes),
                                  pids={r: lr.pid for r, lr in sorted(on.items())})
        return Resolution(resolved, hit, unmet)

    def _resolve_ranks(self, ranks: tuple[int, ...], live: bool) -> Resolution:
        outside = [r for r in ranks if not 0 <= r < self.topology.world_size]
        if outside:
            raise TargetRefused(f"rank {', '.join(map(str, outside))} is not one of the run's ranks "
                                f"(0..{self.topology.world_size - 1})")
        if not live:
            return Resolution(ResolvedTarget(ranks=ranks), [])
        live_ranks = self.backend.live_ranks()
        missing = [r for r in ranks if r not in live_ranks]
        unmet = [f"rank {', '.join(map(str, missing))} has no live process in the run's {self.node_kind}s "
                 f"(live ranks: {', '.join(map(str, sorted(live_ranks))) or 'none'})"] if missing else []
        here = [r for r in ranks if r in live_ranks]
        nodes = tuple(sorted({live_ranks[r].node for r in here}))
        hit, more = self._node_states(nodes)
        resolved = ResolvedTarget(ranks=ranks, pids={r: live_ranks[r].pid for r in here})
        return Resolution(resolved, hit, unmet + more)

    def _node_states(self, nodes: tuple[int, ...]) -> tuple[list[tuple[int, NodeHandle, str]], list[str]]:
        out, unmet = [], []
        for node in nodes:
            handle = self.backend.node_handle(node)
            state = self.status_of(node)
            out.append((node, handle, state))
            if state == "gone":
                unmet.append(f"node {node} is down: {handle.absent}")
            elif state != APPLIES_TO:
                down = "down" if state in DOWN_STATES else state
                unmet.append(f"node {node} is {down}: its {handle} is {state}, not {APPLIES_TO}")
        return out, unmet

    def _node_of_container(self, name: str) -> int:
        if not has(type(self.backend), ContainerHost):
            raise TargetRefused(f"refusing to touch container {name!r}: run {self.spec.run_id}'s nodes are "
                                f"{self.node_kind}s, not containers (its backend has no {describe(ContainerHost)}); "
                                "name a node or a rank")
        ours = {self.backend.container_name(n): n for n in self.states}
        if name not in ours:
            raise TargetRefused(f"refusing to touch container {name!r}: it is not one of run "
                                f"{self.spec.run_id}'s labelled containers (those: "
                                f"{', '.join(sorted(ours)) or 'none'}); trainchaos only touches what the run owns")
        return ours[name]


def detection_sources_of(workload: dict[str, Any] | None) -> DetectionSources | None:
    """The detection sources of a run's workload as its ``run.json`` records it; None when
    the record is not one this version reads (an older run, a kind not installed)."""
    from chaos.model.scenario import Workload
    from chaos.workload import workload_for

    if not isinstance(workload, dict):
        return None
    try:
        return workload_for(Workload(**workload)).detection_sources()
    except Exception:  # any record we cannot rebuild: say nothing rather than guess
        return None
