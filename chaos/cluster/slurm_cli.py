"""The Slurm client commands trainchaos runs (``sbatch``, ``squeue``, ``scontrol``,
``sinfo``, ``scancel``), each through ``slurm`` (``SLURM_CONF`` per call, a timeout, a
missing command reported as exit 127), and what they say parsed: partitions, node states.
Taking a node out of service and returning it are here too: the backend, its resource
kinds and ``trainchaos cleanup`` all do it the same way; and the run's submission options
(``SlurmOptions``) with the preflight that checks them and the cluster through the client.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from typing import Any, Literal

from pydantic import Field

from chaos.errors import ToolError
from chaos.model.types import StrictModel

__all__ = ["ACTIVE_STATES", "NODE_REASON_PREFIX", "POLL_SCHEDULER_S", "PREFIX", "node_out_of_service",
           "node_states", "parse_kv", "partitions", "preflight_problems", "requeue_refusal", "resume_node",
           "set_node_state", "slurm", "SlurmOptions"]

PREFIX = "trainchaos-"
POLL_SCHEDULER_S = 0.5
# Job states in which the job still holds (or waits for) nodes.
ACTIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
                 "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED")
NODE_REASON_PREFIX = "trainchaos:"


def slurm(argv: list[str], conf: str | None = None, timeout: float = 15.0,
          check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run a Slurm client command (``SLURM_CONF`` from ``conf`` when given)."""
    env = dict(os.environ)
    if conf:
        env["SLURM_CONF"] = conf
    try:
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                                stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        result = subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        result = subprocess.CompletedProcess(argv, 124, "", f"{argv[0]}: no answer in {timeout:g} s")
    if check and result.returncode != 0:
        raise ToolError(f"{shlex.join(argv)} failed (exit {result.returncode}): "
                        f"{(result.stderr or result.stdout).strip()}")
    return result


def parse_kv(line: str) -> dict[str, str]:
    """``scontrol show ... -o`` -> {key: value}."""
    out = {}
    for item in shlex.split(line):
        key, sep, value = item.partition("=")
        if sep:
            out[key] = value
    return out


def partitions(conf: str | None = None) -> dict[str, dict[str, str]] | None:
    """Partition name -> its ``scontrol show partition`` fields; None when slurmctld does not
    answer."""
    result = slurm(["scontrol", "show", "partition", "-o"], conf, timeout=10)
    if result.returncode != 0:
        return None
    parts = {}
    for line in result.stdout.splitlines():
        fields = parse_kv(line)
        if "PartitionName" in fields:
            parts[fields["PartitionName"]] = fields
    return parts


def node_states(names: list[str], conf: str | None = None) -> dict[str, tuple[str, str]]:
    """Slurm node -> (state, reason)."""
    if not names:
        return {}
    result = slurm(["scontrol", "show", "node", ",".join(names), "-o"], conf, timeout=10)
    states = {}
    for line in result.stdout.splitlines():
        fields = parse_kv(line)
        if "NodeName" in fields:
            states[fields["NodeName"]] = (fields.get("State", "?"), fields.get("Reason", ""))
    return states


def set_node_state(name: str, state: str, reason: str | None = None, conf: str | None = None) -> None:
    argv = ["scontrol", "update", f"NodeName={name}", f"State={state}"]
    if reason:
        argv.append(f"Reason={reason}")
    slurm(argv, conf, check=True)


