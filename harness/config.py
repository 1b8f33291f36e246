"""Typed configuration of the harness: one dataclass per component, a docstring per field.

The command line (``python -m harness --help``) and the scenario's ``workload.harness``
mapping are both built from these dataclasses (``harness.config_load``), so an option is
declared exactly once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, cast

__all__ = [
    "CheckpointConfig",
    "ConfigError",
    "DetectConfig",
    "FailureConfig",
    "HarnessConfig",
    "ModelConfig",
    "ProgressConfig",
    "SECTIONS",
    "SlowRankConfig",
    "field_docs",
]


class ConfigError(ValueError):
    """Invalid harness options; the message names the option and the allowed values."""


@dataclass
class ModelConfig:
    name: Literal["tiny-gpt", "mlp"] = "tiny-gpt"
    """Model: a decoder-only character-level transformer, or a tiny MLP for fast tests."""
    d_model: int = 96
    """Width of the transformer (embedding size)."""
    n_layers: int = 3
    """Transformer blocks."""
    n_heads: int = 4
    """Attention heads; must divide d_model."""
    seq_len: int = 64
    """Context length in characters."""

    def __post_init__(self) -> None:
        _positive(self, "d_model", "n_layers", "n_heads", "seq_len")
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads}): "
                "each head gets an equal slice"
            )


@dataclass
class CheckpointConfig:
    dir: str = ""
    """Checkpoint directory; empty = <run-dir>/checkpoints."""
    every_steps: int = 20
    """Save every N steps (0 = never by steps)."""
    every_seconds: float = 0.0
    """Also save when this many seconds passed since the last save (0 = off)."""
    mode: Literal["sync", "async"] = "async"
    """sync: training waits for the write; async: training waits only for a host snapshot."""
    keep: int = 3
    """Checkpoints kept (newest first); at least 2."""
    local_every_steps: int = 0
    """Also save to the node-local fast tier ($TRAINCHAOS_NODE_LOCAL_DIR/checkpoints) every N steps (0 = off); a load takes the newest verified checkpoint across both tiers (harness/ckpt_tiers.py)."""
    local_fsync: bool = True
    """fsync the fast tier's files; off: like a page-cache or shm tier, fast, and lost when the node loses power."""
    save_retries: int = 1
    """Retries of a failed checkpoint write before that save is abandoned (never reported as saved)."""
    max_failed_saves: int = 3
    """Abandoned saves in a row after which the job fails as a storage failure (0 = never: train on, unprotected)."""
    when_busy: Literal["wait", "skip"] = "wait"
    """A save due while the previous async write still runs: wait for it (training blocks) or skip this save."""
    save_deadline_s: float = 0.0
    """A save still writing after this many seconds is a storage failure of the rank that owns it (0 = off)."""
    placement: Literal["auto", "shared", "local", "replicated", "local+shared", "replicated+shared"] = "auto"
    """Where checkpoints live (harness/ckpt_tiers.py): shared (the durable tier), local (rank 0's node-local fast tier only), replicated (that fast tier plus a copy on a node of another power domain), or a fast tier plus shared; auto: local+shared when local_every_steps > 0, else shared. The fast tier saves every local_every_steps (every_steps when 0)."""

    bug_late_snapshot: bool = False
    """A deliberate bug, for showing the checkpoint freshness checker at work (NeMo-RL #3312): an async save of step N snapshots the state only after the optimizer step of N+1, and writes it as step N. Never in a real run."""

    bug_pointer_before_fsync: bool = False
    """A deliberate bug, for showing the crash-point sweep at work (KempnerForge #102): the LATEST pointer is replaced before the checkpoint's files are fsynced, so a power loss in between leaves it naming a torn checkpoint. Never in a real run."""

    @property
    def placement_parts(self) -> tuple[str, ...]:
        """The placement as its parts: ("shared",), ("replicated", "shared")..."""
        if self.placement == "auto":
            return ("local", "shared") if self.local_every_steps > 0 else ("shared",)
        return tuple(self.placement.split("+"))

    @property
    def fast_tier(self) -> bool:
        """Whether a node-local fast tier is written."""
        return any(p in ("local", "replicated") for p in self.placement_parts)

    def __post_init__(self) -> None:
        if self.placement == "shared" and self.local_every_steps > 0:
            raise ConfigError("checkpoint.placement: shared keeps no node-local tier, but "
                              f"checkpoint.local_every_steps is {self.local_every_steps}: set 0, or a "
                              "placement with a fast tier (local+shared, replicated+shared)")
        if self.local_every_steps < 0 or self.save_retries < 0 or self.max_failed_saves < 0 \
                or self.save_deadline_s < 0:
            raise ConfigError("checkpoint.local_every_steps, checkpoint.save_retries, "
                              "checkpoint.max_failed_saves and checkpoint.save_deadline_s must be >= 0")
        if self.every_steps < 0 or self.every_seconds < 0:
            raise ConfigError("checkpoint.every_steps and checkpoint.every_seconds must be >= 0")
        if self.bug_late_snapshot and self.mode != "async":
            raise ConfigError("checkpoint.bug_late_snapshot reproduces a bug of async saves: it "
                              "needs checkpoint.mode: async")
        if self.keep < 2:
            raise ConfigError(
                f"checkpoint.keep is {self.keep}; keep at least 2 checkpoints: the newest may be "
                "mid-write or corrupt when a failure hits, and the previous one is the fallback"
            )


