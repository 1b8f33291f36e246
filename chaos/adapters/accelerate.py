"""Accelerate adapter: one call after ``accelerator.prepare`` reports the loop through the probe.

    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    chaos.adapters.accelerate.instrument(accelerator, model=model, optimizer=optimizer)  # the one line

What it reports, from the loop's own calls into Accelerate:

- ``rank_start`` at once (process index, local index, world size, node, pid);
- ``step_end`` after each optimizer step that really stepped (a post-step hook on the torch
  optimizer: accumulation steps and skipped steps are not counted), with the loss last given
  to ``accelerator.backward``; the probe's fault points ``step_begin`` (a forward pre-hook on
  the model) and ``after_backward`` (after each backward);
- with each ``step_end``, the sample indices of the batches its backward passes trained (one
  fetched batch per ``backward``: the one before the loader's lookahead), labelled with the epoch Accelerate's loader set for the
  pass that fetched them (``DataLoaderShard.set_epoch``, its ``iteration``): the datasets of
  the prepared loaders are hooked where batches are fetched (``chaos.adapters.batches``), and
  so is every loader ``accelerator.skip_first_batches`` returns on a mid-epoch resume, so
  what is reported is what Accelerate's sampler, skip and epoch handed the step;
- ``ckpt_save_start``/``ckpt_save_end`` around ``accelerator.save_state`` (main process:
  the one that writes the model and optimizer files) and ``ckpt_load`` after
  ``load_state``. The step of a loaded checkpoint is the trailing number of its folder's
  name (``step_40``, ``step-00000040``), as Accelerate's own examples name them; the step
  count goes on from there;
- ``run_end`` with the model digest at ``accelerator.end_training()``, from process 0;
- in the fault-free twin only, ``state_digest`` after each optimizer step (process 0): what
  the checkpoint freshness checker compares each ``save_state`` folder's weights with.

It observes and never steers: ``backward``, ``save_state``, ``load_state``,
``skip_first_batches`` and ``end_training`` are replaced on this one Accelerator instance by
functions that call the originals with the same arguments and return their results; the
loaders' ``set_epoch`` and their datasets' batch fetch likewise; the hooks only read (a
test trains the example with and without it and compares the digests). Imports only the
probe; Accelerate and torch are the caller's.

An HF ``transformers.Trainer`` would take a ``TrainerCallback`` instead; transformers is not
installed here, so none is shipped.
"""

from __future__ import annotations

import functools
import os
import re
import time
from typing import Any

from chaos import contract, probe
from chaos.adapters.batches import BatchRecorder

__all__ = ["instrument", "step_of_checkpoint"]

_TRAILING_DIGITS = re.compile(r"(\d+)$")
_MARK = "_trainchaos_instrumented"


def step_of_checkpoint(path: Any) -> int | None:
    """The step a checkpoint folder's name ends with (``.../step_40`` -> 40); None if none."""
    match = _TRAILING_DIGITS.search(os.path.basename(os.path.normpath(str(path))))
    return int(match.group(1)) if match else None


def _folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(path) for name in names)


class _Reporter:
    def __init__(self, accelerator: Any, model: Any) -> None:
        self.accelerator = accelerator
        self.model = model
        self.step = 0
        self.loss: float | None = None

    def after_optimizer_step(self, *_: Any) -> None:
        self.step += 1
        probe.step_end(self.step, self.loss)
        if self.model is not None and self.accelerator.is_main_process:
            # The twin's reference for checkpoint freshness (a no-op outside the twin):
            # save_state's model.safetensors holds this state dict (chaos.ckptformat.hf).
            probe.state_digest(self.step, model=self.model)


