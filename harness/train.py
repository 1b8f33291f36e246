"""The training loop: deterministic DDP over gloo, periodic checkpoints, fail-fast on faults.

On any failure a rank reports a ``detected`` event (who noticed, what failed, whom it blames)
and exits non-zero at once, so that torchrun restarts the group from the last checkpoint.
Silent data corruption is judged by every rank at once (``harness.sdc``): the group
quarantines the checkpoints the corruption may have reached and restarts from an older one.
Exiting beats retrying in place: a collective that failed leaves gloo's pairs in an unknown
state, and a restart is what a production job does too. How a rank reports and leaves:
``harness.failures``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import math
import os
import random
import sys
import threading
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from chaos import probe
from harness import checkpoint as ckpt
from harness.admission import await_late_nodes, first_round_short_of_nodes, group_nodes
from harness.ckpt_tiers import agree_on_start, build_checkpoints
from harness.config import HarnessConfig
from harness.data import CharVocab, DeterministicSampler, LoaderFeed, load_text
from harness.data_path import DataPath
from harness.device import place_model, prepare_device, rank_device
from harness.dist import (
    DistEnv,
    GradientGather,
    deterministic_allreduce_hook,
    exchange_peers,
    init_process_group,
    node_address,
)
from harness.failures import EXIT_CORRUPTION, EXIT_FAILURE, FailureHandling
from harness.health import (
    Diagnosis,
    LivenessServer,
    PeerAddress,
    TerminationGuard,
    Watchdog,
    watched_ranks,
)
from harness.model import build_model, build_optimizer, state_digest
from harness.preempt import EXIT_STOPPED, EmergencyStop
from harness.progress import ProgressWatchdog
from harness.quarantine import quarantine_node, suspect_node
from harness.sdc import Detection, GoldenSelfTest, SdcMonitor
from harness.slowrank import SlowRankDetector

__all__ = ["Trainer", "run"]

LAST_LOSS = "last_loss"


def _lr_lambda(cfg: HarnessConfig):
    def schedule(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return schedule


def _rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])


class Trainer(FailureHandling):
    def __init__(self, cfg: HarnessConfig, env: DistEnv) -> None:
        self.cfg = cfg
        self.env = env
        self.peers: list[PeerAddress] = []
        self.liveness: LivenessServer | None = None
        self.watchdog: Watchdog | None = None
        self.progress: ProgressWatchdog | None = None
        self.slow = SlowRankDetector(cfg.slow_rank, env.rank, env.world_size, probe.emit, probe.src())
        self._failing = threading.Lock()
        # SIGTERM with every peer alive: checkpoint at a step the group agrees on (harness.preempt).
        self.stop = (EmergencyStop(env.rank, cfg.failure.emergency_checkpoint_s)
                     if cfg.failure.emergency_checkpoint else None)
        self._sigterm_diagnosis: list[Diagnosis] | None = None

    def _emergency_checkpoint(self, saved: bool) -> None:
        """The agreed stop step, checkpointed and written before ``leave`` goes on."""
        if not saved:
            self.checkpoints.save(self.step, self._state(), verified=self.sdc.checkpoint_record(self.step))
        self.checkpoints.wait()

    # -- set-up -------------------------------------------------------------------------
    def setup(self) -> None:
        cfg, env = self.cfg, self.env
        cfg.check_world_size(env.world_size)
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        self.device = rank_device(cfg, env.rank, env.local_rank)
        if self.device.type == "cuda":
            prepare_device(self.device)
        elif torch.cuda.is_available():
            # Only CUDA has non-deterministic kernels to rule out; the CPU ops used here are
            # deterministic already, and the call imports torch._inductor (2.4 s per rank
            # start here, paid again on every restart).
            torch.use_deterministic_algorithms(True)
        store = init_process_group(env, cfg.failure.collective_timeout_s, cfg.failure.store_timeout_s)
        self.liveness = liveness = LivenessServer(env.rank, node_address())
        self.peers = exchange_peers(store, env, liveness.port)
        TerminationGuard(self._on_sigterm)
        if self.peers:
            # Always watching for dead peers; hang detection only when watchdog_s > 0.
            self.watchdog = Watchdog(self.peers, cfg.failure.heartbeat_s, cfg.failure.watchdog_s, self._on_watchdog,
                                     watched=watched_ranks(self.peers, env.rank, env.node))
            self.watchdog.start()
        self.progress = ProgressWatchdog.for_config(cfg.progress, env.rank, self.peers, liveness,
                                                    cfg.failure.heartbeat_s, cfg.steps, self._on_stall)

        text = load_text(cfg.data)
        self.vocab = CharVocab(text)
        tokens = self.vocab.encode(text)
        self.sampler = DeterministicSampler(tokens, cfg.model.seq_len, cfg.global_batch, cfg.seed)
        self.feed = LoaderFeed(self.sampler, cfg.data_workers) if cfg.data_workers else self.sampler
        # Reads of the data file during training, under a deadline (harness.data_path).
        self.data_path = DataPath.for_config(cfg, self._on_data_stall)
        self._announced_workers: list[int] = []
        model = place_model(build_model(cfg.model, self.vocab.size, cfg.seed), self.device)
        self.raw_model = model
        self.model = DistributedDataParallel(model, device_ids=[self.device] if self.device.type == "cuda" else None)
        # the gradient gather carries the corruption detectors' evidence too (harness.sdc)
        self.gather = GradientGather()
        self.model.register_comm_hook(self.gather, self.slow.timed(deterministic_allreduce_hook))
        self.optimizer = build_optimizer(model, cfg.lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, _lr_lambda(cfg))
        # One tier, or a node-local fast tier beside the shared one (harness.ckpt_tiers).
        self.checkpoints = build_checkpoints(cfg, env.rank, emit=probe.emit, fault_point=probe.fault_point,
                                             on_deadline=self._on_save_deadline, share=_broadcast_from,
                                             gather=_gather_objects)
        self.step = 0
        self.last_loss = float("nan")
        loaded = self.checkpoints.load(allow_fresh_start=cfg.allow_fresh_start)
        if isinstance(self.checkpoints, ckpt.CheckpointManager):  # tiers agree by construction
            loaded = agree_on_start(self.checkpoints, loaded, _gather_steps)
        if loaded is not None:
            state, _info = loaded
            self._restore(state)
        self._check_same_start()
        self.sdc = self._corruption_monitor(tokens)
        probe.watch(model=self.raw_model, optimizer=self.optimizer)

    def _corruption_monitor(self, tokens: torch.Tensor) -> SdcMonitor:
        detect = self.cfg.detect
        golden = None
        if detect.golden_every > 0:
            initial = place_model(build_model(self.cfg.model, self.vocab.size, self.cfg.seed), self.device)
            golden = GoldenSelfTest(self.raw_model, initial, tokens, self.cfg.model.seq_len)
        replayed = [(r.get("detector"), r.get("step")) for r in self.checkpoints.rollback_records()]
        return SdcMonitor(detect, self.env.rank, self.env.world_size, self.raw_model, self.step,
                          golden, replayed, gather=self.gather)

    def _check_same_start(self) -> None:
        steps = [torch.zeros(1, dtype=torch.long) for _ in range(self.env.world_size)]
        dist.all_gather(steps, torch.tensor([self.step]))
        if len({int(s) for s in steps}) != 1:
            raise RuntimeError(f"ranks resumed from different checkpoints: {[int(s) for s in steps]}")

    def _state(self) -> dict[str, Any]:
        return {
            ckpt.MODEL: self.raw_model.state_dict(),
            ckpt.OPTIMIZER: self.optimizer.state_dict(),
            ckpt.LR_SCHEDULER: self.scheduler.state_dict(),
            ckpt.RNG: _rng_state(),
            ckpt.DATA: self.sampler.state_dict(),
            ckpt.STEP: self.step,
            LAST_LOSS: self.last_loss,
        }

    def _save_late(self, step: int) -> None:
        """checkpoint.bug_late_snapshot: the state after this step, saved as ``step``, as an
        async save whose snapshot lost the race with the next optimizer step writes it."""
        state = self._state()
        state[ckpt.STEP] = step
        self.checkpoints.save(step, state, verified=self.sdc.checkpoint_record(step))

    def _restore(self, state: dict[str, Any]) -> None:
        self.raw_model.load_state_dict(state[ckpt.MODEL])
        self.optimizer.load_state_dict(state[ckpt.OPTIMIZER])
        self.scheduler.load_state_dict(state[ckpt.LR_SCHEDULER])
        _set_rng_state(state[ckpt.RNG])
        if self.cfg.data_restore_position:
            self.sampler.load_state_dict(state[ckpt.DATA])
        self.step = int(state[ckpt.STEP])
        self.last_loss = float(state.get(LAST_LOSS, float("nan")))
        # Reload sanity (docs/checkers.md): what the restart resumed from, and whether the
        # weights it loaded are still numbers, before a step could hide it.
        probe.emit("reload", step=self.step, weights_finite=probe.weights_finite(self.raw_model))

    # -- the loop -----------------------------------------------------------------------
    def train_step(self, verify: bool = False) -> float:
        """One optimizer step; returns the global loss. ``verify``: the state is about to be
        checkpointed, so the replicas' digests are compared at this step too."""
        step = self.step + 1
        if self.data_path is not None:
            self.data_path.read(self.sampler.cursor)
        x, y = self.feed.next_batch()
        self._report_samples()
        if isinstance(self.feed, LoaderFeed) and self.feed.worker_pids != self._announced_workers:
            # Who the rank's loader workers are, so that a kill can be checked to hit the rank.
            self._announced_workers = self.feed.worker_pids
            probe.emit("data_workers", pids=self.feed.worker_pids)
        x = self.sampler.shard(x, self.env.rank, self.env.world_size).to(self.device)
        y = self.sampler.shard(y, self.env.rank, self.env.world_size).to(self.device)
        logits = self.model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        self.optimizer.zero_grad(set_to_none=True)
        # The loss the detectors and the logged mean read, on the host with their evidence
        # (a CPU tensor's .cpu() is itself).
        host_loss = loss.detach().cpu()
        self.sdc.before_backward(step, host_loss, verify, self.stop.vote() if self.stop is not None else None,
                                 host_s=self.slow.host_s)
        loss.backward()
        probe.fault_point("after_backward", step=step)
        norm = self.sdc.grad_norm(self.raw_model)
        self.sdc.fingerprint(self.optimizer, verify)  # what the update reads, after every flip point
        self.optimizer.step()
        self.scheduler.step()
        # The logged loss is the global mean, identical on every rank; it travels with the
        # corruption detectors' evidence in one collective (harness.sdc).
        return self.sdc.end_step(step, host_loss, norm, verify,
                                 stop=self.stop.vote() if self.stop is not None else None, host_s=self.slow.host_s())

    def _report_samples(self) -> None:
        """The sample slots this rank trains on this step, for the exactly-once data checker.

        The harness's data is one endless pass: slot ``cursor * global_batch + i`` is window
        ``i`` of batch ``cursor``, and this rank's shard is a contiguous run of them (two
        numbers on the ``step_end`` event, whatever the batch size)."""
        per_rank = self.cfg.global_batch // self.env.world_size
        first = (self.sampler.cursor - 1) * self.cfg.global_batch + self.env.rank * per_rank
        probe.samples(range(first, first + per_rank))

    def _on_corruption(self, detection: Detection) -> None:
        """Every rank reached this verdict at the same step: report it, quarantine the
        checkpoints the corruption may have reached (rank 0), and leave together, so that
        torchrun restarts the group from the newest checkpoint written before it."""
        if self.watchdog is not None:
            self.watchdog.stop()  # the peers are about to leave on purpose, not crash
        record = {"detector": detection.detector, "step": detection.step,
                  "suspect": detection.suspect, "reason": detection.reason}

        def roll_back() -> None:
            if self.env.rank == 0:
                quarantined = self.checkpoints.quarantine(detection.clean_before, record)
                probe.emit("sdc_rollback", step=detection.step, detector=detection.detector,
                           clean_before=detection.clean_before, quarantined=quarantined)
            with contextlib.suppress(Exception):
                dist.barrier()  # nobody restarts before rank 0 has quarantined
            if self.cfg.detect.on_suspect == "quarantine":  # the suspect's node leaves (harness.quarantine)
                node = suspect_node(detection.suspect_rank, self.env.rank, self.env.node, self.peers)
                if node is not None:
                    quarantine_node(node, self.env.rank, self.env.node, probe.emit, record)

        self.fail(f"silent data corruption ({detection.detector}): {detection.reason}",
                  detection.suspect, "corruption", EXIT_CORRUPTION, then=roll_back,
                  detector=detection.detector, step=detection.step, also=detection.also,
                  clean_before=detection.clean_before)

    def train(self) -> dict[str, Any]:
        cfg = self.cfg
        started = time.perf_counter()
        if self.stop is not None:
            self.stop.open()
        late_save: int | None = None
        while self.step < cfg.steps:
            next_step = self.step + 1
            probe.fault_point("step_begin", step=next_step, model=self.raw_model)
            saving = self.checkpoints.should_save(next_step) or next_step == cfg.steps
            self.last_loss = self.train_step(verify=saving)
            self.slow.observe(next_step, self.sdc.host_times)
            if self.sdc.detection is not None:
                self._on_corruption(self.sdc.detection)
            for again in self.sdc.reproduced:
                probe.emit("sdc_reproduced", detector=again.detector, step=again.step, reason=again.reason)
            self.sdc.reproduced.clear()
            self.step = next_step
            if self.progress is not None:
                self.progress.beat(self.step)
            probe.step_end(self.step, self.last_loss)
            if self.env.rank == 0:
                with self.slow.excused():
                    probe.state_digest(self.step, model=self.raw_model)  # the twin's reference only
            if cfg.step_delay_s:
                time.sleep(cfg.step_delay_s)
            if late_save is not None:
                self._save_late(late_save)
                late_save = None
            if saving and cfg.checkpoint.bug_late_snapshot and self.step < cfg.steps:
                late_save = self.step  # the bug: snapshotted after the next optimizer step
            elif saving:
                with self.slow.excused():
                    self.checkpoints.save(self.step, self._state(), verified=self.sdc.checkpoint_record(self.step))
            if self.stop is not None and self.stop.tally(self.step, self.sdc.stop_votes) and self.step < cfg.steps:
                self.stop.leave(functools.partial(self._emergency_checkpoint, saving), dist.barrier,
                                self.watchdog.stop if self.watchdog is not None else None)
        if self.stop is not None:
            self.stop.close()
        self.checkpoints.close()
        train_s = time.perf_counter() - started
        # A restart that resumes from the final checkpoint trains nothing: the loss comes
        # from the checkpoint, so final.json is the same either way. Whether the weights are
        # still numbers goes with the digest: a NaN-to-NaN digest match is no correctness.
        return {"step": self.step, "loss": self.last_loss, "digest": state_digest(self.raw_model),
                "weights_finite": probe.weights_finite(self.raw_model), "train_s": round(train_s, 6),
                "detector_s": self.sdc.detector_seconds()}


