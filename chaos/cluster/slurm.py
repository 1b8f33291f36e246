"""The ``slurm`` backend: a run is one Slurm job, one torchrun agent per node.

``start()`` submits the job with ``sbatch`` (a run-scoped resource of kind ``slurm_job``:
journaled before it is submitted, cancelled on teardown and by ``trainchaos cleanup``); its
batch script ``srun``s one task per node (``--ntasks-per-node=1``), each task runs
``python -m chaos.cluster.slurm_node RUN_DIR``, which starts the node's torchrun agent with
the node's identity (``SLURM_NODEID``) and writes its exit code back. The agents rendezvous
at the controller's TCPStore, as with ``local`` (the controller is the rendezvous host, so
any node can die without taking the rendezvous down).

Requirements on a real cluster (see docs/slurm.md): the run directory on a filesystem every
node sees; the controller's rendezvous port reachable from the nodes; ``scontrol update``
rights (an operator account) for the node faults. Signals to a rank or node go straight to
the pid where the process runs on the controller's host (every node of the local testbed);
elsewhere (a real cluster, or ``signal_via: srun``) through Slurm: a one-task step
``srun --jobid --overlap -w NODE`` in the run's job runs ``chaos.cluster.slurm_signal``
on that node, which signals only the run's processes there.

The parts are their own modules: the client commands (``chaos.cluster.slurm_cli``), the
run-scoped resources (``chaos.cluster.slurm_resources``), what runs on each node
(``chaos.cluster.slurm_node``) and how a node's processes are signalled through Slurm
(``chaos.cluster.slurm_signal``); this module is the backend itself.

What Slurm itself does (job, step and node state changes, requeues) is polled from
``scontrol`` every half second and written to the timeline as ``slurm_job``, ``slurm_step``
and ``slurm_node`` events of source ``slurm``; what trainchaos asks of Slurm as
``slurm_node_update``, ``slurm_job_update`` and ``slurm_signal``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import sys
import time
from typing import Any, ClassVar

from chaos import contract, probe
from chaos.cluster import register_backend
from chaos.cluster.base import FATAL_SIGNALS, ClusterBackend, NodeStatus
from chaos.cluster.capabilities import (
    Attachable,
    LocalDisk,
    NodeHandle,
    PowerControl,
    PowerCut,
    Scheduler,
)
from chaos.cluster.local import LocalCluster
from chaos.cluster.slurm_cli import (
    ACTIVE_STATES,
    NODE_REASON_PREFIX,
    POLL_SCHEDULER_S,
    PREFIX,
    SlurmOptions,
    node_states,
    parse_kv,
    preflight_problems,
    requeue_refusal,
    resume_node,
    set_node_state,
    slurm,
)
from chaos.cluster.slurm_node import node_file
from chaos.cluster.slurm_resources import SlurmStep
from chaos.errors import ToolError
from chaos.model.types import StrictModel
from chaos.runfiles.resources import HelperProcess
from chaos.runfiles.rundir import RunDir
from chaos.util.procs import controller_tag, find_run_processes, kill_pids, process_state

__all__ = ["SlurmCluster"]

@register_backend
class SlurmCluster(LocalCluster):
    """One Slurm job per run. Shares ``local``'s agent command, environment and rendezvous
    (the controller hosts the store); the nodes are started, watched and stopped by Slurm."""

    name: ClassVar[str] = "slurm"
    summary: ClassVar[str] = ("a run is one Slurm job (sbatch + srun, one torchrun agent per node); "
                              "scheduler faults: node DOWN, drain, preemption (requeue)")
    options_model: ClassVar[type[StrictModel]] = SlurmOptions
    capabilities: ClassVar[tuple[type, ...]] = (Scheduler, PowerControl, LocalDisk, Attachable)

    def __init__(self, spec, resources) -> None:  # noqa: ANN001 (see ClusterBackend)
        super().__init__(spec, resources)
        self.options = SlurmOptions.model_validate(spec.options or {})
        self.conf = os.environ.get("SLURM_CONF")
        self.job_id: str | None = None
        self.lost: set[int] = set()
        self._returncodes: dict[int, int] = {}
        self._job_state: str | None = None
        self._job_gone = False
        self._last_sched_poll = 0.0
        self._seen: dict[str, tuple[Any, ...]] = {}
        self._slurm_probe: probe.Probe | None = None
        self._node_names: dict[int, str] = {}
        self._touched: set[str] = set()
        self._restarts = 0
        self._exited: set[int] = set()
        self._spares_go = os.path.join(spec.run_dir, "slurm", "spares.go")
        self._attached = False

    # -- before anything starts -----------------------------------------------------------
    @classmethod
    def preflight(cls, scenario) -> list[str]:  # noqa: ANN001 (Scenario)
        return preflight_problems(scenario)

    # -- a live run another controller started (``trainchaos gameday``) ------------------
    @classmethod
    def attach(cls, spec: Any) -> SlurmCluster:
        """The backend of a live run whose job another controller submitted: bound to that
        job (found from its tasks' node files, else by the run's job name) and to the
        tasks it runs now; nothing is submitted, cancelled or released (no spares) here."""
        cluster = cls(spec, None)
        cluster._attached = True
        cluster.job_id = cluster._find_job()
        cluster.rescan()
        return cluster

    def _find_job(self) -> str | None:
        if self.options.jobid is not None:
            return str(self.options.jobid)
        for node in range(self.topology.total_nodes):
            with contextlib.suppress(OSError, ValueError):
                with open(node_file(self.spec.run_dir, node, "json"), encoding="utf-8") as fh:
                    job = str(json.load(fh).get("job_id") or "")
                if job:
                    return job
        result = slurm(["squeue", "-h", f"--name={self.spec.run_id}", "-o", "%i"], self.conf, timeout=10)
        return next(iter(result.stdout.split()), None) if result.returncode == 0 else None

    def rescan(self) -> dict[int, str]:
        """Node -> its task's state, Slurm's word first: ``exited`` (the task ended: its exit
        code written, or its wrapper gone), ``down`` / ``drained`` (its Slurm node out of
        service), ``suspended`` (the job suspended, or the node's agent stopped: frozen),
        else ``running``. A node without a task of the job's current run (not started, or
        the job ended or requeued): absent."""
        result = slurm(["scontrol", "show", "job", str(self.job_id), "-o"], self.conf, timeout=5) \
            if self.job_id else None
        fields = parse_kv(result.stdout.splitlines()[0]) if result and result.returncode == 0 and result.stdout.strip() else {}
        job_state = fields.get("JobState", "GONE")
        restarts = int(fields.get("Restarts", "0") or 0)
        if restarts > self._restarts:  # requeued: the tasks of before are no longer the run's
            self._restarts = restarts
            self._node_names.clear()
            self._returncodes.clear()
            self.lost.clear()
        if job_state not in ACTIVE_STATES:
            return {}
        names = self.node_names()
        scheduler = node_states(sorted(set(names.values())), self.conf)
        states = {}
        for node in range(self.topology.total_nodes):
            info = self._node_info(node)
            if not info.get("wrapper_pid"):
                continue
            slurm_state = scheduler.get(names.get(node, ""), ("", ""))[0]
            agent = int(info.get("agent_pid") or 0)
            if self._task_ended(node):
                states[node] = "exited"
            elif any(s in slurm_state for s in ("DOWN", "FAIL")):
                states[node] = "down"
            elif "DRAIN" in slurm_state:
                states[node] = "drained"
            elif job_state == "SUSPENDED" or (info.get("host") == socket.gethostname() and process_state(agent) == "T"):
                states[node] = "suspended"
            else:
                states[node] = "running"
        return states

    def _task_ended(self, node: int) -> bool:
        with contextlib.suppress(OSError, ValueError):
            with open(node_file(self.spec.run_dir, node, "rc"), encoding="utf-8") as fh:
                _, _, restart = fh.read().strip().partition(" ")
                if int(restart or 0) == self._restarts:  # not one of before a requeue
                    return True
        return self._wrapper_gone(node)

    def node_handle(self, node: int) -> NodeHandle:
        job = f"job {self.job_id}" if self.job_id else "the run's job"
        name = self.node_names().get(node)
        return NodeHandle("Slurm task", f"of {job} on {name}" if name else f"of {job} for node {node}",
                          f"it has no Slurm task ({job} runs none for node {node} now: not started yet, "
                          "or ended)")

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        os.makedirs(os.path.join(self.spec.run_dir, "slurm"), exist_ok=True)
        self._slurm_probe = probe.Probe(RunDir(self.spec.run_dir).events, "slurm", 0)
        self._launch: dict[str, Any] = {}
        super().start()  # node-local dirs, the rendezvous store, start_node per node
        for node in range(self.topology.nodes, self.topology.total_nodes):
            # A spare's task waits for the job's first round (see note_event).
            self.start_node(node)
            self._launch[str(node)]["wait_for"] = self._spares_go
        path = os.path.join(self.spec.run_dir, "slurm", "launch.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"run_id": self.spec.run_id, "nodes": self._launch}, fh, indent=1)
        if self.options.jobid is not None:
            self.job_id = str(self.options.jobid)
            self._step = self.resources.acquire("slurm_step", self._step_spec())
        else:
            self.job_id = self.resources.acquire("slurm_job", self._job_spec())["job_id"]
        self._emit("slurm_job_submitted", job_id=self.job_id, nodes=self.topology.total_nodes,
                   partition=self.options.partition)

    def start_node(self, node: int) -> None:
        """Not started here: recorded for the node's srun task (``chaos.cluster.slurm_node``)."""
        env = self.node_env(node)
        # Only what differs from the controller's environment travels (sbatch exports the
        # rest); the node's own identity and run markers always do.
        overrides = {k: v for k, v in env.items() if os.environ.get(k) != v}
        self._launch[str(node)] = {
            "argv": self.agent_command(node), "env": overrides,
            "log": RunDir(self.spec.run_dir).node_log(node),
        }

    def _srun_argv(self) -> list[str]:
        return ["srun", f"--nodes={self.topology.total_nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=0",
                *(["--no-kill"] if self.options.no_kill else []),
                sys.executable, "-m", "chaos.cluster.slurm_node", self.spec.run_dir]

    def _step_spec(self) -> dict[str, Any]:
        """``srun --jobid`` from the controller: one step in an existing allocation."""
        argv = self._srun_argv()
        argv[1:1] = [f"--jobid={self.options.jobid}", f"--job-name={self.spec.run_id}", "--overlap"]
        return {"name": self.spec.run_id, "job_id": str(self.options.jobid), "argv": argv,
                "cwd": self.spec.run_dir, "slurm_conf": self.conf,
                "log": RunDir(self.spec.run_dir).log("srun.out"),
                "env": {k: v for k, v in (("SLURM_CONF", self.conf),) if v}}

    def _job_spec(self) -> dict[str, Any]:
        o = self.options
        run_dir = self.spec.run_dir
        script = os.path.join(run_dir, "slurm", "job.sh")
        nodes = self.topology.total_nodes
        srun = self._srun_argv()
        with open(script, "w", encoding="utf-8") as fh:
            fh.write("#!/bin/bash\n# written by trainchaos: one torchrun agent per node\n"
                     f"exec {shlex.join(srun)}\n")
        # Executable, as any script sbatch runs (nothing secret is in it).
        os.chmod(script, 0o755)  # nosec B103
        argv = ["sbatch", "--parsable", f"--job-name={self.spec.run_id}", f"--nodes={nodes}",
                "--ntasks-per-node=1", f"--chdir={run_dir}", "--export=ALL",
                f"--output={os.path.join(run_dir, 'logs', 'slurm-%j.out')}",
                *([f"--partition={o.partition}"] if o.partition else []),
                *([f"--account={o.account}"] if o.account else []),
                *([f"--time={o.time_limit}"] if o.time_limit else []),
                *(["--no-kill"] if o.no_kill else []),
                "--requeue" if o.requeue else "--no-requeue",
                *o.sbatch_args, script]
        return {"name": self.spec.run_id, "argv": argv, "cwd": run_dir, "slurm_conf": self.conf,
                "env": {contract.RUN_ID_ENV: self.spec.run_id, contract.CONTROLLER_ENV: controller_tag()}}

    def poll(self) -> dict[int, NodeStatus]:
        self._poll_scheduler()
        out = {}
        for node in range(self.topology.total_nodes):
            rc = self._returncodes.get(node)
            if rc is None:
                path = node_file(self.spec.run_dir, node, "rc")
                with contextlib.suppress(OSError, ValueError):
                    with open(path, encoding="utf-8") as fh:
                        code, _, restart = fh.read().strip().partition(" ")
                    if int(restart or 0) == self._restarts:  # not one of before a requeue
                        rc = self._returncodes[node] = int(code)
            if rc is None and (self._job_gone or self._wrapper_gone(node)):
                # The task ended without a word (its node went down, the job was cancelled).
                rc = self._returncodes[node] = -signal.SIGKILL
            if rc not in (None, 0) and self.options.requeue and not self._job_gone:
                # Slurm may requeue the job: a failed task is the job's outcome only once
                # Slurm is done with it.
                self._returncodes.pop(node, None)
                rc = None
            out[node] = NodeStatus(rc, node in self.lost)
        return out

    def _wrapper_gone(self, node: int) -> bool:
        info = self._node_info(node)
        if not info.get("wrapper_pid"):
            return False
        # Only a wrapper on this machine can be looked at (every node of the local testbed);
        # on a real cluster the job state and the rc file on the shared filesystem tell.
        return info.get("host") == socket.gethostname() and not self.process_alive(int(info["wrapper_pid"])) \
            and not os.path.exists(node_file(self.spec.run_dir, node, "rc"))

    def _node_info(self, node: int) -> dict[str, Any]:
        try:
            with open(node_file(self.spec.run_dir, node, "json"), encoding="utf-8") as fh:
                info = json.load(fh)
        except (OSError, ValueError):
            return {}
        return info if int(info.get("restart_count", 0)) == self._restarts else {}

    def stop(self, grace_s: float = 3.0) -> list[int]:
        procs = find_run_processes(self.spec.run_id)
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)
        if self.job_id and self.options.jobid is None:
            slurm(["scancel", "--signal=TERM", "--full", self.job_id], self.conf)
        elif self.job_id:
            for step in SlurmStep._steps({"job_id": self.job_id, "name": self.spec.run_id, "slurm_conf": self.conf}):
                if "." in step:
                    slurm(["scancel", "--signal=TERM", step], self.conf)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and find_run_processes(self.spec.run_id):
            time.sleep(0.05)
        killed = kill_pids([p.pid for p in find_run_processes(self.spec.run_id)])
        if self.job_id and self.options.jobid is None:
            slurm(["scancel", self.job_id], self.conf)
        deadline = time.monotonic() + 15
        while self.job_id and self.options.jobid is None and time.monotonic() < deadline and self._job_active():
            time.sleep(0.1)
        self._poll_scheduler(force=True)
        self.close_rendezvous()
        if self._slurm_probe is not None:
            self._slurm_probe.close()
        return killed

    def _job_active(self) -> bool:
        result = slurm(["squeue", "-h", "-j", str(self.job_id), "-o", "%T"], self.conf)
        return result.returncode == 0 and bool(result.stdout.strip())

    # -- what Slurm did -------------------------------------------------------------------
    def _emit(self, kind: str, **fields: Any) -> None:
        if self._slurm_probe is not None:
            self._slurm_probe.emit(kind, **fields)

    def _poll_scheduler(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.job_id or (not force and now - self._last_sched_poll < POLL_SCHEDULER_S):
            return
        self._last_sched_poll = now
        result = slurm(["scontrol", "show", "job", self.job_id, "-o"], self.conf, timeout=5)
        fields = parse_kv(result.stdout.splitlines()[0]) if result.returncode == 0 and result.stdout.strip() else {}
        state = fields.get("JobState")
        if state is None and result.returncode != 0 and "Invalid job id" in result.stderr:
            state = "GONE"
        restarts = int(fields.get("Restarts", "0") or 0)
        if restarts > self._restarts:
            # Requeued: every node index runs again (on whatever nodes Slurm hands out now).
            self._restarts = restarts
            self._emit("slurm_requeue", job_id=self.job_id, restarts=restarts, lost_nodes=sorted(self.lost))
            if self.lost:
                # The scheduler noticed the failure and acted on it: that is a detection (the
                # job's own ranks were ended by Slurm, maybe before they could report).
                lost = sorted(self.lost)
                self._emit("detected", by="slurm", failure_class="crash",
                           suspect=f"node-{lost[0]}", nodes=lost,
                           reason=f"Slurm requeued job {self.job_id} after losing node "
                                  f"{', '.join(map(str, lost))}")
            self.lost.clear()
            self._returncodes.clear()
            self._node_names.clear()
        if state is not None:
            key = (state, fields.get("NodeList"), fields.get("Restarts"))
            if self._seen.get("job") != key:
                self._seen["job"] = key
                self._emit("slurm_job", job_id=self.job_id, state=state, nodes=fields.get("NodeList"),
                           restarts=int(fields.get("Restarts", "0") or 0), reason=fields.get("Reason"))
            self._job_state = state
            self._job_gone = state not in ACTIVE_STATES
        self._poll_steps(self.job_id)
        if self.options.jobid is not None:
            # Our work is the step, not the allocation: done when its srun client is.
            self._job_gone = not HelperProcess.exists({}, getattr(self, "_step", {}))
        names = sorted(set(self.node_names().values()) | self._touched)
        for name, (nstate, reason) in node_states(names, self.conf).items():
            if self._seen.get(f"node:{name}") != (nstate, reason):
                self._seen[f"node:{name}"] = (nstate, reason)
                self._emit("slurm_node", node_name=name, state=nstate, reason=reason,
                           node=next((i for i, n in self._node_names.items() if n == name), None))

    def _poll_steps(self, job_id: str) -> None:
        """Job step state changes (``scontrol show step``) of job ``job_id``: the srun step of
        the agents, the batch step; in someone's allocation only the run's own step."""
        result = slurm(["scontrol", "show", "step", job_id, "-o"], self.conf, timeout=5)
        seen = set()
        for line in result.stdout.splitlines() if result.returncode == 0 else []:
            fields = parse_kv(line)
            step = fields.get("StepId")
            if not step or (self.options.jobid is not None and fields.get("Name") != self.spec.run_id):
                continue
            seen.add(step)
            key = (fields.get("State"), fields.get("NodeList"))
            if self._seen.get(f"step:{step}") != key:
                self._seen[f"step:{step}"] = key
                self._emit("slurm_step", job_id=self.job_id, step_id=step, state=key[0], nodes=key[1],
                           restarts=self._restarts)
        for gone in [k for k in self._seen if k.startswith("step:") and k[5:] not in seen]:
            if self._seen[gone] != ("GONE", None):
                # A step that no longer shows has ended (scontrol keeps no finished steps).
                self._seen[gone] = ("GONE", None)
                self._emit("slurm_step", job_id=self.job_id, step_id=gone[5:], state="ENDED", nodes=None,
                           restarts=self._restarts)

    def node_names(self) -> dict[int, str]:
        """Node index -> the Slurm node running it (from the tasks themselves)."""
        for node in range(self.topology.total_nodes):
            if node not in self._node_names:
                name = self._node_info(node).get("slurm_node")
                if name:
                    self._node_names[node] = name
        return dict(self._node_names)

    def slurm_node_name(self, node: int) -> str:
        name = self.node_names().get(node)
        if not name:
            raise ToolError(f"node {node} has no Slurm node yet (its task has not started)")
        return name

    # -- scheduler actions (the Scheduler capability) ------------------------------------
    def take_node_out(self, node: int, state: str, why: str) -> dict[str, Any]:
        """``scontrol update NodeName=X State=DOWN|DRAIN``, reason ``trainchaos:<run>:<why>``."""
        name = self.slurm_node_name(node)
        self._touched.add(name)
        reason = f"{NODE_REASON_PREFIX}{self.spec.run_id}:{why}"
        set_node_state(name, state, reason, self.conf)
        self._emit("slurm_node_update", node_name=name, node=node, state=state, reason=reason,
                   by="trainchaos")
        return {"slurm_node": name, "state": state, "reason": reason, "slurm_conf": self.conf}

    def mark_lost(self, node: int) -> None:
        """Out of the job for good (the scheduler's verdict alone): its exit is not the job's."""
        self.lost.add(node)

    @classmethod
    def return_node(cls, change: dict[str, Any]) -> None:
        """RESUME a node ``take_node_out`` took out, from its record alone."""
        resume_node(change["slurm_node"], change.get("slurm_conf"))

    requeue_refusal = staticmethod(requeue_refusal)  # Scheduler: whether the job can be requeued

    def requeue_job(self, why: str) -> dict[str, Any]:
        """``scontrol requeue``: Slurm SIGTERMs every task, SIGKILLs them after KillWait and
        puts the job back in the queue (what preemption with PreemptMode=REQUEUE does)."""
        if not self.job_id or self.options.jobid is not None:
            raise ToolError("only a job trainchaos submitted can be requeued, never an allocation "
                            "it was given (backend option jobid)")
        slurm(["scontrol", "requeue", self.job_id], self.conf, check=True)
        self._emit("slurm_job_update", job_id=self.job_id, action="requeue", by="trainchaos", why=why,
                   restarts_before=self._restarts)
        return {"job_id": self.job_id, "restarts_before": self._restarts, "slurm_conf": self.conf}

    def signal_pid(self, pid: int, sig: int) -> bool:
        """A process of this run: a rank's worker on another host through its node (``srun``);
        here only one of this run (the same number may be anyone's)."""
        live = next((lr for lr in self._live.values() if lr.pid == pid), None)
        if live is not None and self._through_srun(live.node):
            return pid in self._srun_signal(live.node, sig, pids=[pid])
        if not any(p.pid == pid for p in find_run_processes(self.spec.run_id)):
            return False
        return super().signal_pid(pid, sig)

    def signal_rank(self, rank: int, sig: int) -> list[int]:
        live = self._live.get(rank)
        if live is not None and self._through_srun(live.node):
            return self._srun_signal(live.node, sig, rank=rank)
        return super().signal_rank(rank, sig)

    def signal_node(self, node: int, sig: int) -> list[int]:
        """Every process of the node (the agent, its workers; the srun task's wrapper too for
        SIGKILL: a host that dies takes the task with it), found by run id and node."""
        if self._through_srun(node):
            hit = self._srun_signal(node, sig, pids=self._named_pids(node, sig), whole_node=True)
        else:
            order = self._task_pids(node, sig, find_run_processes(self.spec.run_id))
            hit = [pid for pid in order if LocalCluster.signal_pid(self, pid, sig)]
        if sig in FATAL_SIGNALS:
            self.lost.add(node)
        return hit

    def _named_pids(self, node: int, sig: int) -> list[int]:
        """The node's agent, and for SIGKILL its task's wrapper, from the task's node file."""
        info = self._node_info(node)
        wrapper, agent = info.get("wrapper_pid"), info.get("agent_pid")
        return [int(pid) for pid in (agent, wrapper if sig == signal.SIGKILL else None) if pid]

    def _task_pids(self, node: int, sig: int, procs: list[Any]) -> list[int]:
        """A node on this host: its agent first, then every other process of the run on it,
        its wrapper last; only pids that are the run's (a node file's pid may be reused)."""
        named = self._named_pids(node, sig)
        ours = {p.pid for p in procs}
        members = [p.pid for p in procs if p.node == node]
        return [pid for pid in dict.fromkeys([*named[:1], *members, *named[1:]]) if pid in ours]

    # -- power ----------------------------------------------------------------------------
    def power_off(self, nodes: tuple[int, ...]) -> PowerCut:
        """A power domain's nodes go dark: every process of their Slurm tasks (agent, workers,
        the task's wrapper) killed as ``kill_node`` kills one node. The nodes on this host
        go in one sweep after one scan of /proc; a node on another host through a one-task
        step there (``srun`` each, one after another: the spread recorded includes them).
        The Slurm nodes stay in service (the scheduler sees tasks end, not nodes fail: a
        ``node_down`` beside it says that part). Power does not come back here: this
        backend has no ``PowerReturn`` (a node's agent is a task of the job's step, and a
        task cannot be restarted inside a running step)."""
        procs = find_run_processes(self.spec.run_id)
        here = [n for n in nodes if not self._through_srun(n)]
        victims = [pid for n in here for pid in self._task_pids(n, signal.SIGKILL, procs)]
        t_first = time.perf_counter()
        hit = [pid for pid in victims if LocalCluster.signal_pid(self, pid, signal.SIGKILL)]
        for n in nodes:
            if n not in here:
                hit += self._srun_signal(n, signal.SIGKILL, pids=self._named_pids(n, signal.SIGKILL),
                                         whole_node=True)
        self.lost.update(nodes)
        return PowerCut(hit, time.perf_counter() - t_first)

    def wipe_local_data(self, node: int) -> int:
        """``local_data: all``: the node-local directory is on the node's host; only a node
        on this host can be wiped from here."""
        if self._through_srun(node):
            raise ToolError(f"local_data: all cannot wipe node {node}'s disk: its Slurm task runs on "
                            f"{self._node_info(node).get('host') or 'another host'}, not on this controller's "
                            "host; use local_data: unfsynced (the default) there")
        return super().wipe_local_data(node)

    def note_event(self, event: dict[str, Any]) -> None:
        """Spares (``topology.spares``) are tasks of the job like the nodes, but their agents
        start only once the first round has formed, as on ``local``: the rendezvous takes
        whichever agents come first, and a spare must not take a node's place."""
        ClusterBackend.note_event(self, event)  # not local's: it starts spares as processes
        if (not self._attached and self.topology.spares and len(self._live) >= self.topology.world_size
                and not os.path.exists(self._spares_go)):
            with open(self._spares_go, "w", encoding="utf-8") as fh:
                fh.write("the job's first round formed: spares may join\n")
            self._emit("slurm_spares_released", spares=self.topology.spares)
        src = str(event.get("src", ""))
        if event.get("kind") == "rank_exit" and src.startswith("rank-") and src[5:].isdigit():
            live = self._live.get(int(src[5:]))
            if live is not None:
                self._exited.add(live.pid)

    def process_alive(self, pid: int) -> bool:
        """A rank on another host cannot be looked up in this machine's /proc: it is alive
        until it reported its exit or its node's task ended (a rank SIGKILLed on its own
        counts as alive until its replacement announces itself)."""
        live = next((lr for lr in self._live.values() if lr.pid == pid), None)
        host = self._node_info(live.node).get("host") if live is not None else None
        if live is None or not host or host == socket.gethostname():
            return super().process_alive(pid)
        return pid not in self._exited and self._returncodes.get(live.node) is None

    def _through_srun(self, node: int) -> bool:
        if self.options.signal_via == "srun":
            return True
        host = self._node_info(node).get("host")
        return bool(host) and host != socket.gethostname()

    def _srun_signal(self, node: int, sig: int, pids: list[int] | None = None, rank: int | None = None,
                     whole_node: bool = False) -> list[int]:
        """Signal on the node itself: a one-task step in the run's job on that Slurm node,
        ``python -m chaos.cluster.slurm_signal`` (which touches only the run's processes)."""
        name = self.slurm_node_name(node)
        argv = ["srun", f"--jobid={self.job_id}", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={name}",
                f"--job-name={PREFIX}signal", "--quiet", sys.executable, "-m", "chaos.cluster.slurm_signal",
                "--run", self.spec.run_id, "--signal", signal.Signals(sig).name,
                *(["--node", str(node)] if whole_node else []), *(["--rank", str(rank)] if rank is not None else []),
                *[arg for pid in pids or [] for arg in ("--pid", str(pid))]]
        result = slurm(argv, self.conf, timeout=30)
        try:
            hit = json.loads(result.stdout.strip().splitlines()[-1])["pids"]
        except (IndexError, ValueError, KeyError, TypeError) as exc:
            raise ToolError(f"signalling node {node} ({name}) through srun failed (exit {result.returncode}): "
                            f"{(result.stderr or result.stdout).strip()[:300]}") from exc
        self._emit("slurm_signal", node=node, node_name=name, signal=signal.Signals(sig).name, pids=hit,
                   rank=rank, via="srun")
        return [int(p) for p in hit]

    def node_logs(self) -> dict[int, str]:
        return {int(n): e["log"] for n, e in getattr(self, "_launch", {}).items()}