def instrument(accelerator: Any, *, model: Any = None, optimizer: Any = None) -> Any:
    """Report the loop of ``accelerator`` through ``chaos.probe``; returns the accelerator.

    ``model`` (prepared or not) is digested at the end; ``optimizer`` (prepared or not)
    counts the steps. Calling it twice on one accelerator is harmless."""
    if getattr(accelerator, _MARK, False):
        return accelerator
    setattr(accelerator, _MARK, True)
    reporter = _Reporter(accelerator, model)
    probe.emit("rank_start", rank=accelerator.process_index, local_rank=accelerator.local_process_index,
               world_size=accelerator.num_processes,
               node=int(os.environ.get(contract.NODE_ENV, os.environ.get("GROUP_RANK", "0"))),
               pid=os.getpid(), stack="accelerate")
    if model is not None:
        probe.watch(model=model, optimizer=optimizer)

        def step_begin(module: Any, inputs: Any) -> None:
            # Before the step's forward: where in-process faults on weights land. Every
            # forward passes here (accumulation micro-steps too); the probe fires a planned
            # fault once. The hook returns None, so the inputs go on unchanged.
            probe.fault_point("step_begin", step=reporter.step + 1, model=model)

        model.register_forward_pre_hook(step_begin)
    # Fetches while the model is in eval mode (an evaluation pass) train nothing.
    batches = BatchRecorder(recording=(lambda: bool(model.training)) if model is not None else None)
    for loader in getattr(accelerator, "_dataloaders", ()):
        _follow(batches, loader)
    if optimizer is not None:
        # An AcceleratedOptimizer holds the torch optimizer that really steps.
        inner = getattr(optimizer, "optimizer", optimizer)
        inner.register_step_post_hook(reporter.after_optimizer_step)

    backward = accelerator.backward

    @functools.wraps(backward)
    def reported_backward(loss: Any, **kwargs: Any) -> Any:
        # A prepared loader reads one batch ahead, except when it yields its last one.
        batches.report_trained(ahead=0 if accelerator.gradient_state.end_of_dataloader else 1)
        result = backward(loss, **kwargs)
        try:
            reporter.loss = float(loss.detach())
        except (AttributeError, TypeError, ValueError, RuntimeError):
            reporter.loss = None
        probe.fault_point("after_backward", step=reporter.step + 1)
        return result

    save_state = accelerator.save_state

    @functools.wraps(save_state)
    def reported_save_state(output_dir: Any = None, *args: Any, **kwargs: Any) -> Any:
        writer = accelerator.is_main_process
        if writer:
            probe.emit("ckpt_save_start", step=reporter.step, tier="shared", path=str(output_dir))
        began = time.perf_counter()
        result = save_state(output_dir, *args, **kwargs)
        if writer:
            seconds = time.perf_counter() - began
            where = str(result or output_dir)
            probe.emit("ckpt_save_end", step=reporter.step, tier="shared",
                       bytes=_folder_bytes(where) if os.path.isdir(where) else None,
                       seconds=seconds, blocked_seconds=seconds, path=where)
        return result

    load_state = accelerator.load_state

    @functools.wraps(load_state)
    def reported_load_state(input_dir: Any = None, *args: Any, **kwargs: Any) -> Any:
        result = load_state(input_dir, *args, **kwargs)
        step = step_of_checkpoint(input_dir) if input_dir is not None else None
        if step is not None:
            reporter.step = step
        probe.emit("ckpt_load", step=step, tier="shared", verified=False, path=str(input_dir))
        return result

    end_training = accelerator.end_training

    @functools.wraps(end_training)
    def reported_end_training(*args: Any, **kwargs: Any) -> Any:
        result = end_training(*args, **kwargs)
        if accelerator.process_index == 0:
            probe.final_state(reporter.step, loss=reporter.loss,
                              model=accelerator.unwrap_model(model) if model is not None else None)
        probe.emit("rank_exit", code=0, reason="completed")
        return result

    skip_first_batches = accelerator.skip_first_batches

    @functools.wraps(skip_first_batches)
    def followed_skip_first_batches(*args: Any, **kwargs: Any) -> Any:
        return _follow(batches, skip_first_batches(*args, **kwargs))

    accelerator.backward = reported_backward
    accelerator.skip_first_batches = followed_skip_first_batches
    accelerator.save_state = reported_save_state
    accelerator.load_state = reported_load_state
    accelerator.end_training = reported_end_training
    return accelerator


def _follow(batches: BatchRecorder, loader: Any) -> Any:
    if batches.hook(loader):
        batches.follow_epoch(loader)
    return loader