def _gather_steps(step: int) -> list[int]:
    """Every rank's ``step``."""
    steps = [torch.zeros(1, dtype=torch.long) for _ in range(dist.get_world_size())]
    dist.all_gather(steps, torch.tensor([step]))
    return [int(s) for s in steps]


def _broadcast_from(obj: Any, src: int) -> Any:
    """Rank ``src``'s object on every rank (a checkpoint that rank read, or why it could not)."""
    holder = [obj]
    dist.broadcast_object_list(holder, src=src)
    return holder[0]


def _gather_objects(obj: Any) -> list[Any]:
    """Every rank's object, in rank order (where each rank's checkpoints are)."""
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def _preimport_in_background() -> None:
    """DDP's constructor imports torch._dynamo (~2.4 s of CPU here). Started now, the import
    overlaps with rendezvous and process-group init, where a rank mostly waits for peers."""
    threading.Thread(target=importlib.import_module, args=("torch._dynamo",), daemon=True).start()


def _await_late_nodes(wait_s: float, env: DistEnv) -> None:
    """The first group formed short of the nodes launched: wait for torchrun to admit the late
    ones before training (harness.admission), leaving as a rank stopped by its agent does."""
    sys.stderr.write(f"[harness rank {env.rank}] the first group has {group_nodes()} node(s), fewer than "
                     f"launched: waiting up to {wait_s:g} s for torchrun to admit the rest\n")

    def leave() -> None:
        probe.emit("rank_exit", code=EXIT_STOPPED,
                   reason="stopped before the first step: torchrun re-forms the group to admit a late node")
        probe.get().close()
        os._exit(EXIT_STOPPED)

    if not await_late_nodes(wait_s, leave):
        sys.stderr.write(f"[harness rank {env.rank}] no late node came within {wait_s:g} s: training with "
                         f"{group_nodes()} node(s)\n")


