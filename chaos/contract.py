"""The names the chaos controller and the training job agree on, in one place.

Both sides read them from here: the controller (backends export the variables, faults and
cleanup find processes by them) and the job (``chaos.probe`` in every rank, the bundled
``harness``). A name spelled twice drifts; a rename here is a rename on both sides.

Standard library only, and nothing imported at all: the probe loads this module into every
rank of a user's job.
"""

from __future__ import annotations

__all__ = [
    "AGENT_ZYGOTE_KEEPER_ENV",
    "CHECKPOINT_FORMAT_ENV",
    "CKPT_DIR_ENV",
    "CONTROLLER_ENV",
    "DOCKER_HOSTS_ENV",
    "ENV_PREFIX",
    "EVENTS_DIR_ENV",
    "EVENTS_SUBDIR",
    "FAILURE_DOMAIN_ENV",
    "HOLDS_SUBDIR",
    "LOCAL_TIER_SUBDIR",
    "NODE_ADDR_ENV",
    "NONFINITE_DETECTOR",
    "NODE_ENV",
    "NODE_LOCAL_DIR_ENV",
    "PLUGINS_ENV",
    "PROBE_FAULTS_ENV",
    "RDZV_ENDPOINT_ENV",
    "RANK_OFFSET_ENV",
    "RECORD_DIGESTS_ENV",
    "RESOURCE_ENV",
    "RUN_ID_ENV",
    "SHARED_CHECKPOINTS_SUBDIR",
    "SLURM_TESTBED_ENV",
    "SRC_ENV",
    "STATE_DIR_ENV",
    "LIVE_DIR_ENV",
    "WARM_START_ENV",
    "STORAGE_RUN_ID_ENV",
    "ZYGOTE_ENV_ROOM_ENV",
    "ZYGOTE_SOCKET_ENV",
]

# -- environment of every process of a run (exported by the backend, read by the job) --------

ENV_PREFIX = "TRAINCHAOS_"
"""Every name below starts with it (a container backend passes all of them through)."""

RUN_ID_ENV = "TRAINCHAOS_RUN_ID"
"""The run's id: the only mark by which trainchaos finds (and ever signals) a process."""
CONTROLLER_ENV = "TRAINCHAOS_CONTROLLER"
"""``<pid>:<start time>`` of the controller that started the process (orphans are found by it)."""
NODE_ENV = "TRAINCHAOS_NODE"
"""The simulated node the process runs on (an int)."""
NODE_ADDR_ENV = "TRAINCHAOS_NODE_ADDR"
"""The address the node's ranks bind and advertise (a netns node's own; else 127.0.0.1)."""
RDZV_ENDPOINT_ENV = "TRAINCHAOS_RDZV_ENDPOINT"
"""``host:port`` of the rendezvous store the node's agent uses (hosted by the controller, off
the nodes): a rank that still reaches it knows its own link is up."""
NODE_LOCAL_DIR_ENV = "TRAINCHAOS_NODE_LOCAL_DIR"
"""The node's local disk: lost with the node (a power cut), unlike the run's shared dir."""
FAILURE_DOMAIN_ENV = "TRAINCHAOS_FAILURE_DOMAIN"
"""The node's failure domain (power domain or rack; empty: the node alone)."""
EVENTS_DIR_ENV = "TRAINCHAOS_EVENTS_DIR"
"""Where the probe writes events; unset, the probe is detached (every call a no-op)."""
CKPT_DIR_ENV = "TRAINCHAOS_CKPT_DIR"
"""The run's checkpoint directory (absolute) as the workload declares it (``checkpoint_dir``;
default ``<run_dir>/checkpoints``), for a user's own script: where storage faults and the
crash-point sweep act, so where its saves must go (also ``{ckpt_dir}`` in its command line)."""
PROBE_FAULTS_ENV = "TRAINCHAOS_PROBE_FAULTS"
"""The JSON file of in-process faults the probe of each rank must fire."""
RANK_OFFSET_ENV = "TRAINCHAOS_RANK_OFFSET"
"""Added to ``RANK`` for the rank trainchaos names (``rank-<RANK + offset>``): a launcher that
starts one torchrun per replica group (torchft) sees each group number its ranks from 0."""
SRC_ENV = "TRAINCHAOS_SRC"
"""Overrides the probe's event source name (default ``rank-<RANK>``)."""
RECORD_DIGESTS_ENV = "TRAINCHAOS_RECORD_DIGESTS"
"""Set (``1``) in the fault-free twin: ``probe.state_digest`` then reports the model's digest
at every step it is called, the reference the checkpoint freshness checker judges by."""