@dataclass
class FailureConfig:
    watchdog_s: float = 10.0
    """Heartbeat watchdog: a peer silent this long is declared hung (0 = off: plain gloo)."""
    heartbeat_s: float = 0.5
    """Interval between the pings each rank sends every peer over its liveness socket."""
    collective_timeout_s: float = 30.0
    """Timeout of each collective and of process-group init (0 = gloo's default, 30 min)."""
    store_timeout_s: float = 0.0
    """Timeout of each call to the group's c10d store (init, barriers, the peer exchange); 0 = the collective timeout, at most 60 s. A store that stalls longer fails the round instead of blocking it."""
    restart_delay_s: float = 0.0
    """Sleep this long when a rank starts again after a failure, before it joins the group: a slow restart (node reboot, image pull, scheduler queue)."""
    emergency_checkpoint: bool = True
    """On SIGTERM with every peer alive (a drain, a preemption, scancel), the group agrees on a step, checkpoints it and leaves (harness.preempt); off: the rank leaves at once and the steps since the last checkpoint are lost."""
    emergency_checkpoint_s: float = 15.0
    """The most seconds from SIGTERM to the agreed stop step; past it the rank leaves without an emergency checkpoint (keep it under the scheduler's grace: Slurm's KillWait or GraceTime)."""
    late_node_wait_s: float = 60.0
    """The job's first group, formed by an elastic torchrun (``--nnodes MIN:MAX``) with fewer nodes than launched (one still starting on a loaded host), waits up to this long before its first step for torchrun to admit the late ones (harness.admission); then trains at the size it has. Faults planned at a step hit the job at its full size, not a restart that lets a latecomer in (0 = train at once)."""

    def __post_init__(self) -> None:
        if self.emergency_checkpoint_s <= 0:
            raise ConfigError(f"failure.emergency_checkpoint_s must be > 0, got {self.emergency_checkpoint_s}: "
                              "a rank must be given some time to reach the agreed stop step")
        if self.watchdog_s < 0 or self.collective_timeout_s < 0 or self.restart_delay_s < 0 \
                or self.store_timeout_s < 0 or self.late_node_wait_s < 0:
            raise ConfigError("failure.watchdog_s, failure.collective_timeout_s, failure.store_timeout_s, "
                              "failure.restart_delay_s and failure.late_node_wait_s must be >= 0")
        if self.heartbeat_s <= 0:
            raise ConfigError("failure.heartbeat_s must be > 0")
        if self.watchdog_s and self.watchdog_s < 2 * self.heartbeat_s:
            raise ConfigError(
                f"failure.watchdog_s ({self.watchdog_s}) must be at least twice failure.heartbeat_s "
                f"({self.heartbeat_s}): one late heartbeat must not look like a hang"
            )