def resume_node(name: str, conf: str | None = None) -> None:
    """Put a node trainchaos took out of service back (idempotent: a node in service, or one
    someone else took down for a reason of their own, is left as it is)."""
    state, reason = node_states([name], conf).get(name, ("", ""))
    if not reason.startswith(NODE_REASON_PREFIX):
        return
    if any(s in state for s in ("DOWN", "DRAIN", "FAIL")):
        slurm(["scontrol", "update", f"NodeName={name}", "State=RESUME"], conf, check=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and node_out_of_service(name, conf):
        time.sleep(0.1)


def node_out_of_service(name: str, conf: str | None = None) -> bool:
    state, reason = node_states([name], conf).get(name, ("", ""))
    return reason.startswith(NODE_REASON_PREFIX) and any(s in state for s in ("DOWN", "DRAIN", "FAIL"))


# --------------------------------------------------------------------------- resource kinds


class SlurmOptions(StrictModel):
    """``backend: {slurm: {...}}``: how the run's job is submitted."""

    partition: str | None = None
    """Partition to submit to; null: the cluster's default partition."""
    account: str | None = None
    """Account charged (``sbatch --account``); null: the user's default."""
    time_limit: str | None = None
    """Job time limit as sbatch takes it (``10``, ``1:00:00``); null: the partition's."""
    no_kill: bool = False
    """``--no-kill``: the job survives the loss of one of its nodes (an elastic job goes on
    with fewer nodes); without it Slurm ends the whole job when a node fails."""
    requeue: bool = False
    """``--requeue``: Slurm puts the job back in the queue after a node failure."""
    sbatch_args: list[str] = Field(default_factory=list)
    """Further ``sbatch`` arguments, passed as given (``["--qos=chaos"]``)."""
    signal_via: Literal["auto", "srun"] = "auto"
    """How faults signal a rank or node. ``auto``: processes on the controller's host directly
    (every node of the local testbed), the others through ``srun --jobid --overlap -w NODE``
    into the job, which signals them on their node (a real cluster). ``srun``: always through
    Slurm, also where a direct signal would do."""
    jobid: int | None = Field(None, ge=1)
    """Run inside this existing allocation (``salloc``/``sbatch`` job id) as one job step
    (``srun --jobid``) instead of submitting a job; the allocation itself is never cancelled.
    The submission options above do not apply."""


# --------------------------------------------------------------------------- the client


# --------------------------------------------------------------------------- the backend


def requeue_refusal(options: dict[str, Any]) -> str | None:
    """Why a job run with these options cannot be requeued (``Scheduler.requeue_refusal``:
    a fault that requeues it says so at preflight); None: it can."""
    parsed = SlurmOptions.model_validate(options or {})
    if parsed.jobid is not None:
        return (f", and a run inside an existing allocation (slurm.jobid: {parsed.jobid}) has no "
                "job of its own")
    if not parsed.requeue:
        return ": submit it requeueable (backend: {slurm: {requeue: true}})"
    return None


def preflight_problems(scenario: Any) -> list[str]:
    """What keeps ``scenario`` from running on this Slurm cluster (the backend's
    ``preflight``): its options against its topology and faults, the client commands, the
    controller, the allocation or partition."""
    options = SlurmOptions.model_validate(scenario.backend.options or {})
    problems = []
    topo = scenario.topology
    if topo.spares and not options.no_kill:
        problems.append("slurm: spares need no_kill: true (backend: {slurm: {no_kill: true}}): "
                        "without it Slurm ends the whole job when a node fails, spares included")
    for command in ("sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo"):
        if shutil.which(command) is None:
            problems.append(f"slurm: {command} is not on PATH (install the Slurm client "
                            "commands, slurm-client or slurm-wlm)")
            return problems
    ping = slurm(["scontrol", "ping"], timeout=10)
    if ping.returncode != 0 or "UP" not in ping.stdout:
        where = os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
        problems.append(f"slurm: slurmctld does not answer `scontrol ping` (SLURM_CONF={where}): "
                        f"{(ping.stdout + ping.stderr).strip()[:200]}")
        return problems
    if options.jobid is not None:
        job = slurm(["scontrol", "show", "job", str(options.jobid), "-o"], timeout=10)
        fields = parse_kv(job.stdout.splitlines()[0]) if job.returncode == 0 and job.stdout.strip() else {}
        if not fields:
            problems.append(f"slurm.jobid: no job {options.jobid} ({(job.stderr or job.stdout).strip()[:120]})")
        elif fields.get("JobState") != "RUNNING":
            problems.append(f"slurm.jobid: job {options.jobid} is {fields.get('JobState')}, not RUNNING: "
                            "a run needs a live allocation")
        elif int(fields.get("NumNodes", "0").split("-")[0] or 0) < topo.total_nodes:
            problems.append(f"slurm.jobid: the job needs {topo.total_nodes} nodes (topology.nodes) but "
                            f"allocation {options.jobid} has {fields.get('NumNodes')}")
        return problems
    parts = partitions() or {}
    name = options.partition
    if name is None:
        name = next((p for p, f in parts.items() if f.get("Default") == "YES"), None)
        if name is None:
            problems.append("slurm: no partition given and the cluster has no default "
                            f"partition; known: {', '.join(sorted(parts)) or 'none'}")
            return problems
    if name not in parts:
        problems.append(f"slurm.partition: unknown partition {name!r}; known: "
                        f"{', '.join(sorted(parts)) or 'none'}")
        return problems
    total = int(parts[name].get("TotalNodes", "0") or 0)
    if topo.total_nodes > total:
        problems.append(f"slurm: the job needs {topo.total_nodes} nodes (topology.nodes) but "
                        f"partition {name!r} has {total}")
    return problems