ZYGOTE_SOCKET_ENV = "TRAINCHAOS_ZYGOTE_SOCKET"
"""Warm start: the abstract unix socket of the node's zygote (``harness.zygote``), set by the
torchrun agent that started it; the agent's workers hand their launch to it."""
ZYGOTE_ENV_ROOM_ENV = "TRAINCHAOS_ZYGOTE_ENV_ROOM"
"""Spare room in the zygote's own environment, overwritten by each rank it forks with the
rank's environment (what ``/proc/<pid>/environ`` shows: ``harness.procenv``)."""

LOCAL_TIER_SUBDIR = "checkpoints"
"""The node-local checkpoint tier: ``$TRAINCHAOS_NODE_LOCAL_DIR/checkpoints``."""

# -- the run directory, as both sides name its parts (the rest: ``chaos.runfiles.rundir``) ------------

EVENTS_SUBDIR = "events"
"""``<run_dir>/events``: what EVENTS_DIR_ENV points to; the controller tails it."""
SHARED_CHECKPOINTS_SUBDIR = "checkpoints"
"""``<run_dir>/checkpoints``: the shared checkpoint tier when ``checkpoint.dir`` is not set;
the job writes it, the controller's storage faults and mounts find it there."""
HOLDS_SUBDIR = "holds"
"""``<run_dir>/holds/<fault id>``: the controller's word that an external fault is in effect,
which a rank holding at the fault's step waits for (``chaos.probe.hold``)."""

# -- controller side only (named here so that every TRAINCHAOS_* name has one home) ----------

RESOURCE_ENV = "TRAINCHAOS_RESOURCE"
"""The name of a run-scoped helper process (a proxy, an emulator) the controller started."""
STORAGE_RUN_ID_ENV = "TRAINCHAOS_STORAGE_RUN_ID"
"""The run id a FUSE fault-layer daemon carries instead of RUN_ID_ENV: stopping the nodes
must not kill the mount under them."""
PLUGINS_ENV = "TRAINCHAOS_PLUGINS"
"""Comma-separated modules to import for their fault types."""
DOCKER_HOSTS_ENV = "TRAINCHAOS_DOCKER_HOSTS"
"""Comma-separated docker engines ``trainchaos cleanup`` scans for leftovers besides the
default one (the other hosts of a multi-host cluster); never passed into a node."""
STATE_DIR_ENV = "TRAINCHAOS_STATE_DIR"
"""Where trainchaos keeps machine-wide state (live runs, journals of applied faults)."""
LIVE_DIR_ENV = "TRAINCHAOS_LIVE_DIR"
"""Where every controller on the machine says it runs, whatever its state dir (default
``/dev/shm/trainchaos-live``)."""
WARM_START_ENV = "TRAINCHAOS_WARM_START"
"""``1`` or ``0``: the bundled harness's ``warm_start`` where a scenario does not set it
(a CI pipeline's quick runs, the test suite); a scenario's own value wins, and the run
record's ``rank_launch`` says which start was measured."""
CHECKPOINT_FORMAT_ENV = "TRAINCHAOS_CHECKPOINT_FORMAT"
"""The format the checkpoint checkers read a job's checkpoints as, overriding what its kind
declares or their layout shows: a format's name (``chaos.ckptformat``) or a hook
``module:function`` returning ``(step, state_dict)``."""
AGENT_ZYGOTE_KEEPER_ENV = "TRAINCHAOS_AGENT_ZYGOTE_KEEPER_FD"
"""An open file descriptor (inherited): the read end of a pipe that a process starting many
controllers in turn (a test suite, a CI job) holds open. Controllers given it share one
agent zygote per environment (``chaos.workload.agent_forks``), which lives until that pipe
closes, instead of each starting and importing its own."""
SLURM_TESTBED_ENV = "TRAINCHAOS_SLURM_TESTBED"
"""The root of a running local Slurm testbed; its daemons and job steps carry it."""

# -- values of the job's events ---------------------------------------------------------------
# The ``detector`` of the bundled harness's non-finite guard (a ``detected`` event): the
# controller's health check reads a run stopped by it, before a non-finite loss was recorded,
# as a run that trained to NaN.
NONFINITE_DETECTOR = "nonfinite"