@dataclass
class DetectConfig:
    """Silent-data-corruption detectors (docs/sdc.md); each can be switched off, and what
    each costs is reported at the end of the run (run_end.detector_s)."""

    nonfinite: bool = True
    """NaN/Inf guard: a non-finite loss or gradient norm on any rank, checked every step."""
    spike: bool = True
    """Loss and gradient-norm spike detection: a robust z-score against the recent steps."""
    spike_z: float = 25.0
    """Robust z-score (median and MAD of the window) above which a loss or gradient norm is a spike (fault-free runs of the bundled models reach about 10 on the gradient norm)."""
    spike_window: int = 50
    """Steps the spike detector compares against; it judges once it has 20 of them."""
    digest_every: int = 10
    """Cross-replica parameter digest every N steps and before every checkpoint save: data-parallel replicas must be bitwise equal (0 = off). While the fingerprint runs, the periodic digest is of the parameters the step's update is about to read (it rides with the fingerprint; a pass vouches for the previous step's state); the one before a save is of the state saved."""
    fingerprint: Literal["off", "params", "update"] = "params"
    """Every step, before the optimizer update: an exact checksum of the bits of each replica's parameters (params; on steps that end in a checkpoint, of everything the update reads), or of everything the update reads at every step (update: parameters, gradients, optimizer state), compared across replicas: a single flipped bit of what is checksummed is seen at that step, by construction (off = none)."""
    golden_every: int = 50
    """Golden self-test every N steps: a fixed batch through forward/backward with the initial weights on each rank, compared bitwise with the result recorded at start (0 = off)."""
    ckpt_checksum: bool = True
    """sha256 of every checkpoint file read back after writing and verified on load (off: loaded unverified)."""
    on_suspect: Literal["rollback", "quarantine"] = "rollback"
    """What a corruption verdict that names a suspect rank does: rollback (the group restarts from a clean checkpoint) or quarantine (that too, and the suspect's node leaves the job: its agent quits the rendezvous, so the next round goes on with a spare, topology.spares, or shrinks, topology.min_nodes). A faulty core stays faulty after a restart; only excluding its node ends it."""

    def __post_init__(self) -> None:
        if self.digest_every < 0 or self.golden_every < 0:
            raise ConfigError("detect.digest_every and detect.golden_every must be >= 0 (0 = off)")
        if self.spike_z <= 0:
            raise ConfigError(f"detect.spike_z must be > 0, got {self.spike_z}")
        if self.spike_window < 20:
            raise ConfigError(f"detect.spike_window is {self.spike_window}; at least 20: a "
                              "median and MAD over fewer steps call ordinary noise a spike")


@dataclass
class ProgressConfig:
    """The step-progress watchdog (harness/progress.py): a live rank whose training loop
    stops is found by its progress, not its heartbeat, and named ``stalled``."""

    timeout_s: float = 0.0
    """No completed step on this rank for this long: every rank's progress is gathered and the stuck one is named (stalled: alive, loop not progressing; hang: frozen). 0 = off (default): set it above the longest legitimate pause between two steps (a sync checkpoint save, a slow first step)."""

    def __post_init__(self) -> None:
        if self.timeout_s < 0:
            raise ConfigError(f"progress.timeout_s must be >= 0 (0 = off), got {self.timeout_s}")