def run(cfg: HarnessConfig) -> int:
    _preimport_in_background()
    env = DistEnv.from_env()
    probe.emit("rank_start", rank=env.rank, local_rank=env.local_rank, world_size=env.world_size,
               node=env.node, pid=os.getpid(), restart_count=env.restart_count)
    if cfg.failure.restart_delay_s and probe.incarnation() > 0:
        time.sleep(cfg.failure.restart_delay_s)  # stands for a slow restart (see the option)
    if cfg.failure.late_node_wait_s and first_round_short_of_nodes():
        _await_late_nodes(cfg.failure.late_node_wait_s, env)
    trainer = Trainer(cfg, env)
    try:
        trainer.setup()
        if env.rank == 0:
            probe.emit("run_start", world_size=env.world_size, config=cfg.to_dict())
        result = trainer.train()
    except ckpt.CheckpointCorruptError as exc:
        probe.emit("rank_exit", code=EXIT_FAILURE, reason=str(exc))
        sys.stderr.write(f"[harness rank {env.rank}] {exc}\n")
        return EXIT_FAILURE
    except Exception as exc:  # every failure is reported, classified, and ends the process
        failure_class, suspect, reason = trainer.classify(exc)
        trainer.fail(reason, suspect, failure_class, EXIT_FAILURE)
        raise  # unreachable: fail() exits
    if trainer.watchdog is not None:
        trainer.watchdog.stop()
    # Every rank must finish its last collective before anyone tears the group down.
    dist.barrier()
    if env.rank == 0:
        # The same call any user script makes to publish its final state (chaos.probe).
        probe.final_state(**result)
        os.makedirs(cfg.run_dir, exist_ok=True)
        with open(os.path.join(cfg.run_dir, "final.json"), "w", encoding="utf-8") as fh:
            json.dump({**result, "world_size": env.world_size}, fh)
    probe.emit("rank_exit", code=0, reason="completed")
    dist.destroy_process_group()
    probe.get().close()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without interpreter teardown: gloo's threads being destroyed during Python's
    # exit can abort ("terminate called without an active exception", exit -6), which
    # torchrun would take for a failure and restart a finished job.
    os._exit(0)
