"""Lightning adapter: one callback reports a Trainer's run through the probe.

    trainer = lightning.Trainer(..., callbacks=[..., ChaosCallback()])   # the one line

What it reports, from Lightning's own view:

- ``rank_start`` at ``setup`` (global rank, local rank, world size, node, pid), so faults
  find the rank and metrics see the restart;
- ``ckpt_save_start``/``ckpt_save_end`` around each checkpoint file the strategy writes
  (step, bytes, seconds) and ``ckpt_load`` when it reads one (the step it resumes from): the
  strategy's ``CheckpointIO`` is wrapped by one that passes every call through;
- ``step_end`` after each optimizer step (``trainer.global_step``, the batch's loss), with
  the probe's fault points at ``step_begin`` and ``after_backward`` (in-process faults),
  and the sample indices of the batches the step trained with ``trainer.current_epoch``
  (the data exactly-once checker's input): the training dataloader's dataset is hooked
  where its batches are fetched (``chaos.adapters.batches``), so what is reported is what
  Lightning's own sampler, and its restore of a mid-epoch checkpoint, handed the step;
- ``run_end`` with the model digest at the end of ``fit``, from global rank 0.

It observes and never steers: no argument, return value or state of Lightning changes (a
test trains the example with and without it and compares the digests). Imports only the
probe; ``lightning`` is imported here because a Callback must subclass its base class, and
the script importing this module has imported it already.
"""

from __future__ import annotations

import os
import time
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO

from chaos import contract, probe
from chaos.adapters.batches import BatchRecorder

__all__ = ["ChaosCallback"]


class _ReportingCheckpointIO(CheckpointIO):
    """The strategy's own CheckpointIO, every call passed through; saves and loads reported."""

    def __init__(self, inner: CheckpointIO) -> None:
        self.inner = inner

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        step = checkpoint.get("global_step")
        probe.emit("ckpt_save_start", step=step, tier="shared", path=str(path))
        began = time.perf_counter()
        self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)
        seconds = time.perf_counter() - began
        size = os.path.getsize(path) if os.path.isfile(str(path)) else None
        probe.emit("ckpt_save_end", step=step, tier="shared", bytes=size, seconds=seconds,
                   blocked_seconds=seconds, path=str(path))

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        checkpoint = self.inner.load_checkpoint(path, *args, **kwargs)
        probe.emit("ckpt_load", step=checkpoint.get("global_step"), tier="shared",
                   verified=False, path=str(path))
        return checkpoint

    def remove_checkpoint(self, path: Any) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()

    def __getattr__(self, name: str) -> Any:  # anything else the strategy asks of its IO
        return getattr(self.inner, name)


class ChaosCallback(pl.Callback):
    """Reports the Trainer's steps, checkpoints and final state through ``chaos.probe``."""

    def __init__(self) -> None:
        self._reported_step = -1
        self._started = False
        self._batches = BatchRecorder()

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not self._started:
            self._started = True
            probe.emit("rank_start", rank=trainer.global_rank, local_rank=trainer.local_rank,
                       world_size=trainer.world_size,
                       node=int(os.environ.get(contract.NODE_ENV, trainer.node_rank)),
                       pid=os.getpid(), stack="lightning")
        strategy = trainer.strategy
        if not isinstance(strategy.checkpoint_io, _ReportingCheckpointIO):
            strategy.checkpoint_io = _ReportingCheckpointIO(strategy.checkpoint_io)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._reported_step = trainer.global_step
        optimizers = trainer.optimizers
        probe.watch(model=pl_module, optimizer=optimizers[0] if optimizers else None)
        # A sized loader has fetched nothing yet here (Lightning prefetches only unsized ones);
        # the same dataset may serve validation, which runs with the module in eval mode.
        self._batches.recording = lambda: bool(pl_module.training)
        loaders = trainer.train_dataloader
        for loader in loaders.values() if isinstance(loaders, dict) else \
                loaders if isinstance(loaders, list | tuple) else [loaders]:
            self._batches.hook(loader)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._batches.report_trained(epoch=trainer.current_epoch)
        probe.fault_point("step_begin", step=trainer.global_step + 1, model=pl_module)

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # DDP's all-reduce ran inside backward: the gradients here are the averaged ones.
        probe.fault_point("after_backward", step=trainer.global_step + 1)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if step == self._reported_step:  # gradient accumulation: no optimizer step yet
            return
        self._reported_step = step
        probe.step_end(step, _loss(outputs))
        if trainer.global_rank == 0:
            # The fault-free twin's state at each step (a no-op outside it), which the
            # freshness checker compares each saved .ckpt's state_dict with.
            probe.state_digest(step, model=pl_module)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.global_rank == 0:
            probe.final_state(trainer.global_step, model=pl_module)
        probe.emit("rank_exit", code=0, reason="completed")


def _loss(outputs: Any) -> float | None:
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    try:
        return float(loss.detach()) if loss is not None else None
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return None