@dataclass
class SlowRankConfig:
    """The slow-rank detector (harness/slowrank.py): each rank's host time per step (from
    the step's last collective to its next first one) against its peers', carried on the
    collective every step makes anyway."""

    enabled: bool = False
    """Look for a rank slower than its peers and report it (failure class slow; training goes on). Off by default: a scenario that wants slowness judged turns it on."""
    ratio: float = 2.0
    """A rank is slow when its host time stayed at or above this multiple of its peers' through the whole window (the least of its window against the median of its peers' least). 2, not less: fault-free 2 x 2 runs on a loaded 2-core host reach 1.5x between healthy ranks; a throttled rank is 4-8x by the time its step factor passes 1.5."""
    window: int = 5
    """Steps the rank must be slow at every one of (one slow step, a checkpoint snapshot or a page fault, is not a slow rank)."""
    min_excess_s: float = 0.005
    """And at least this many seconds above its peers: on very short steps a ratio alone is noise."""
    noise_mads: float = 3.0
    """And at least this many robust standard deviations (1.4826 x the median absolute deviation of the peers' host times in their windows) above them: a margin that widens with the host's own noise. 0: none."""
    persist: int = 3
    """Consecutive steps the same rank must be found slow before it is reported (one window's coincidence is not a slow rank)."""

    def __post_init__(self) -> None:
        if self.ratio <= 1.0:
            raise ConfigError(f"slow_rank.ratio must be > 1, got {self.ratio}: a rank as fast as its "
                              "peers is not slow")
        if self.window < 3:
            raise ConfigError(f"slow_rank.window is {self.window}; at least 3: a median of fewer steps "
                              "is one slow step")
        if self.persist < 1:
            raise ConfigError(f"slow_rank.persist must be >= 1 (steps in a row), got {self.persist}")
        if self.noise_mads < 0:
            raise ConfigError(f"slow_rank.noise_mads must be >= 0 (0 = no noise margin), got {self.noise_mads}")
        if self.min_excess_s < 0:
            raise ConfigError(f"slow_rank.min_excess_s must be >= 0, got {self.min_excess_s}")


@dataclass
class HarnessConfig:
    steps: int = 200
    """Optimizer steps to train."""
    global_batch: int = 16
    """Sequences per step across all ranks; must be divisible by the world size."""
    lr: float = 3e-3
    """Peak learning rate (AdamW)."""
    warmup_steps: int = 10
    """Linear warm-up steps before cosine decay."""
    seed: int = 0
    """Seed of weights, data order and every RNG."""
    data: str = ""
    """Training text (UTF-8); empty = the public-domain text shipped with the harness."""
    run_dir: str = "."
    """Where the final digest (final.json) and default checkpoints go."""
    allow_fresh_start: bool = False
    """Start from scratch when every checkpoint is corrupt (default: fail, naming them)."""
    step_delay_s: float = 0.0
    """Extra sleep per step, to stretch runs for experiments."""
    data_workers: int = 0
    """DataLoader worker processes that prepare the batches (0: the rank itself). They are
    children of the rank with its environment, as in a real job's input pipeline."""
    data_stream: bool = False
    """Read each step's slice of the data file from storage (as an input pipeline reading shards does), not only once at start (harness/data_path.py)."""
    data_deadline_s: float = 0.0
    """With data_stream: a read of the data file still running after this many seconds is a storage failure of this rank on the data path (0 = off)."""
    warm_start: bool = False
    """Start ranks from a per-node zygote that has imported torch already (harness/zygote.py):
    a restart pays rendezvous and checkpoint load, not Python's imports (kill -> next step
    2.0 s warm, 5.7 s cold, 4.7 s plain torchrun on 2 cores; benchmarks/harness_bench.py). Off by
    default: recovery is what trainchaos measures, and a cold restart is what most stacks
    pay; on for quick iterations (tests, demos; TRAINCHAOS_WARM_START=1 turns it on where a
    scenario does not set it), and for jobs of 16 ranks or more, where neither the scenario
    nor TRAINCHAOS_WARM_START sets it: there a cold start measures the host's CPU importing
    torch once per rank more than the job (docs/scale.md#emulated-cluster-size). On the local backend the node's torchrun agent is forked too,
    from imports the controller's agent zygote did once (harness/agent_zygote.py), and on
    every backend its rendezvous names the events it records without inspect.stack()
    (harness/rdzv_records.py: most of a warm agent's CPU). The run record says which was
    measured."""
    device: Literal["cpu", "cuda"] = "cpu"
    """Where each rank trains: cpu, or cuda (the model, its gradients, optimizer state and activations on the GPU numbered local_rank modulo the GPUs the node has; several ranks may share one GPU, since the group talks gloo, never NCCL: docs/gpu.md). Validation refuses cuda where torch sees no CUDA device."""
    cuda_ranks: int = 0
    """With device cuda: how many of the lowest ranks train on CUDA, the others on CPU beside them over gloo (a CUDA rank among CPU ranks, the one such mix one GPU allows); 0: every rank."""
    data_restore_position: bool = True
    """Test aid: false makes the sampler ignore the data position saved in the checkpoint (every restart starts over at the first batch), the dataloader bug the exactly-once data checker must catch (docs/checkers.md)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    failure: FailureConfig = field(default_factory=FailureConfig)
    detect: DetectConfig = field(default_factory=DetectConfig)
    progress: ProgressConfig = field(default_factory=ProgressConfig)
    slow_rank: SlowRankConfig = field(default_factory=SlowRankConfig)

    def __post_init__(self) -> None:
        _positive(self, "steps", "global_batch")
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if self.warmup_steps < 0 or self.step_delay_s < 0:
            raise ConfigError("warmup_steps and step_delay_s must be >= 0")
        if not 0 <= self.data_workers <= 8:
            raise ConfigError(f"data_workers must be between 0 and 8, got {self.data_workers}")
        if self.data_deadline_s < 0:
            raise ConfigError(f"data_deadline_s must be >= 0, got {self.data_deadline_s}")
        if self.cuda_ranks < 0:
            raise ConfigError(f"cuda_ranks must be >= 0 (0 = every rank), got {self.cuda_ranks}")
        if self.cuda_ranks and self.device != "cuda":
            raise ConfigError("cuda_ranks needs device: cuda (it says how many ranks train on the GPU)")
        if self.data_deadline_s and not self.data_stream:
            raise ConfigError("data_deadline_s needs data_stream: true (without it the data file "
                              "is read once, at start)")
        deadline, collective = self.checkpoint.save_deadline_s, self.failure.collective_timeout_s
        progress = self.progress.timeout_s
        if progress and collective and progress >= collective:
            raise ConfigError(
                f"progress.timeout_s ({progress:g}) must be below failure.collective_timeout_s "
                f"({collective:g}): a stalled rank must be named by the progress watchdog before a "
                "peer's collective times out and blames nobody")
        if deadline and collective and deadline >= collective:
            raise ConfigError(
                f"checkpoint.save_deadline_s ({deadline:g}) must be below failure.collective_timeout_s "
                f"({collective:g}): a stalled sync save must be reported by its writer before a "
                "peer's collective times out and blames it as hung")

    def check_world_size(self, world_size: int) -> None:
        if self.global_batch % world_size:
            raise ConfigError(
                f"global_batch ({self.global_batch}) must be divisible by the world size "
                f"({world_size}): every rank takes an equal slice of each batch"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _positive(obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value <= 0:
            prefix = {"ModelConfig": "model."}.get(type(obj).__name__, "")
            raise ConfigError(f"{prefix}{name} must be > 0, got {value}")


def field_docs(cls: type) -> dict[str, str]:
    """Field docstrings (the string literal after each field), read from the source."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = cast(ast.ClassDef, tree.body[0]).body  # the source of a class is its definition
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                docs[node.target.id] = str(nxt.value.value)
    return docs


SECTIONS = {"model": ModelConfig, "checkpoint": CheckpointConfig, "failure": FailureConfig,
            "detect": DetectConfig, "progress": ProgressConfig, "slow_rank": SlowRankConfig}
"""The sections of ``HarnessConfig``: each a dataclass, a nested mapping, a flag prefix."""
